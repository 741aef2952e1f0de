"""Score layer: strict held-out score versus training reward, their trends, and the reward-hacking alarm.

Pure functions over metric rows and run-table rows (`diagnostics/table.py`); paper §6.3 rule 4: shaped reward
up while the strict score is flat or down = reward hacking. The hacking alarm is always evaluated; when no
strict score exists the report says so with a warning instead of staying silent.

Reward against the protected evaluator on the same rollouts, one rule per way a reward can
disagree with strict correctness:

- `rewarded_wrong_rate`: it pays strict-wrong answers (a lenient or hackable reward);
- `unrewarded_correct_rate`: it fails strict-right answers (a format gate stricter than the evaluator);
- `misranked_group_rate` (with `rank_violations`, `rank_violation_rate`, `reward_rank_agreement`): inside a
  GRPO group it does not order the samples the way strict correctness does, which is what the advantage
  reads; a reward that pays everything the same (a constant, or one that ignores correctness) fails here
  even when the two rates above have no reference to measure against.

A rule whose inputs are missing (no strict scores, a reward that never pays) yields a NaN value and a note
naming the reason (`LayerOutput.notes`), never a silent OK.

Trends compare the mean of the last window of steps with the mean of the first window; a window is a third
of the steps seen (at least one step), so short runs compare first and last step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import polars as pl

from diagnostics.findings import Finding, Layer, LayerOutput, Severity, graded
from diagnostics.query import GROUP_KEYS, aggregate, group_batches, refs, refs_where
from diagnostics.schema import TRAIN_REWARD_METRIC, MetricRow

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
# A reward equal to that share within float rounding counts as reaching it: the mean's last bit depends on the
# summation order, and a rule must not flip on it.
ROUNDING_SLACK = 1e-9
REWARDED_WRONG_WARNING = 0.10
REWARDED_WRONG_CRITICAL = 0.30
UNREWARDED_CORRECT_WARNING = 0.05  # of strict-correct training rollouts paid below half the top reward
UNREWARDED_CORRECT_CRITICAL = 0.20
# Rank agreement inside GRPO groups with both strict-right and strict-wrong samples ("mixed" groups): a group
# is misranked when some wrong sample is rewarded at least as much as some right one (its advantage does not
# push the policy toward the right answers). Graded on the share of mixed groups, given enough of them.
MISRANKED_GROUP_WARNING = 0.10
MISRANKED_GROUP_CRITICAL = 0.30
MIN_MIXED_GROUPS = 5
EVIDENCE_MAX = 5


def trend(series: Sequence[float]) -> tuple[float, float, float]:
    """Return `(first_window_mean, last_window_mean, delta)` of a per-step series (NaN when < 2 points)."""
    if len(series) < 2:
        return math.nan, math.nan, math.nan
    window = max(1, len(series) // 3)
    first = float(np.mean(series[:window]))
    last = float(np.mean(series[-window:]))
    return first, last, last - first


def per_step_mean(rows: pl.DataFrame, strict: bool) -> list[tuple[int, float]]:
    """Return `[(step, mean)]` of rewards (or of strict scores, skipping rollouts without one), by step."""
    column = "strict_score" if strict else "reward"
    means = pl.concat(  # batches of whole steps (`query.group_batches`): each step's mean is in one batch
        batch.lazy().select("step", column).drop_nulls(column).collect().group_by("step").agg(pl.col(column).mean())
        for _, batch in group_batches(rows)
    ).sort("step")
    return [(int(step), float(value)) for step, value in means.iter_rows()]


def strict_by_step(rows: pl.DataFrame) -> dict[int, dict[str, float]]:
    """Mean strict score per prompt, per validation step (`{step: {prompt_id: mean}}`, steps with a score only)."""
    scored = rows.lazy().filter((pl.col("split") == "val") & pl.col("strict_score").is_not_null())
    means = (
        scored.select("step", "prompt_id", "strict_score")
        .collect()
        .group_by("step", "prompt_id", maintain_order=True)
        .agg(pl.col("strict_score").mean())
    )
    out: dict[int, dict[str, float]] = {}
    for step, prompt, value in means.iter_rows():
        out.setdefault(int(step), {})[str(prompt)] = float(value)
    return out


def train_reward_series(metric_rows: Sequence[MetricRow], train: pl.DataFrame) -> list[tuple[int, float]]:
    """Per-step training reward: verl's `critic/score/mean` when logged, else the train rollouts' mean."""
    logged = [(row.step, row.data[TRAIN_REWARD_METRIC]) for row in metric_rows if TRAIN_REWARD_METRIC in row.data]
    return logged if logged else per_step_mean(train, strict=False)


def strict_series(train: pl.DataFrame, val: pl.DataFrame) -> list[tuple[int, float]]:
    """Per-step strict score: from validation rollouts, else from training rollouts that carry one."""
    series = per_step_mean(val, strict=True)
    return series if series else per_step_mean(train, strict=True)


def diagnose_hacking(metric_rows: Sequence[MetricRow], train: pl.DataFrame, val: pl.DataFrame) -> LayerOutput:
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
    # unknown (NaN) when the trend could not be checked: a trigger reading it must not see a silent "no"
    metrics["reward_hacking"] = math.nan if math.isnan(r_delta) or math.isnan(s_delta) else float(hacking)
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
    notes = []
    if math.isnan(r_delta) or math.isnan(s_delta):
        notes.append(f"score.reward_hacking: not evaluated: {message.split(': ', 1)[1]}")
    if math.isnan(s_delta):
        notes.append(f"score.strict_regression: not evaluated: {len(stricts)} step(s) carry a strict score (2 needed)")
    return LayerOutput(tuple(findings), metrics, tuple(notes))


RIGHT = pl.col("strict_score") >= STRICT_CORRECT
WRONG = pl.col("strict_score") < STRICT_CORRECT


def diagnose_rewarded_wrong(train: pl.DataFrame, val: pl.DataFrame) -> LayerOutput:
    """Share of strict-wrong rollouts that the training reward paid like correct ones (lenient reward)."""
    parts = (train, val)  # evidence lists training rollouts first
    reward = pl.col("reward")
    counts = [
        aggregate(rows, RIGHT.sum().alias("n_right"), reward.filter(RIGHT).sum().alias("right_sum"),
                  WRONG.sum().alias("n_wrong"), reward.filter(WRONG).max().alias("wrong_max"))
        for rows in parts
    ]  # fmt: skip
    n_right = sum(int(c[0]) for c in counts)
    n_wrong = sum(int(c[2]) for c in counts)
    if n_right:
        ref = sum(float(c[1]) for c in counts) / n_right
    else:
        tops = [float(c[3]) for c in counts if c[3] is not None]
        ref = max(tops) if tops else math.nan
    evidence: list[str] = []
    if not n_wrong or math.isnan(ref) or ref <= 0:
        rate = math.nan
    else:
        paid = WRONG & (reward >= REWARDED_WRONG_RELATIVE * ref * (1 - ROUNDING_SLACK))
        rate = sum(int(aggregate(rows, paid.sum())[0]) for rows in parts) / n_wrong
        for rows in parts:
            evidence += refs_where(rows, paid, EVIDENCE_MAX - len(evidence))
    finding = graded(
        "score.rewarded_wrong",
        Layer.SCORE,
        rate,
        metric="rewarded_wrong_rate",
        warning=REWARDED_WRONG_WARNING,
        critical=REWARDED_WRONG_CRITICAL,
        what="strict-wrong responses rewarded like correct ones (lenient or hackable reward)",
        evidence=evidence,
        numbers={"num_wrong": float(n_wrong), "num_right": float(n_right), "correct_reward_mean": ref},
    )
    return LayerOutput((finding,), {"rewarded_wrong_rate": rate})


def diagnose_unrewarded_correct(train: pl.DataFrame) -> LayerOutput:
    """Share of strict-correct training rollouts the reward paid like wrong ones (false negatives).

    A format gate stricter than the evaluator (paper §10: the Coding harness's format gate) scores correct
    answers 0, so the policy is pushed away from them and whole levels look unlearnable. The reference is
    the highest reward observed: a correct answer paid below half of it counts as unrewarded.
    """
    reward = pl.col("reward")
    n_right, top_value = aggregate(
        train, RIGHT.sum().alias("n_right"), reward.filter(pl.col("strict_score").is_not_null()).max().alias("top")
    )
    top = math.nan if top_value is None else float(top_value)
    evidence: list[str] = []
    if not n_right or math.isnan(top) or top <= 0:
        rate = math.nan
    else:
        unpaid = RIGHT & (reward < REWARDED_WRONG_RELATIVE * top)
        rate = int(aggregate(train, unpaid.sum())[0]) / n_right
        evidence = refs_where(train, unpaid, EVIDENCE_MAX)
    finding = graded(
        "score.unrewarded_correct",
        Layer.SCORE,
        rate,
        metric="unrewarded_correct_rate",
        warning=UNREWARDED_CORRECT_WARNING,
        critical=UNREWARDED_CORRECT_CRITICAL,
        what="strict-correct responses the reward pays like wrong ones (format gate or reward false negatives)",
        evidence=evidence,
        numbers={"num_right": float(n_right), "top_reward": top},
    )
    return LayerOutput((finding,), {"unrewarded_correct_rate": rate})


def rank_violations(strict: np.ndarray, rewards: np.ndarray) -> tuple[int, int, int]:
    """Count `(pairs, violations, ties)` between strict-wrong and strict-right responses of one group.

    A violation is a strict-wrong response rewarded strictly above a strict-right one; a tie is equal reward.
    The reference definition: the backtest grades candidates with it, `rank_agreement` computes the same
    counts column-wise for the report.
    """
    right = strict >= STRICT_CORRECT
    wrong = ~right
    if not right.any() or not wrong.any():
        return 0, 0, 0
    diff = rewards[wrong][:, None] - rewards[right][None, :]
    return int(diff.size), int((diff > 0).sum()), int((diff == 0).sum())


def rank_agreement(rows: pl.DataFrame) -> pl.DataFrame:
    """Per mixed group (both strict-right and strict-wrong samples, every sample strict-scored): `step`,
    `group_id`, `pairs`, `violations`, `ties` (as `rank_violations`) and `misranked` (some wrong sample
    rewarded at least as much as some right one), in first-seen order (aggregated batch by batch of whole
    steps, `query.group_batches`)."""
    parts = [_rank_agreement(batch, offset) for offset, batch in group_batches(rows)]
    return pl.concat(parts).sort("__order").drop("__order")


def _rank_agreement(rows: pl.DataFrame, offset: int) -> pl.DataFrame:
    strict = pl.col("strict_score")
    scored = (
        rows.lazy()
        .select(*GROUP_KEYS, "reward", "strict_score")
        .with_row_index("__order", offset=offset)
        .filter(strict.null_count().over(GROUP_KEYS) == 0)
        .with_columns(right=strict >= STRICT_CORRECT)
    )
    right = scored.filter("right").select(*GROUP_KEYS, r_right="reward")
    wrong = scored.filter(~pl.col("right")).select(*GROUP_KEYS, "__order", r_wrong="reward")
    diff = pl.col("r_wrong") - pl.col("r_right")
    return (
        wrong.join(right, on=list(GROUP_KEYS), how="inner")
        .group_by(*GROUP_KEYS)
        .agg(
            pl.col("__order").min(),
            pairs=pl.len(),
            violations=(diff > 0).sum(),
            ties=(diff == 0).sum(),
            misranked=(diff >= 0).any(),
        )
        .collect()
    )


def diagnose_rank_agreement(train: pl.DataFrame) -> LayerOutput:
    """Does the training reward rank each group's samples the way strict correctness does? (training rollouts)

    Metrics: `mixed_groups`, `rank_pairs`, `rank_violations` (wrong above right, as the backtest counts them),
    `rank_violation_rate`, `misranked_group_rate` (the graded share) and `reward_rank_agreement` (share of
    right/wrong pairs ordered the right way, ties half: 1 = ranks like the evaluator, 0.5 = no better than
    chance). NaN, with a note, below `MIN_MIXED_GROUPS` mixed groups.
    """
    groups = rank_agreement(train)
    n = groups.height
    pairs = int(groups["pairs"].sum()) if n else 0
    violations = int(groups["violations"].sum()) if n else 0
    ties = int(groups["ties"].sum()) if n else 0
    misranked = groups.filter("misranked")
    enough = n >= MIN_MIXED_GROUPS
    rate = misranked.height / n if enough else math.nan
    metrics = {
        "mixed_groups": float(n),
        "rank_pairs": float(pairs),
        "rank_violations": float(violations),
        "rank_violation_rate": violations / pairs if pairs and enough else math.nan,
        "misranked_group_rate": rate,
        "reward_rank_agreement": (pairs - violations - 0.5 * ties) / pairs if pairs and enough else math.nan,
    }
    evidence: list[str] = []
    if misranked.height:  # the wrong samples of the first misranked groups that outrank or tie a right one
        keys = misranked.head(EVIDENCE_MAX).select(*GROUP_KEYS)
        strict = pl.col("strict_score")
        lowest_right = pl.col("reward").filter(strict >= STRICT_CORRECT).min().over(GROUP_KEYS)
        hits = (
            train.lazy()
            .join(keys.lazy(), on=list(GROUP_KEYS), how="semi", maintain_order="left")
            .filter((strict < STRICT_CORRECT) & (pl.col("reward") >= lowest_right))
            .collect()
        )
        evidence = refs(hits.unique(GROUP_KEYS, keep="first", maintain_order=True), EVIDENCE_MAX)
    finding = graded(
        "score.misranked_groups",
        Layer.SCORE,
        rate,
        metric="misranked_group_rate",
        warning=MISRANKED_GROUP_WARNING,
        critical=MISRANKED_GROUP_CRITICAL,
        what="groups where the reward ranks a strict-wrong sample at or above a strict-right one",
        evidence=evidence,
        numbers={
            "mixed_groups": float(n),
            "misranked_groups": float(misranked.height),
            "rank_pairs": float(pairs),
            "rank_violations": float(violations),
            "rank_ties": float(ties),
            "reward_rank_agreement": metrics["reward_rank_agreement"],
        },
    )
    notes: tuple[str, ...] = ()
    if not enough:
        notes = (
            f"score.misranked_groups: not evaluated: {n} training group(s) hold both strict-right and strict-wrong "
            f"samples (at least {MIN_MIXED_GROUPS} needed; strict scores on the training rollouts are required)",
        )
    return LayerOutput((finding,), metrics, notes)


def _reference_notes(train: pl.DataFrame, val: pl.DataFrame, out: LayerOutput) -> tuple[str, ...]:
    """Why the rewarded-wrong / unrewarded-correct rules read NaN, when they do."""
    notes = []
    scored = sum(int(rows["strict_score"].is_not_null().sum()) for rows in (train, val))
    if math.isnan(out.metrics.get("rewarded_wrong_rate", 0.0)):
        why = (
            "no rollout carries a strict score"
            if not scored
            else "no strict-wrong rollout, or the reward never pays above 0 on strict-scored rollouts (no reference "
            "for 'paid like a correct answer'; score.misranked_groups still compares the ranking)"
        )
        notes.append(f"score.rewarded_wrong: not evaluated: {why}")
    if math.isnan(out.metrics.get("unrewarded_correct_rate", 0.0)):
        why = (
            "no strict-right training rollout"
            if train.height
            else "the run has no training rollouts (strict-right answers are judged on those)"
        )
        notes.append(f"score.unrewarded_correct: not evaluated: {why}, or the training reward never exceeds 0")
    return tuple(notes)


def diagnose_score(metric_rows: Sequence[MetricRow], train: pl.DataFrame, val: pl.DataFrame) -> LayerOutput:
    """Run every score-layer rule."""
    agreement = LayerOutput.merge([diagnose_rewarded_wrong(train, val), diagnose_unrewarded_correct(train)])
    return LayerOutput.merge(
        [
            diagnose_hacking(metric_rows, train, val),
            agreement,
            LayerOutput((), {}, _reference_notes(train, val, agreement)),
            diagnose_rank_agreement(train),
        ]
    )
