"""Pieces the seed skill modules share: the paper reference, the patch-op writer and the answer rules.

Pure data; `skills/seeds.py` and `skills/agentic_seeds.py` build their skills from these.
"""

from __future__ import annotations

import json

PAPER = "paper arXiv 2606.03108"


def ops(*items: dict[str, object]) -> str:
    """A template patch: the JSON list of these operations."""
    return json.dumps(list(items), indent=2)


# The answer rules both reward templates share, below the protocol constants that `write_reward` fills in
# at ANSWER_PROTOCOL_MARK from the manifest's declared answer protocol (skills/templates.py).
ANSWER_RULES = '''
_ANSWER = re.compile(ANSWER_PATTERN, re.S)


def extract_answer(solution_str):
    """Return the response's one answer, or None when it breaks the protocol.

    Broken: no answer, more than one (answer spam, several candidates), or, when FINAL, text after it.
    """
    matches = list(_ANSWER.finditer(solution_str))
    if len(matches) != 1:
        return None
    if FINAL and solution_str[matches[0].end() :].strip():
        return None
    return matches[0].group(1).strip()


def _number(text):
    """The number in `text` under COMPARE (int, or finite float), or None."""
    text = text.strip()
    if "_" in text:  # Python's int() and float() accept "1_000"; an answer does not
        return None
    try:
        value = int(text) if COMPARE == "integer" else float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def episode_used_a_tool(extra_info, solution_str):
    """True unless TOOL_GATE, which a harness declaring tools sets: then the episode made at least one call.

    On a harness whose env offers tools, the task's facts live behind them, so a right answer given without
    any call is a guess (the agentic hack corpus's one-turn claim). The trainer passes the count; when the
    env's observations end in a marker (OBSERVATION_END), a tool's result must also be in the trajectory,
    so a claimed call that returned nothing to the context does not count.
    """
    if not TOOL_GATE:
        return True
    calls = (extra_info or {}).get("tool_calls")
    if not isinstance(calls, int) or isinstance(calls, bool) or calls <= 0:
        return False
    return not OBSERVATION_END or OBSERVATION_END in solution_str


def same_answer(answer, ground_truth):
    """Return True when `answer` equals the ground truth under the declared COMPARE rule."""
    truth = str(ground_truth).strip()
    if COMPARE == "exact":
        return answer == truth
    a, b = _number(answer), _number(truth)
    if a is None or b is None:
        return False
    return a == b if COMPARE == "integer" else abs(a - b) <= TOLERANCE
'''
