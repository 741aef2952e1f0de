"""Group filter, run before advantage normalisation.

Keeps the groups worth learning from: groups whose rewards vary and whose mean reward is at least
`MIN_MEAN`, i.e. prompts the policy already answers well at least three times in four.
`state` is the trainer-kept JSON dict carried across steps (unused here).
"""

from __future__ import annotations

from statistics import fmean, pstdev

MIN_STD = 0.01
MIN_MEAN = 0.75


def filter_groups(group_rewards: list[list[float]], state: dict) -> list[bool]:
    """Return one keep flag per group."""
    return [len(g) > 1 and pstdev(g) >= MIN_STD and fmean(g) >= MIN_MEAN for g in group_rewards]
