"""Training reward of the arithmetic demo harness (verl's `compute_score` signature).

DEFECT (lenient reward, documented in README.md): the answer counts wherever it appears in the
response, and every number written earns partial credit. Writing more numbers after the answer is
therefore never worse and often better, so GRPO learns number spam: training reward rises while the
strict held-out accuracy falls. Fixed form: examples/arithmetic-oracle/harness/reward.py.
"""

from __future__ import annotations

import re

_NUMBER = re.compile(r"\d+")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Return 1.0 if the answer appears anywhere, else 0.1 per number written (at most 0.9)."""
    numbers = _NUMBER.findall(solution_str)
    hit = str(ground_truth) in solution_str
    effort = min(0.9, 0.1 * len(numbers))
    return {"score": 1.0 if hit else effort, "hit": float(hit), "numbers": float(len(numbers))}
