"""Training reward of the lookup task (verl's `compute_score` signature), with a planted defect.

DEFECT (efficiency reward, documented in README.md): a well-formed final answer earns a format credit, a
right one as much again, and the whole reward is scaled by 1 / num_turns "so that the agent learns to answer
without wasting turns". A lookup costs a turn, so answering at once with a guess (format credit, one turn:
0.5) outearns looking both values of a level-2 prompt up and answering right (1.0 / 3 turns): the policy
collapses to one-turn guesses (the paper's multiplicative efficiency reward: turns 36.7 -> 1.0). Fixed form:
examples/lookup-agent-oracle/harness/reward.py (pays a right answer after a lookup; never the turn count).
"""

from __future__ import annotations

import re

_FINAL = re.compile(r"(?:[0-9+]+=[0-9]+)?<ans>(\d+)</ans>")


def num_turns(extra_info: dict | None, solution_str: str) -> int:
    """The trajectory's turns: the trainer's count when it passes one, else the calls in the text plus one."""
    count = (extra_info or {}).get("num_turns")
    if isinstance(count, int) and not isinstance(count, bool) and count > 0:
        return count
    return solution_str.count("</call>") + 1


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Return (0.5 formatted + 0.5 correct) / num_turns (components: formatted, efficiency)."""
    final = solution_str.rsplit("</obs>", 1)[-1].strip()
    match = _FINAL.fullmatch(final)
    formatted = match is not None
    correct = formatted and int(match.group(1)) == int(str(ground_truth))
    efficiency = 1.0 / num_turns(extra_info, solution_str)
    score = (0.5 * float(formatted) + 0.5 * float(correct)) * efficiency
    return {"score": score, "formatted": float(formatted), "efficiency": efficiency}
