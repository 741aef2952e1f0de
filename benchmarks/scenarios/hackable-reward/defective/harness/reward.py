"""Training reward of the arithmetic harness (verl's `compute_score` signature).

Credits the answer wherever it appears, and gives partial credit for worked numbers.
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
