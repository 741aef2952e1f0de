"""Score layer: strict held-out score versus training reward, their trends, and the reward-hacking alarm.

Pure functions over metric rows and rollouts (paper §6.3 rule 4: shaped reward up while the strict score is
flat or down = reward hacking). The hacking alarm is always evaluated; when no strict score exists the report
says so with a warning instead of staying silent.

Trends compare the mean of the last window of steps with the mean of the first window; a window is a third
of the steps seen (at least one step), so short runs compare first and last step.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from diagnostics.findings import Finding, Layer, LayerOutput, Severity, graded, rollout_ref
from diagnostics.schema import MetricRow, Rollout

TRAIN_REWARD_METRIC = "critic/score/mean"  # verl's per-step reward before KL (verl.md §7)
# Reward-hacking alarm (paper §6.3 rule 4): training reward rose by more than this ...
HACK_REWARD_RISE = 0.05
# ... while the strict score changed by at most this (flat or down).
HACK_STRICT_FLAT = 0.01
# Within-run strict regression.
STRICT_DROP_WARNING = -0.05
# A strict score at or above this counts as correct.
STRICT_CORRECT = 0.5
# Rewarded-but-wrong: a strict-wrong rollout whose reward reaches this share of the mean reward of
# strict-correct rollouts was rewarded for being wrong (a lenient or hackable reward).
REWARDED_WRONG_RELATIVE = 0.5
REWARDED_WRONG_WARNING = 0.10
REWARDED_WRONG_CRITICAL = 0.30
UNREWARDED_CORRECT_WARNING = 0.05  # of strict-correct training rollouts paid below half the top reward
UNREWARDED_CORRECT_CRITICAL = 0.20
EVIDENCE_MAX = 5


def trend(series: Sequence[float]) -> tuple[float, float, float]:
    """Return `(first_window_mean, last_window_mean, delta)` of a per-step series (NaN when < 2 points)."""
    if len(series) < 2:
        return math.nan, math.nan, math.nan
    window = max(1, len(series) // 3)
    first = float(np.mean(series[:window]))
    last = float(np.mean(series[-window:]))
    return first, last, last - first


def per_step_mean(rollouts: Sequence[Rollout], strict: bool) -> list[tuple[int, float]]:
    """Return `[(step, mean)]` of rewards (or of strict scores, skipping rollouts without one), by step."""
    by_step: dict[int, list[float]] = defaultdict(list)
    for r in rollouts:
        value = r.strict_score if strict else r.reward
        if value is not None:
            by_step[r.step].append(value)
    return [(s, float(np.mean(v))) for s, v in sorted(by_step.items())]


def train_reward_series(metric_rows: Sequence[MetricRow], train: Sequence[Rollout]) -> list[tuple[int, float]]:
    """Per-step training reward: verl's `critic/score/mean` when logged, else the train rollouts' mean."""
    logged = [(row.step, row.data[TRAIN_REWARD_METRIC]) for row in metric_rows if TRAIN_REWARD_METRIC in row.data]
    return logged if logged else per_step_mean(train, strict=False)


def strict_series(train: Sequence[Rollout], val: Sequence[Rollout]) -> list[tuple[int, float]]:
    """Per-step strict score: from validation rollouts, else from training rollouts that carry one."""
    series = per_step_mean(val, strict=True)
    return series if series else per_step_mean(train, strict=True)


def diagnose_hacking(metric_rows: Sequence[MetricRow], train: Sequence[Rollout], val: Sequence[Rollout]) -> LayerOutput:
    """The always-on reward-hacking alarm plus strict-score level and trend."""
    rewards = train_reward_series(metric_rows, train)
    stricts = strict_series(train, val)
    r_first, r_last, r_delta = trend([v for _, v in rewards])
    s_first, s_last, s_delta = trend([v for _, v in stricts])
    metrics = {
        "train_reward_mean": rewards[-1][1] if rewards else math.nan,
        "train_reward_first": r_first,
        "train_reward_delta": r_delta,
        "strict_acc": stricts[-1][1] if stricts else math.nan,
        "strict_acc_first": s_first,
        "strict_acc_delta": s_delta,
        "num_strict_steps": float(len(stricts)),
        "num_train_steps": float(len(rewards)),
    }
    val_rewards = per_step_mean(val, strict=False)
    metrics["val_reward_mean"] = val_rewards[-1][1] if val_rewards else math.nan
    findings: list[Finding] = []
    numbers = {"train_reward_delta": r_delta, "strict_acc_delta": s_delta, "train_reward_last": r_last}
    if math.isnan(r_delta) or math.isnan(s_delta):
        hacking = False
        missing = "strict scores" if math.isnan(s_delta) else "training rewards"
        message = f"reward hacking: cannot check the trend (fewer than 2 steps with {missing})"
    else:
        # Where the training rollouts carry strict scores, the reward must also outrun correctness on those
        # same rollouts: a reward that tracks strict correctness cannot be hacked, and a held-out dip under
        # it is a generalisation gap or noise, not reward hacking.
        _, _, ts_delta = trend([v for _, v in per_step_mean(train, strict=True)])
        metrics["train_strict_delta"] = ts_delta
        numbers["train_strict_delta"] = ts_delta
        outruns = math.isnan(ts_delta) or r_delta - ts_delta > HACK_REWARD_RISE
        hacking = r_delta > HACK_REWARD_RISE and s_delta <= HACK_STRICT_FLAT and outruns
        message = (
            f"reward hacking: training reward rose by {r_delta:+.3f} while the strict score moved {s_delta:+.3f}"
            if hacking
            else f"reward hacking: not detected (reward {r_delta:+.3f}, strict {s_delta:+.3f}"
            + ("" if math.isnan(ts_delta) else f", strict on the training rollouts {ts_delta:+.3f}")
            + ")"
        )
    metrics["reward_hacking"] = 1.0 if hacking else 0.0
    findings.append(
        Finding(
            alert_id="score.reward_hacking",
            layer=Layer.SCORE,
            severity=Severity.CRITICAL if hacking else Severity.OK,
            message=message,
            value=r_delta,
            threshold=HACK_REWARD_RISE,
            rule=f"train_reward_delta > {HACK_REWARD_RISE} and strict_acc_delta <= {HACK_STRICT_FLAT} and "
            f"train_reward_delta - train_strict_delta > {HACK_REWARD_RISE} (when training rollouts carry strict)",
            numbers=numbers,
        )
    )
    has_strict = bool(stricts)
    findings.append(
        Finding(
            alert_id="score.no_strict_score",
            layer=Layer.SCORE,
            severity=Severity.OK if has_strict else Severity.WARNING,
            message=(
                "strict score available"
                if has_strict
                else "no strict score in any rollout: hacking cannot be told from progress"
            ),
            value=float(len(stricts)),
            threshold=1.0,
            rule="num_strict_steps < 1",
        )
    )
    findings.append(
        graded(
            "score.strict_regression",
            Layer.SCORE,
            s_delta,
            metric="strict_acc_delta",
            warning=STRICT_DROP_WARNING,
            above=False,
            what="strict score fell during the run",
            numbers={"strict_acc_first": s_first, "strict_acc_last": s_last},
        )
    )
    return LayerOutput(tuple(findings), metrics)


def diagnose_rewarded_wrong(rollouts: Sequence[Rollout]) -> LayerOutput:
    """Share of strict-wrong rollouts that the training reward paid like correct ones (lenient reward)."""
    scored = [r for r in rollouts if r.strict_score is not None]
    right = [r.reward for r in scored if r.strict_score is not None and r.strict_score >= STRICT_CORRECT]
    wrong = [r for r in scored if r.strict_score is not None and r.strict_score < STRICT_CORRECT]
    ref = float(np.mean(right)) if right else (max(r.reward for r in scored) if scored else math.nan)
    if not wrong or math.isnan(ref) or ref <= 0:
        rate = math.nan
        paid: list[Rollout] = []
    else:
        paid = [r for r in wrong if r.reward >= REWARDED_WRONG_RELATIVE * ref]
        rate = len(paid) / len(wrong)
    finding = graded(
        "score.rewarded_wrong",
        Layer.SCORE,
        rate,
        metric="rewarded_wrong_rate",
        warning=REWARDED_WRONG_WARNING,
        critical=REWARDED_WRONG_CRITICAL,
        what="strict-wrong responses rewarded like correct ones (lenient or hackable reward)",
        evidence=[rollout_ref(r.run_id, r.step, r.prompt_id, r.sample_index) for r in paid[:EVIDENCE_MAX]],
        numbers={"num_wrong": float(len(wrong)), "num_right": float(len(right)), "correct_reward_mean": ref},
    )
    return LayerOutput((finding,), {"rewarded_wrong_rate": rate})


def diagnose_unrewarded_correct(rollouts: Sequence[Rollout]) -> LayerOutput:
    """Share of strict-correct training rollouts the reward paid like wrong ones (false negatives).

    A format gate stricter than the evaluator (paper §10: the Coding harness's format gate) scores correct
    answers 0, so the policy is pushed away from them and whole levels look unlearnable. The reference is
    the highest reward observed: a correct answer paid below half of it counts as unrewarded.
    """
    scored = [r for r in rollouts if r.strict_score is not None]
    right = [r for r in scored if r.strict_score is not None and r.strict_score >= STRICT_CORRECT]
    top = max((r.reward for r in scored), default=math.nan)
    if not right or math.isnan(top) or top <= 0:
        rate, unpaid = math.nan, []
    else:
        unpaid = [r for r in right if r.reward < REWARDED_WRONG_RELATIVE * top]
        rate = len(unpaid) / len(right)
    finding = graded(
        "score.unrewarded_correct",
        Layer.SCORE,
        rate,
        metric="unrewarded_correct_rate",
        warning=UNREWARDED_CORRECT_WARNING,
        critical=UNREWARDED_CORRECT_CRITICAL,
        what="strict-correct responses the reward pays like wrong ones (format gate or reward false negatives)",
        evidence=[rollout_ref(r.run_id, r.step, r.prompt_id, r.sample_index) for r in unpaid[:EVIDENCE_MAX]],
        numbers={"num_right": float(len(right)), "top_reward": top},
    )
    return LayerOutput((finding,), {"unrewarded_correct_rate": rate})


def diagnose_score(metric_rows: Sequence[MetricRow], train: Sequence[Rollout], val: Sequence[Rollout]) -> LayerOutput:
    """Run every score-layer rule."""
    return LayerOutput.merge(
        [
            diagnose_hacking(metric_rows, train, val),
            diagnose_rewarded_wrong([*train, *val]),
            diagnose_unrewarded_correct(train),
        ]
    )
