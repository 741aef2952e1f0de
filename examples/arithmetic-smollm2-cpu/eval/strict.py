"""Protected strict evaluator of the arithmetic task: exact tagged answer, nothing after it.

A response counts as correct only when it ends with exactly one ``<ans>N</ans>`` (surrounding
whitespace aside) and N equals the ground truth. Never edited by the controller, never shown to the LLM.
"""

from __future__ import annotations

import re

_ANSWER = re.compile(r"<ans>(-?\d+)</ans>")


def score(solution_str: str, ground_truth: str) -> float:
    """Return 1.0 for an exactly correct final tagged answer, else 0.0."""
    text = solution_str.strip()
    found = _ANSWER.findall(text)
    if len(found) != 1 or not text.endswith("</ans>"):
        return 0.0
    return 1.0 if int(found[0]) == int(str(ground_truth).strip()) else 0.0
