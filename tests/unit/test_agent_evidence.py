"""Decision rules: training reward alone never promotes; one merge per iteration; score-only differs."""

from __future__ import annotations

from agent.decisions.evidence import Evaluation, decide, final_strict_scores, paired
from diagnostics.schema import Rollout
from diagnostics.stats import PairedComparison, paired_bootstrap
from diagnostics.table import table_from_rollouts


def _ev(
    cid: str,
    a: list[float],
    b: list[float],
    outcome: str,
    reward: float = 0.5,
    control: float = 0.5,
    alerts: tuple[str, ...] = (),
) -> Evaluation:
    return Evaluation(candidate_id=cid, run_ok=True, message="", comparison=paired_bootstrap(a, b),
                      outcome_class=outcome, train_reward=reward, control_train_reward=control,
                      new_alerts=alerts)  # fmt: skip


def test_best_improvement_merges_others_kept_and_regression_reverted() -> None:
    base = [0.0] * 40
    evals = [
        _ev("small", base, [1.0] * 10 + [0.0] * 30, "improvement"),
        _ev("big", base, [1.0] * 30 + [0.0] * 10, "improvement"),
        _ev("worse", [1.0] * 40, base, "regression"),
        _ev("noise", base, base, "insufficient"),
    ]
    out = {d["candidate_id"]: d["decision"] for d in decide(evals, "evotrainer")}
    assert out == {"small": "keep", "big": "merge", "worse": "revert", "noise": "prune"}


def test_higher_training_reward_alone_never_promotes_in_evotrainer_mode() -> None:
    same = [0.5] * 40
    hacked = _ev("hack", same, same, "insufficient", reward=0.95, control=0.3)
    mixed = _ev("mixed", [0.0] * 40, [1.0] * 40, "mixed", reward=0.99, control=0.3, alerts=("score.reward_hacking",))
    out = {d["candidate_id"]: d["decision"] for d in decide([hacked, mixed], "evotrainer")}
    assert "merge" not in out.values()


def test_score_only_promotes_on_training_reward() -> None:
    same = [0.5] * 40
    evals = [
        _ev("hack", same, same, "insufficient", reward=0.95, control=0.3),
        _ev("meh", same, same, "insufficient", reward=0.4, control=0.3),
    ]
    out = {d["candidate_id"]: d["decision"] for d in decide(evals, "score-only")}
    assert out == {"hack": "merge", "meh": "revert"}


def test_failed_pilot_is_pruned_with_its_message() -> None:
    ev = Evaluation.failed("bad", "candidate_error: harness/reward.py raised", 0, 0)
    [d] = decide([ev], "evotrainer")
    assert d["decision"] == "prune" and "harness/reward.py" in d["rationale"]


def _r(pid: str, step: int, strict: float | None, split: str = "val") -> Rollout:
    return Rollout(
        run_id="r",
        step=step,
        split=split,
        prompt_id=pid,
        group_id=pid,
        sample_index=0,  # type: ignore[arg-type]
        prompt="p",
        response="x",
        ground_truth="1",
        reward=0.0,
        strict_score=strict,
    )


def test_final_strict_scores_use_last_step_and_pair_by_prompt() -> None:
    rows = [_r("a", 0, 0.0), _r("a", 20, 1.0), _r("b", 20, 0.0), _r("c", 20, None), _r("a", 30, 0.0, "train")]
    scores = final_strict_scores(table_from_rollouts(rows))
    assert scores == {"a": 1.0, "b": 0.0}
    assert paired(scores, {"b": 1.0, "z": 1.0}) == ([0.0], [1.0])


def test_comparison_round_trips_through_state_json() -> None:
    cmp = paired_bootstrap([0.0, 1.0, 0.0], [1.0, 1.0, 0.0])
    assert PairedComparison(**cmp.to_json()) == cmp


def test_deltas_below_the_seed_noise_floor_are_insufficient() -> None:
    from agent.decisions.evidence import classify_outcome

    small = paired_bootstrap([0.0] * 300, [1.0] * 12 + [0.0] * 288)  # +0.04 with a CI above 0
    assert small.ci_low > 0
    assert classify_outcome(small, [], []) == "improvement"
    assert classify_outcome(small, [], [], min_effect=0.05) == "insufficient"
    big = paired_bootstrap([0.0] * 300, [1.0] * 30 + [0.0] * 270)
    assert classify_outcome(big, [], [], min_effect=0.05) == "improvement"


def _scores(values: list[float]) -> dict[str, float]:
    return {f"p{i}": v for i, v in enumerate(values)}


def test_a_lucky_seed_does_not_replicate_and_the_merge_becomes_a_prune() -> None:
    from agent.decisions.evidence import apply_replication, replicate_check

    control = _scores([1.0] * 50 + [0.0] * 50)
    lucky = _scores([1.0] * 58 + [0.0] * 42)  # +0.08 on the first seed
    fresh_control = _scores([1.0] * 52 + [0.0] * 48)
    fresh_null = _scores([1.0] * 49 + [0.0] * 51)  # -0.03 on the replicate
    rep = replicate_check((control, lucky), [(fresh_control, fresh_null)], [], [], min_effect=0.05)
    assert not rep.confirmed and abs(rep.replicate_deltas[0] + 0.03) < 1e-9
    merge = {
        "candidate_id": "k1",
        "decision": "merge",
        "outcome": "improvement",
        "delta": 0.08,
        "ci_low": 0.02,
        "ci_high": 0.14,
        "train_gain": 0.0,
        "rationale": "strict 0.50 → 0.58",
    }
    [after] = apply_replication([merge], "k1", rep)
    assert after["decision"] == "prune" and after["outcome"] == "insufficient"
    assert "not replicated" in after["rationale"] and merge["decision"] == "merge", "input left untouched"


def test_a_real_improvement_replicates_and_merges_on_pooled_evidence() -> None:
    from agent.decisions.evidence import apply_replication, replicate_check

    control = _scores([1.0] * 50 + [0.0] * 50)
    better = _scores([1.0] * 65 + [0.0] * 35)
    rep = replicate_check((control, better), [(control, better)], [], [], min_effect=0.05)
    assert rep.confirmed and rep.pooled is not None and abs(rep.pooled.delta - 0.15) < 1e-9
    merge = {
        "candidate_id": "k1",
        "decision": "merge",
        "outcome": "improvement",
        "delta": 0.15,
        "ci_low": 0.0,
        "ci_high": 0.0,
        "train_gain": 0.0,
        "rationale": "first seed",
    }
    [after] = apply_replication([merge], "k1", rep)
    assert after["decision"] == "merge" and after["ci_low"] == rep.pooled.ci_low > 0
    assert "pooled over 2 seeds" in after["rationale"]


def test_replication_with_a_new_hack_alert_is_not_confirmed() -> None:
    from agent.decisions.evidence import replicate_check
    from diagnostics.findings import Finding, Layer, Severity

    control = _scores([1.0] * 50 + [0.0] * 50)
    better = _scores([1.0] * 65 + [0.0] * 35)
    hack = Finding("score.reward_hacking", Layer.SCORE, Severity.CRITICAL, "reward up, strict flat", 1.0, 0.0, "x")
    rep = replicate_check((control, better), [(control, better)], [hack], [], min_effect=0.05)
    assert not rep.confirmed and rep.outcome_class == "mixed"
