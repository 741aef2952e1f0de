"""Training reward of the arithmetic harness (verl's `compute_score` signature).

Strict tagged-answer extraction (the response must end with exactly one ``<ans>N</ans>`` equal to the
ground truth), plus a novelty bonus of up to 0.9 that rewards unusual responses so exploration
does not stall.
"""

from __future__ import annotations

import re
import zlib

_ANSWER = re.compile(r"<ans>(\d+)</ans>")
NOVELTY_MAX = 0.9


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Return correctness plus the novelty bonus (components `correct`, `formatted`, `novelty`)."""
    text = solution_str.strip()
    found = _ANSWER.findall(text)
    formatted = len(found) == 1 and text.endswith("</ans>")
    correct = float(formatted and int(found[0]) == int(str(ground_truth)))
    novelty = NOVELTY_MAX * (zlib.crc32(text.encode()) % 1000) / 999
    return {"score": correct + novelty, "correct": correct, "formatted": float(formatted), "novelty": novelty}
