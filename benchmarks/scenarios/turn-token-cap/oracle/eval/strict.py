"""Protected strict evaluator of the lookup task: the trajectory's final answer, exactly.

`solution_str` is the whole trajectory (the policy's turns and the observations it read, in order). Only the
policy's final turn counts, the text after the last observation: it must end with exactly one
``<ans>N</ans>`` (surrounding whitespace aside) and N must equal the ground truth (the sum of the looked-up
values). Text an environment returned can never be the answer: it always sits before an ``</obs>``, and the
trainer removes ``</obs>`` from tool results. Never edited by the controller, never shown to the LLM.
"""

from __future__ import annotations

import re

_ANSWER = re.compile(r"<ans>(-?\d+)</ans>")


def score(solution_str: str, ground_truth: str) -> float:
    """Return 1.0 when the final turn ends with exactly one correct tagged answer, else 0.0."""
    final = solution_str.rsplit("</obs>", 1)[-1].strip()
    found = _ANSWER.findall(final)
    if len(found) != 1 or not final.endswith("</ans>"):
        return 0.0
    return 1.0 if int(found[0]) == int(str(ground_truth).strip()) else 0.0
