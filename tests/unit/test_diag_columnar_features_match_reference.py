"""The column-wise text features equal their reference definitions, the answer rules read only the
declared protocol, and agentic rows keep their trajectories and their rules in the run table."""

from __future__ import annotations

import math
import random

import polars as pl
import pytest

from diagnostics.agentic import diagnose_agentic
from diagnostics.behaviour import NO_ANSWER_PROTOCOL, diagnose_behaviour
from diagnostics.features import is_degenerate, repetition, rust_pattern, text_features
from diagnostics.findings import Severity
from diagnostics.schema import Rollout, StopReason, Turn
from diagnostics.table import table_from_rollouts
from harness.answers import AnswerProtocol

PIECES = ["<ans>", "</ans>", "12", " ", "\n", "x", "<ans> 7 </ans>", "\\boxed{3}", "#### 42", "Answer: 5\n", "é",
          "\x1c", "\xa0", "", "</ans>tail", "  ", "go ", "33 ", "a" * 25, "ééééé"]  # fmt: skip
PATTERNS = [
    ("<ans>(.*?)</ans>", False),
    ("<ans>(.*?)</ans>", True),
    (r"\\boxed\{([^}]*)\}", False),
    (r"####\s*(\S+)", True),
    (r"(?m)^Answer: (.*)$", False),  # `$`: read by the protocol object row by row
    (r"(?<=x)(\d)", False),  # look-behind: the same
]


def _texts(n: int = 3000, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(PIECES) for _ in range(rng.randint(0, 30))) for _ in range(n)]


def _frame(texts: list[str]) -> pl.DataFrame:
    return pl.DataFrame({"response": texts, "response_tokens": [0] * len(texts)})


def test_length_emptiness_and_degeneration_equal_the_reference_definitions() -> None:
    texts = _texts()
    out = text_features(_frame(texts), None)
    assert out["bigram_rep"].to_list() == [repetition(t)[0] for t in texts]
    assert out["degenerate"].to_list() == [is_degenerate(t) for t in texts]
    assert out["length"].to_list() == [len(t.split()) for t in texts]
    assert out["empty"].to_list() == [not t.strip() for t in texts]
    assert any(out["degenerate"]) and not all(out["degenerate"])


@pytest.mark.parametrize(("pattern", "final"), PATTERNS)
def test_answer_features_are_the_declared_protocols_own_reading(pattern: str, final: bool) -> None:
    protocol = AnswerProtocol(pattern=pattern, final=final)
    texts = _texts(seed=1)
    out = text_features(_frame(texts), protocol)
    assert out["answers"].to_list() == [len(protocol.answers(t)) for t in texts]
    assert out["answer_ok"].to_list() == [bool(protocol.extract(t)) for t in texts]
    assert out["answer_ends"].to_list() == [protocol.ends_with_answer(t) for t in texts]


def test_patterns_that_read_differently_in_rust_are_left_to_python() -> None:
    assert rust_pattern(r"####\s*(\S+)") is not None
    for pattern in (r"(\w+)", r"\b(\d)\b", r"answer: (.*)$", r"(?i)<ANS>(.*?)</ANS>", r"(?<=x)(\d)", r"(a)\1"):
        assert rust_pattern(pattern) is None, pattern


def _single(response: str, i: int) -> Rollout:
    return Rollout("r", 0, "train", f"p{i}", f"g{i // 4}", i % 4, "say", response, "1", float(i % 2))


def test_without_a_protocol_the_answer_rules_are_not_evaluated_and_say_so() -> None:
    rows = table_from_rollouts([_single("12 maybe", i) for i in range(8)])
    out = diagnose_behaviour(rows, protocol_declared=False)
    fail = next(f for f in out.findings if f.alert_id == "behaviour.format_failure")
    assert math.isnan(out.metrics["format_failure_rate"]) and math.isnan(out.metrics["multi_answer_rate"])
    assert fail.severity is Severity.OK and fail.message.endswith(NO_ANSWER_PROTOCOL)
    declared = table_from_rollouts([_single("12 maybe", i) for i in range(8)], AnswerProtocol(pattern="<a>(.*)</a>"))
    graded = diagnose_behaviour(declared, protocol_declared=True)
    assert graded.metrics["format_failure_rate"] == 1.0  # the same responses, read with the declared tag


def _episode(step: int, i: int, turns: int, tools: int, reward: float) -> Rollout:
    trajectory = tuple(
        Turn(f"t{k}", tool="search" if k < tools else None, success=True if k < tools else None, policy_tokens=3)
        for k in range(min(turns, 4))
    )
    return Rollout(
        "r", step, "train", f"p{i}", f"g{i // 4}", i % 4, "q", "done", "1", reward,
        num_turns=turns, tool_calls=tools, stop_reason=StopReason.ANSWER, turns=trajectory,
    )  # fmt: skip


def test_agentic_rows_carry_their_turns_and_the_agentic_rules_run_on_the_table() -> None:
    rows = [_episode(s, i, 1 if i < 6 else 5, 0 if i < 6 else 3, float(i % 2)) for s in range(2) for i in range(8)]
    table = table_from_rollouts(rows)
    assert table.schema["turns"] == pl.List(
        pl.Struct({"tool": pl.String, "success": pl.Boolean, "policy_tokens": pl.Int64, "observation_tokens": pl.Int64,
                   "call": pl.UInt32})
    )  # fmt: skip
    first = table.row(7, named=True)["turns"]
    assert [t["tool"] for t in first] == ["search", "search", "search", None]
    assert {k: v for k, v in first[0].items() if k != "call"} == {
        "tool": "search", "success": True, "policy_tokens": 3, "observation_tokens": 0
    }  # fmt: skip
    out = diagnose_agentic(table)
    assert out.metrics["abandon_rate"] == pytest.approx(0.75)
    assert next(f for f in out.findings if f.alert_id == "agentic.abandonment").severity is Severity.CRITICAL
    tools_per_row = table.select(pl.col("turns").list.eval(pl.element().struct.field("tool").is_not_null()).list.sum())
    assert tools_per_row.to_series().to_list() == table["tool_calls"].to_list()  # a metric over `turns`


def test_single_turn_chunks_hold_no_trajectory_column_memory() -> None:
    table = table_from_rollouts([_single("x", i) for i in range(8)])
    assert table.schema["turns"] == pl.Null
