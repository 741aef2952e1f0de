"""Every health rule fires on a crafted defect and stays quiet on a healthy run."""

from __future__ import annotations

import math
import random

import polars as pl
import pytest

from diagnostics import agentic as layer_agentic
from diagnostics import behaviour as layer_behaviour
from diagnostics import score as layer_score
from diagnostics import signal as layer_signal
from diagnostics.findings import LayerOutput, Severity
from diagnostics.schema import MetricRow, Rollout, StopReason
from diagnostics.table import table_from_rollouts
from harness.answers import AnswerProtocol

TAGS = AnswerProtocol(pattern="<ans>(.*?)</ans>")  # the protocol the crafted responses follow


def T(rollouts: list[Rollout], answer: AnswerProtocol | None = TAGS) -> pl.DataFrame:
    """The run table of typed records (the columnar layers read tables)."""
    return table_from_rollouts(rollouts, answer)


def diagnose_behaviour(rollouts: list[Rollout], answer: AnswerProtocol | None = TAGS) -> LayerOutput:
    return layer_behaviour.diagnose_behaviour(T(rollouts, answer), answer is not None)


def diagnose_signal(rollouts: list[Rollout], rows: list[MetricRow]) -> LayerOutput:
    return layer_signal.diagnose_signal(T(rollouts), rows)


def diagnose_score(rows: list[MetricRow], train: list[Rollout], val: list[Rollout]) -> LayerOutput:
    return layer_score.diagnose_score(rows, T(train), T(val))


def r(
    step: int, gid: int, idx: int, reward: float, strict: float | None = None, response: str = "", **kw: object
) -> Rollout:
    gt = str(10 + gid)
    if not response:
        response = f"{gid}+10 => {gid}+10={gt} <ans>{gt if (strict or 0) >= 0.5 else int(gt) + 1}</ans>"
    return Rollout(
        run_id="run",
        step=step,
        split=kw.pop("split", "train"),  # type: ignore[arg-type]
        prompt_id=f"p{gid}",
        group_id=f"g{gid}",
        sample_index=idx,
        prompt=f"{gid}+10=>",
        response=response,
        ground_truth=gt,
        reward=reward,
        strict_score=strict,
        response_tokens=kw.pop("tokens", len(response.split())),
        **kw,  # type: ignore[arg-type]
    )


def healthy_run() -> tuple[list[Rollout], list[MetricRow]]:
    """Six steps, 10 groups of 8; correctness rises slowly; reward equals the strict score."""
    rng = random.Random(0)
    rollouts, rows = [], []
    for step in range(6):
        p = 0.4 + 0.05 * step
        rewards = []
        for gid in range(10):
            for idx in range(8):
                ok = 1.0 if rng.random() < p else 0.0
                rollouts.append(r(step, gid, idx, ok, ok, tokens=rng.randint(15, 40), mean_logprob=-0.4))
                rewards.append(ok)
        rows.append(
            MetricRow(
                step,
                {
                    "critic/score/mean": sum(rewards) / len(rewards),
                    "actor/pg_loss": 0.1,
                    "critic/advantages/max": 2.4,
                    "critic/advantages/min": -2.4,
                },
            )
        )
    return rollouts, rows


def run_all(rollouts: list[Rollout], rows: list[MetricRow], val: list[Rollout] | None = None) -> LayerOutput:
    return LayerOutput.merge(
        [diagnose_score(rows, rollouts, val or []), diagnose_signal(rollouts, rows), diagnose_behaviour(rollouts)]
    )


def sev(out: LayerOutput, alert_id: str) -> Severity:
    found = [f for f in out.findings if f.alert_id == alert_id]
    assert found, f"{alert_id} was not evaluated"
    return found[0].severity


def test_healthy_run_raises_no_alert() -> None:
    rollouts, rows = healthy_run()
    out = run_all(rollouts, rows)
    fired = [f.alert_id for f in out.findings if f.fired]
    assert fired == []
    assert out.metrics["reward_hacking"] == 0.0
    assert out.metrics["dead_group_ratio"] < 0.3


