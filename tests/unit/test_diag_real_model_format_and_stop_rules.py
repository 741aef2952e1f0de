"""The health report names the two ways a real pretrained model yields no signal from the start.

- `behaviour.format_never_written` (CRITICAL): no response writes the declared answer format at all: an
  instruct model trained as it ships ("17 + 4 = 6", never `<ans>N</ans>`), every group flat;
- `behaviour.runs_past_answer`: responses write their answer and go on writing to the token cap: the model is
  not stopped at its end of turn (warm-start targets ending with a token generation never stops on:
  "<ans>21</ans>user\\n17+4=…").

Both read only the declared protocol and the stop reason, so they carry to any task and any model; a response
cut right after its answer (nothing written after it) is not "running past", and the exploration table never
answers a run-past with a longer token budget.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

from agent.decisions.knobs import harness_knobs
from agent.policies.explore import propose_probes
from agent.policies.symptoms import abnormal
from diagnostics.behaviour import diagnose_behaviour
from diagnostics.findings import Finding, Severity
from diagnostics.schema import Rollout, StopReason
from diagnostics.table import table_from_rollouts
from harness.answers import AnswerProtocol
from harness.manifest import load_harness

ROOT = Path(__file__).resolve().parents[2]
ANS = AnswerProtocol(pattern="<ans>(.*?)</ans>", compare="integer", final=True)


def _row(i: int, response: str, *, cut: bool = False, step: int = 1) -> Rollout:
    return Rollout(
        "run", step, "train", f"p{i // 4}", f"g{i // 4}", i % 4, "17+4=>", response, "21", 0.0,
        response_tokens=40 if cut else 12, truncated=cut, stop_reason=StopReason.LENGTH if cut else StopReason.EOS,
    )  # fmt: skip


def _metrics(rows: list[Rollout]) -> dict[str, float]:
    return dict(diagnose_behaviour(table_from_rollouts(rows, ANS), protocol_declared=True).metrics)


def test_the_starting_policy_is_read_from_the_first_responses_that_ended_on_their_own() -> None:
    # step 1: 10 rambling to the cap, 6 ended without an answer; step 2: the same; step 3: all answer
    def step(s: int, texts: list[tuple[str, bool]]) -> list[Rollout]:
        return [_row(i, t, cut=c, step=s) for i, (t, c) in enumerate(texts)]

    shipped = [("17 + 4 = 6 and so", True)] * 10 + [("17 + 4 = 6", False)] * 6
    learned = [("<ans>21</ans>", False)] * 16
    rows = step(1, shipped) + step(2, shipped) + step(3, learned)
    m = _metrics(rows)
    assert m["answer_written_rate_first_steps"] == 0.0  # steps 1-2: 12 responses that ended, none answered
    assert m["answer_written_rate"] == 16 / 48
    assert _metrics(step(1, learned) + step(2, shipped))["answer_written_rate_first_steps"] == 1.0
    # a length budget that cuts every answer off says nothing about the format: unknown, not "never"
    cut = [("work work wo", True)] * 16
    assert math.isnan(_metrics(step(1, cut) + step(2, cut))["answer_written_rate_first_steps"])


def _finding(responses: list[tuple[str, bool]], alert: str, answer: AnswerProtocol | None = ANS) -> Finding:
    rows = table_from_rollouts([_row(i, text, cut=cut) for i, (text, cut) in enumerate(responses)], answer)
    out = diagnose_behaviour(rows, protocol_declared=answer is not None)
    return next(f for f in out.findings if f.alert_id == alert)


def test_a_model_that_never_writes_the_format_is_critical_with_evidence() -> None:
    shipped = [("17 + 4 = 6", i % 2 == 0) for i in range(16)]  # the instruct model as shipped
    never = _finding(shipped, "behaviour.format_never_written")
    assert never.severity is Severity.CRITICAL and never.value == 0.0
    assert "warm-start" in never.message and len(never.evidence_rollout_ids) == 5
    one = _finding([*shipped[:15], ("<ans>21</ans>", False)], "behaviour.format_never_written")
    assert one.severity is Severity.OK  # one response in the format: "never" no longer holds


def test_too_few_responses_or_no_protocol_cannot_show_never() -> None:
    few = _finding([("17 + 4 = 6", False)] * 8, "behaviour.format_never_written")
    assert few.inconclusive and few.severity is Severity.OK and math.isnan(few.value)
    all_cut = _finding([("17 + 4 = 6 and the", True)] * 16, "behaviour.format_never_written")
    assert all_cut.inconclusive.startswith("only 0 of 16 responses ended") and all_cut.severity is Severity.OK
    undeclared = _finding([("17 + 4 = 6", False)] * 16, "behaviour.format_never_written", answer=None)
    assert undeclared.severity is Severity.OK and "no answer protocol declared" in undeclared.message


def test_answers_followed_by_text_to_the_cap_run_past_the_answer() -> None:
    past = [("<ans>21</ans>user\n17+4=<ans>21</ans>assistant\nThe", True)] * 10  # the wrong-stop shape
    fine = [("<ans>21</ans>", False)] * 6
    found = _finding(past + fine, "behaviour.runs_past_answer")
    assert found.severity is Severity.CRITICAL and found.value == 10 / 16
    assert found.numbers["answered_then_cut"] == 10 and len(found.evidence_rollout_ids) == 5
    # cut right after the answer (nothing follows it) or cut before any answer: not a run past the answer
    edge = [("work work <ans>21</ans>  ", True)] * 10 + [("work work wo", True)] * 6
    assert _finding(edge, "behaviour.runs_past_answer").severity is Severity.OK
    # a protocol without `final` still sees the trailing text
    loose = AnswerProtocol(pattern="<ans>(.*?)</ans>", compare="integer")
    assert _finding(past + fine, "behaviour.runs_past_answer", answer=loose).severity is Severity.CRITICAL


def test_exploration_never_answers_a_run_past_with_a_longer_budget(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples" / "arithmetic", tmp_path / "arithmetic")
    knobs = harness_knobs(load_harness(tmp_path / "arithmetic"), "local")
    metrics = {"truncation_rate": 0.6, "runs_past_answer_rate": 0.6, "strict_acc_delta": 0.0}
    assert {a.symptom.name for a in abnormal(metrics)} >= {"truncated", "runs_past_answer"}
    probes = propose_probes(knobs, metrics, tried=(), blocked={}, max_candidates=8)
    assert not any("max-new-tokens" in p.slug for p in probes)
    cut_before = {**metrics, "runs_past_answer_rate": 0.0}  # the same run, cut before its answers
    assert any(
        "max-new-tokens" in p.slug for p in propose_probes(knobs, cut_before, tried=(), blocked={}, max_candidates=8)
    )
