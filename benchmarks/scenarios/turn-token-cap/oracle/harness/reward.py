"""Training reward of the lookup task (verl's `compute_score` signature).

`solution_str` is the whole trajectory; only the final turn (after the last ``</obs>``) is the answer. It
pays 1.0 when that turn is exactly a worked sum and one tagged answer (``3+5=8<ans>8</ans>``, or
``<ans>7</ans>`` for one value), the answer is right, and the trajectory made at least one tool call: the
values exist only in the tool, so a right answer without a lookup is a lucky guess, and paying it would pay
guessing (the agentic hack corpus's one-turn claim). Components: `formatted` and `tool_calls` (logged).
Nothing depends on the number of turns.
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
    """Return 1.0 for a right, well-formed final answer after at least one lookup, else 0.0."""
    final = solution_str.rsplit("</obs>", 1)[-1].strip()
    match = _FINAL.fullmatch(final)
    calls = tool_calls(extra_info, solution_str)
    correct = match is not None and calls > 0 and int(match.group(1)) == int(str(ground_truth))
    return {"score": float(correct), "formatted": float(match is not None), "tool_calls": float(calls)}