def test_dead_groups_critical_and_warning() -> None:
    dead = [r(0, g, i, 1.0 if g < 6 else float(i % 2)) for g in range(10) for i in range(8)]
    out = diagnose_signal(dead, [])
    assert sev(out, "signal.dead_groups") is Severity.CRITICAL
    assert out.metrics["dead_group_ratio"] == pytest.approx(0.6)
    finding = next(f for f in out.findings if f.alert_id == "signal.dead_groups")
    assert finding.evidence_rollout_ids[0] == "run/0/p0/0"
    some = [r(0, g, i, 1.0 if g < 4 else float(i % 2)) for g in range(10) for i in range(8)]
    assert sev(diagnose_signal(some, []), "signal.dead_groups") is Severity.WARNING


def test_low_spread_and_coarse_reward() -> None:
    tiny = [r(0, g, i, 0.5 + 0.01 * (i % 2)) for g in range(10) for i in range(8)]
    assert sev(diagnose_signal(tiny, []), "signal.low_spread") is Severity.WARNING
    coarse = [r(0, g, i, 0.0 if g < 5 else float(i == 0)) for g in range(10) for i in range(8)]
    out = diagnose_signal(coarse, [])
    assert sev(out, "signal.coarse_reward") is Severity.WARNING
    assert out.metrics["reward_top_value_share"] > 0.5


def test_component_constant_and_silent() -> None:
    rows = [
        r(0, g, i, float(i % 2), reward_components={"fmt": 0.1, "bonus": 0.0, "acc": float(i % 2)})
        for g in range(4)
        for i in range(8)
    ]
    out = diagnose_signal(rows, [])
    assert sev(out, "signal.component.fmt") is Severity.WARNING
    assert sev(out, "signal.component.bonus") is Severity.WARNING
    assert sev(out, "signal.component.acc") is Severity.OK
    assert out.metrics["component/acc/adoption"] == pytest.approx(0.5)


def test_advantage_extreme_and_dead_training() -> None:
    rollouts, _ = healthy_run()
    rows = [MetricRow(s, {"actor/pg_loss": 0.0 if s >= 3 else 0.2, "critic/advantages/min": -5.48}) for s in range(6)]
    out = diagnose_signal(rollouts, rows)
    assert sev(out, "signal.advantage_extreme") is Severity.WARNING
    assert sev(out, "signal.dead_training") is Severity.CRITICAL


def test_reward_hacking_alarm_reward_up_strict_flat() -> None:
    rollouts, _ = healthy_run()
    rows = [MetricRow(s, {"critic/score/mean": 0.3 + 0.1 * s}) for s in range(6)]
    val = [r(s, g, 0, 0.5, strict=float(g < 5), split="val") for s in range(6) for g in range(10)]
    out = diagnose_score(rows, rollouts, val)
    assert sev(out, "score.reward_hacking") is Severity.CRITICAL
    assert out.metrics["reward_hacking"] == 1.0
    assert out.metrics["train_reward_delta"] > 0.05
    assert out.metrics["strict_acc_delta"] == pytest.approx(0.0)
    rising = [r(s, g, 0, 0.5, strict=float(g < 3 + s), split="val") for s in range(6) for g in range(10)]
    assert diagnose_score(rows, rollouts, rising).metrics["reward_hacking"] == 0.0


