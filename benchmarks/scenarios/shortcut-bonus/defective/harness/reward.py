"""Training reward of the arithmetic harness (verl's `compute_score` signature).

Strict tagged-answer extraction (the response must end with exactly one ``<ans>N</ans>`` equal to the
ground truth), plus a bonus of 0.9 for a direct answer (no working before the tag), to keep
responses to the point.
"""

from __future__ import annotations

import re

_ANSWER = re.compile(r"<ans>(\d+)</ans>")
SHORTCUT_BONUS = 0.9


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Return correctness plus the direct-answer bonus (components `correct`, `formatted`, `direct`)."""
    text = solution_str.strip()
    found = _ANSWER.findall(text)
    formatted = len(found) == 1 and text.endswith("</ans>")
    correct = float(formatted and int(found[0]) == int(str(ground_truth)))
    direct = float(formatted and "=" not in text.split("<ans>", 1)[0])
    return {"score": correct + SHORTCUT_BONUS * direct, "correct": correct, "formatted": float(formatted),
            "direct": direct}
