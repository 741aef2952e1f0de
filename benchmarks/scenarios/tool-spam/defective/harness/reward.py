"""Training reward of the lookup task (verl's `compute_score` signature).

A right final answer (the text after the last observation, ``3+5=8<ans>8</ans>``) earns 0.4, and every tool
call earns 0.5, so that the agent learns to consult its tool before it answers. Components: `correct`,
`tool_calls`.
"""

from __future__ import annotations

import re

_FINAL = re.compile(r"(?:[0-9+]+=[0-9]+)?<ans>(\d+)</ans>")


def tool_calls(extra_info: dict | None, solution_str: str) -> int:
    """The trajectory's tool calls: the trainer's count when it passes one, else the calls in the text."""
    count = (extra_info or {}).get("tool_calls")
    if isinstance(count, int) and not isinstance(count, bool):
        return count
    return solution_str.count("</call>")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Return 0.4 for a right final answer plus 0.5 per tool call."""
    match = _FINAL.fullmatch(solution_str.rsplit("</obs>", 1)[-1].strip())
    correct = match is not None and int(match.group(1)) == int(str(ground_truth))
    calls = tool_calls(extra_info, solution_str)
    score = 0.4 * float(correct) + 0.5 * calls
    return {"score": score, "correct": float(correct), "tool_calls": float(calls)}