def test_a_reward_that_tracks_strict_on_its_own_rollouts_is_not_hacking_when_held_out_dips() -> None:
    """A strict reward (reward == strict on every training rollout) cannot be hacked; a held-out dip is noise."""
    train = [r(s, g, 0, float(g < 4 + s // 2), strict=float(g < 4 + s // 2)) for s in range(6) for g in range(10)]
    val = [r(s, g, 0, 0.5, strict=float(g < (6 if s == 0 else 5)), split="val") for s in range(6) for g in range(10)]
    out = diagnose_score([], train, val)
    assert out.metrics["train_reward_delta"] > 0.05 and out.metrics["strict_acc_delta"] < 0
    assert out.metrics["train_strict_delta"] == pytest.approx(out.metrics["train_reward_delta"])
    assert out.metrics["reward_hacking"] == 0.0
    lenient = [r(s, g, 0, float(g < 4 + s // 2), strict=float(g < 4)) for s in range(6) for g in range(10)]
    assert diagnose_score([], lenient, val).metrics["reward_hacking"] == 1.0, "reward outruns strict: hacking"


def test_a_format_gate_that_zeroes_correct_answers_is_flagged() -> None:
    """Correct level-4-like answers paid 0 (the format-gate scenario) are false negatives; a strict reward has none."""
    gated = [r(0, g, i, 0.0 if g < 3 else float(i < 4), strict=float(i < 4)) for g in range(10) for i in range(8)]
    out = diagnose_score([], gated, [])
    assert out.metrics["unrewarded_correct_rate"] == pytest.approx(0.3)
    assert sev(out, "score.unrewarded_correct") is Severity.CRITICAL
    strict = [r(0, g, i, float(i < 4), strict=float(i < 4)) for g in range(10) for i in range(8)]
    assert diagnose_score([], strict, []).metrics["unrewarded_correct_rate"] == 0.0


def test_no_strict_score_is_a_warning_not_silence() -> None:
    rollouts = [r(s, g, i, float(i % 2), strict=None) for s in range(3) for g in range(3) for i in range(4)]
    out = diagnose_score([], rollouts, [])
    assert sev(out, "score.no_strict_score") is Severity.WARNING
    # the hacking check could not run: its metric is unknown (NaN, with a note), not a silent 0
    assert math.isnan(out.metrics["reward_hacking"])
    assert any(n.startswith("score.reward_hacking: not evaluated: ") for n in out.notes)


def test_rewarded_wrong_and_strict_regression() -> None:
    lenient = [r(0, g, i, 1.0, strict=float(i < 4), response=f"{10 + g} " * 10) for g in range(5) for i in range(8)]
    out = diagnose_score([], lenient, [])
    assert sev(out, "score.rewarded_wrong") is Severity.CRITICAL
    falling = [r(s, 0, i, 0.5, strict=float(i < 6 - s), split="val") for s in range(4) for i in range(8)]
    assert sev(diagnose_score([], [], falling), "score.strict_regression") is Severity.WARNING


def test_truncation_and_stop_reasons() -> None:
    rollouts, _ = healthy_run()
    cut = [
        r(0, g, i, float(i % 2), truncated=i < 2, stop_reason=StopReason.LENGTH if i < 2 else StopReason.EOS)
        for g in range(10)
        for i in range(8)
    ]
    out = diagnose_behaviour(cut)
    assert sev(out, "behaviour.truncation") is Severity.WARNING
    assert out.metrics["stop_reason/length"] == pytest.approx(0.25)
    assert sev(diagnose_behaviour(rollouts), "behaviour.truncation") is Severity.OK


def test_length_gaming_correlation_and_growth() -> None:
    corr = [r(0, g, i, i / 7, tokens=10 + 20 * i) for g in range(5) for i in range(8)]
    out = diagnose_behaviour(corr)
    assert sev(out, "behaviour.length_reward_corr") is Severity.WARNING
    assert out.metrics["length_reward_corr"] > 0.9
    growth = [
        r(s, g, i, float(i % 2), strict=float(i % 2), tokens=20 * (1 + 2 * s))
        for s in range(3)
        for g in range(4)
        for i in range(8)
    ]
    assert sev(diagnose_behaviour(growth), "behaviour.length_growth") is Severity.WARNING


def test_degeneration_spam_and_char_runs() -> None:
    spam = [r(0, g, i, 1.0, response="33 " * 12 if i < 3 else "") for g in range(4) for i in range(8)]
    out = diagnose_behaviour(spam)
    assert sev(out, "behaviour.degeneration") is Severity.WARNING
    assert out.metrics["degenerate_rate"] == pytest.approx(3 / 8)
    digits = [r(0, g, i, 1.0, response="3" * 30 if i == 0 else "") for g in range(4) for i in range(8)]
    assert diagnose_behaviour(digits).metrics["degenerate_rate"] == pytest.approx(1 / 8)
    healthy, _ = healthy_run()
    assert diagnose_behaviour(healthy).metrics["degenerate_rate"] == 0.0


def test_format_failure_multi_answer_empty() -> None:
    rows = [
        r(0, g, i, 0.0, response=("12 maybe" if i < 4 else "<ans>1</ans><ans>2</ans>" if i == 4 else "<ans>3</ans>"))
        for g in range(5)
        for i in range(8)
    ]
    out = diagnose_behaviour(rows)
    assert sev(out, "behaviour.format_failure") is Severity.WARNING
    assert out.metrics["format_failure_rate"] == pytest.approx(0.5)
    assert sev(out, "behaviour.multi_answer") is Severity.WARNING
    empty = [r(0, g, i, 0.0, response=" " if i == 0 else "<ans>3</ans>") for g in range(5) for i in range(8)]
    assert sev(diagnose_behaviour(empty), "behaviour.empty_response") is Severity.WARNING


def test_format_rules_silent_for_untagged_domain() -> None:
    """Without a declared answer protocol the answer rules are not evaluated (NaN), never guessed."""
    rows = [r(0, g, i, 0.0, response="the answer is twelve") for g in range(3) for i in range(4)]
    rows = [Rollout(**{**x.to_json(), "prompt": "say it", "stop_reason": StopReason.EOS}) for x in rows]  # type: ignore[arg-type]
    out = diagnose_behaviour(rows, answer=None)
    assert sev(out, "behaviour.format_failure") is Severity.OK
    assert out.metrics["format_failure_rate"] != out.metrics["format_failure_rate"]  # NaN: no data


@pytest.mark.parametrize(
    ("logprob", "expected"), [(-0.03, Severity.CRITICAL), (-0.08, Severity.WARNING), (-0.5, Severity.OK)]
)
def test_exploration_collapse_logprob(logprob: float, expected: Severity) -> None:
    rows = [r(0, g, i, float(i % 2), mean_logprob=logprob) for g in range(3) for i in range(4)]
    assert sev(diagnose_behaviour(rows), "behaviour.exploration_collapse") is expected


def test_agentic_abandonment_echo_trap_and_rising_turns() -> None:
    """The agentic rules (diagnostics/agentic.py, tested fully in test_diag_agentic_metrics_and_alerts.py) run on
    episodes recorded with turn and call counts only."""

    def diagnose_agentic(rollouts: list[Rollout]) -> LayerOutput:
        return layer_agentic.diagnose_agentic(T(rollouts, TAGS))

    quits = [
        r(0, g, i, 0.0, num_turns=1 if i < 6 else 8, tool_calls=0 if i < 6 else 5) for g in range(4) for i in range(8)
    ]
    assert sev(diagnose_agentic(quits), "agentic.abandonment") is Severity.CRITICAL
    echo = [
        r(0, g, i, 0.0 if i < 2 else 1.0, num_turns=80 if i < 2 else 10, tool_calls=5)
        for g in range(4)
        for i in range(8)
    ]
    out = diagnose_agentic(echo)
    assert sev(out, "agentic.echo_trap") is Severity.WARNING
    assert sev(out, "agentic.failed_turns") is Severity.WARNING
    rising = [r(s, g, i, 1.0, num_turns=10 + 5 * s, tool_calls=3) for s in range(5) for g in range(2) for i in range(4)]
    assert sev(diagnose_agentic(rising), "agentic.turns_rising") is Severity.WARNING
    steady = [
        r(s, g, i, 1.0, num_turns=10 + (s % 2), tool_calls=3) for s in range(5) for g in range(2) for i in range(4)
    ]
    assert sev(diagnose_agentic(steady), "agentic.turns_rising") is Severity.OK


def test_exploration_collapse_reads_the_wrong_answers_when_strict_scores_exist() -> None:
    """Confidently right is not collapse; confidently wrong is (paper §6.1 dimension 4, on wrong samples)."""

    def diagnose_model_state(rollouts: list[Rollout]) -> LayerOutput:
        return layer_behaviour.diagnose_model_state(T(rollouts))

    right_sure = [r(0, g, i, 1.0, strict=1.0, mean_logprob=-0.01) for g in range(10) for i in range(6)]
    wrong_unsure = [r(0, g, i, 0.0, strict=0.0, mean_logprob=-0.3) for g in range(10) for i in range(6, 8)]
    out = diagnose_model_state(right_sure + wrong_unsure)
    assert out.metrics["mean_logprob"] > -0.1 and sev(out, "behaviour.exploration_collapse") is Severity.OK
    wrong_sure = [r(0, g, i, 0.0, strict=0.0, mean_logprob=-0.02) for g in range(10) for i in range(6, 8)]
    assert sev(diagnose_model_state(right_sure + wrong_sure), "behaviour.exploration_collapse") is Severity.CRITICAL
    no_strict = [r(0, g, i, 1.0, strict=None, mean_logprob=-0.01) for g in range(10) for i in range(8)]
    assert sev(diagnose_model_state(no_strict), "behaviour.exploration_collapse") is Severity.CRITICAL
