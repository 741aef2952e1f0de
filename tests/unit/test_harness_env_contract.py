"""The agentic contract — an environment's spec, how a call is parsed, what a result may be."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from harness.env import EnvContractError, EnvResult, EnvSpec, parse_call, render_observation, validate_env_result

LOOKUP = {
    "name": "lookup",
    "description": "the value under a key",
    "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
}
ADD = {
    "name": "add",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
}


def _spec(**extra: object) -> EnvSpec:
    fields = {
        "entry": "harness/env.py:make_env",
        "call_pattern": r"<call>(\w+) ?(.*?)</call>",
        "call_end": "</call>",
        "observation": "<obs>{result}</obs>",
        "tools": [LOOKUP, ADD],
    }
    return EnvSpec.model_validate(fields | extra)


def test_a_call_is_the_last_match_with_its_arguments_read_for_the_tool() -> None:
    spec = _spec()
    call = parse_call("think <call>lookup a</call> then <call>lookup k3</call>", spec)
    assert call is not None and call.tool == "lookup" and call.arguments == {"key": "k3"}
    both = parse_call('<call>add {"a": 1, "b": 2}</call>', spec)
    assert both is not None and both.arguments == {"a": 1, "b": 2}
    assert parse_call("the answer is 7", spec) is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("<call>search x</call>", "unknown tool 'search'"),
        ("<call>add 1 2</call>", "write them as a JSON object"),
        ("<call>add {1: 2}</call>", "not one"),
    ],
)
def test_a_call_that_cannot_run_says_why(text: str, problem: str) -> None:
    call = parse_call(text, _spec())
    assert call is not None and call.arguments is None and problem in call.problem


def test_results_are_text_or_a_small_dict_and_long_ones_are_cut() -> None:
    assert validate_env_result("7", "e") == EnvResult("7", True)
    assert validate_env_result({"result": "no such key", "success": False}, "e") == EnvResult("no such key", False)
    assert validate_env_result({"result": "", "done": True}, "e").done
    assert validate_env_result("x" * 5000, "e").result.endswith("[... cut]")
    for bad in (None, 7, {"result": 7}, {"result": "", "success": "yes"}, {"result": "", "extra": 1}):
        with pytest.raises(EnvContractError, match=r"harness/env\.py"):
            validate_env_result(bad, "harness/env.py:make_env")
    assert render_observation(_spec(), EnvResult("7", True)) == "<obs>7</obs>"


@pytest.mark.parametrize(
    "extra",
    [
        {"call_pattern": r"<call>(\w+)</call>"},  # one group only
        {"call_end": "</tool>"},  # the pattern does not end with it
        {"observation": "<obs></obs>"},  # no {result}
        {"tools": [LOOKUP, LOOKUP]},  # a name twice
        {"tools": []},
        {"tools": [{"name": "1bad"}]},
    ],
)
def test_an_inconsistent_spec_is_refused(extra: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        _spec(**extra)
