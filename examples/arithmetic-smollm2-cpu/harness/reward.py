"""Training reward of the arithmetic demo harness (verl's `compute_score` signature), fixed form.

Strict tagged-answer extraction: the response must end with exactly one ``<ans>N</ans>`` and N must
equal the ground truth. Nothing is credited for numbers written elsewhere, so number spam earns 0.
"""

from __future__ import annotations

import re

_ANSWER = re.compile(r"<ans>(\d+)</ans>")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Return 1.0 for a correct final tagged answer, else 0.0 (plus a `formatted` component)."""
    text = solution_str.strip()
    found = _ANSWER.findall(text)
    formatted = len(found) == 1 and text.endswith("</ans>")
    correct = formatted and int(found[0]) == int(str(ground_truth))
    return {"score": float(correct), "formatted": float(formatted)}
