"""The declared answer protocol finds the answer and compares it the way the manifest says."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from diagnostics.schema import Turn, rollout_from_row
from harness.answers import AnswerProtocol


def test_integer_compare_reads_the_last_answer() -> None:
    proto = AnswerProtocol(pattern=r"<ans>(.*?)</ans>", compare="integer")
    assert proto.extract("3+4=7 <ans>9</ans> <ans> 7 </ans>") == "7"
    assert proto.correct("<ans>045</ans>", "45")
    assert not proto.correct("<ans>4x5</ans>", "45")
    assert proto.extract("no answer") is None


def test_exact_compare_keeps_leading_zeros_and_final_forbids_trailing_text() -> None:
    proto = AnswerProtocol(pattern=r"ANSWER: (\S+)", compare="exact", final=True)
    assert not proto.correct("ANSWER: 45", "045")
    assert proto.correct("work... ANSWER: 045\n", "045")
    assert proto.extract("ANSWER: 045 and more") is None


def test_number_compare_uses_the_tolerance() -> None:
    proto = AnswerProtocol(pattern=r"= ([-0-9.e]+)$", compare="number", tolerance=0.01)
    assert proto.correct("x = 3.141", "3.14")
    assert not proto.correct("x = 3.2", "3.14")
    assert not proto.correct("x = nan", "3.14")


@pytest.mark.parametrize("pattern", [r"<ans>.*</ans>", r"(a)(b)", r"([unclosed"])
def test_a_pattern_needs_exactly_one_valid_group(pattern: str) -> None:
    with pytest.raises(ValidationError):
        AnswerProtocol(pattern=pattern)


def test_rollout_rows_carry_a_trajectory() -> None:
    row = {
        "run_id": "r", "step": 1, "split": "train", "prompt_id": "p", "group_id": "g", "sample_index": 0,
        "prompt": "q", "response": "t1 t2", "reward": 1.0, "num_turns": 2, "tool_calls": 1,
        "stop_reason": "answer",
        "turns": [
            {"text": "t1", "tool": "lookup", "arguments": "{}", "result": "7", "success": True, "policy_tokens": 3},
            {"text": "t2"},
        ],
    }  # fmt: skip
    rollout = rollout_from_row(row)
    assert rollout.turns[0] == Turn("t1", "lookup", "{}", "7", True, 3, 0)
    assert rollout_from_row(rollout.to_json()) == rollout


def test_integer_compare_takes_only_plainly_written_integers() -> None:
    proto = AnswerProtocol(pattern=r"<ans>(.*?)</ans>", compare="integer")
    assert proto.correct("<ans>-7</ans>", "-7")
    for written in ("+33", "3_3", "٣٣", "33.0", " 3 3"):
        assert not proto.correct(f"<ans>{written}</ans>", "33"), written
