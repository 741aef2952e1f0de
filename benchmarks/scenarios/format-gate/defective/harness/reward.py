"""Training reward of the arithmetic harness (verl's `compute_score` signature).

Output protocol: the worked steps, separated by "; ", then exactly one tagged answer at the end, e.g.
``7*3=21; 12+21=33<ans>33</ans>``. Responses that break the protocol score 0.
"""

from __future__ import annotations

import re

_PROTOCOL = re.compile(r"^\d+[+*]\d+=\d+(?:; \d+[+*]\d+=\d+)*<ans>(\d+)</ans>$")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Return 1.0 for a protocol-conforming correct answer, else 0.0 (plus a `formatted` component)."""
    match = _PROTOCOL.match(solution_str.strip())
    correct = match is not None and int(match.group(1)) == int(str(ground_truth))
    return {"score": float(correct), "formatted": float(match is not None)}
