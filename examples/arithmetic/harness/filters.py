"""Group filter of the arithmetic demo harness (contract: harness/manifest.py).

DEFECT (no group filter, documented in README.md): every group is kept, including groups whose samples
all got the same reward. Those carry zero GRPO advantage and only dilute the token-mean loss. Fixed form:
examples/arithmetic-oracle/harness/filters.py (StdGroupFilter-style).
"""

from __future__ import annotations


def filter_groups(group_rewards: list[list[float]], state: dict) -> list[bool]:
    """Keep every group."""
    return [True] * len(group_rewards)
