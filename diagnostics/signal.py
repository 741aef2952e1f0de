"""Signal layer: is there a learning signal? Dead groups, within-group spread, reward components, advantages.

Pure functions over run-table rows (`diagnostics/table.py`) and metric rows (paper §6.1 dimension 1, §6.3
rule 1, §10). Every threshold lives next to the rule that uses it. GRPO groups are keyed by
`(step, group_id)`, in the order they first appear. `group_rollouts` groups typed records for the
backtest grader, which replays a candidate's rewards on them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import polars as pl

from diagnostics.findings import Finding, Layer, LayerOutput, Severity, graded
from diagnostics.query import GROUP_KEYS, aggregate, group_batches, per_group, refs
from diagnostics.schema import MetricRow, Rollout
from diagnostics.table import COMPONENT_PREFIX

# A group is dead when its reward std is below this: zero GRPO advantage (paper §1, DGR).
DEAD_STD = 1e-6
# `signal.dead_groups`' number: its graded ratio without the solved dead groups (every sample strict-right).
DEAD_UNSOLVED = "dead_unsolved_ratio"
# Paper §6.1: dead > 50% CRITICAL, dead > 30% WARNING; spread < 0.05 WARNING.
DEAD_WARNING = 0.30
DEAD_CRITICAL = 0.50
SPREAD_WARNING = 0.05
# Paper §6.3 rule 1: dead > 30% and one discrete reward value holds > 50% of rollouts -> signal too coarse.
COARSE_DEAD = 0.30
COARSE_TOP_SHARE = 0.50
# A reward is discrete (`reward_discrete`, read by the dense-auxiliary-reward skill) when it takes at most this
# many distinct values (rounded to 1e-6) over the rollouts (skills.context.reward_is_discrete uses it too).
DISCRETE_MAX_LEVELS = 8
# Paper §9: components firing on ~99% of rollouts act as constant offsets after group normalisation.
COMPONENT_CONSTANT_ADOPTION = 0.95
COMPONENT_CONSTANT_STD = 1e-3
COMPONENT_MIN_ROLLOUTS = 20
# Paper §10 (advantage corruption, demo value -5.48): |advantage| beyond this in the trainer's metrics.
ADVANTAGE_ABS_WARNING = 5.0
# Paper §6.3 anti-pattern "dead training": pg_loss exactly 0 over the last steps.
PG_LOSS_ZERO_STEPS = 3
GRPO_EPS = 1e-6
EVIDENCE_MAX = 5

GroupKey = tuple[int, str]


def group_rollouts(rollouts: Sequence[Rollout]) -> dict[GroupKey, list[Rollout]]:
    """Group typed rollouts by `(step, group_id)`, keeping file order inside each group."""
    groups: dict[GroupKey, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        groups[(r.step, r.group_id)].append(r)
    return dict(groups)


def group_stats(rows: pl.DataFrame) -> pl.DataFrame:
    """One row per GRPO group, in first-seen order: `step`, `group_key`, `n`, `std` (population), `dead`, `solved`
    (every sample strict-scored right), and the group's first rollout (`query.REF_COLUMNS`) for evidence."""
    strict = pl.col("strict_score")
    groups = per_group(
        rows,
        ["reward", "strict_score"],
        pl.len().alias("n"),
        pl.col("reward").std(ddof=0).alias("std"),
        ((strict.count() == pl.len()) & (strict.min() >= 1)).alias("solved"),
    )
    return groups.with_columns(dead=pl.col("std") < DEAD_STD)


# Trainer metric: the dead share among the groups a group filter let through to the update. When a run
# logs it, the dead-group alert grades it, since dead groups the filter dropped cost no signal.
DEAD_KEPT_METRIC = "rollout/dead_kept_group_ratio"


def _dead_after_filter(metric_rows: Sequence[MetricRow], rows: pl.DataFrame) -> float | None:
    """`dead_group_ratio_after_filter`: the mean over steps of the dead share among that step's kept groups (0
    for a step that kept none). From the trainer's `DEAD_KEPT_METRIC` when it logs it, else from the rollouts'
    `kept` flags (the same numbers, `diagnostics/groups.py`); None when neither exists."""
    values = [row.data[DEAD_KEPT_METRIC] for row in metric_rows if DEAD_KEPT_METRIC in row.data]
    if values:
        return float(np.mean(values))
    if "kept" not in rows.columns or not rows.height:
        return None
    kept = pl.col("kept")
    ratio = (pl.col("dead") & pl.col("kept")).sum() / pl.max_horizontal(pl.col("kept").sum(), 1)
    per_step = pl.concat(  # batches of whole steps (`query.group_batches`): each step's ratio is in one batch
        batch.lazy()
        .filter(kept.is_not_null())
        .group_by(*GROUP_KEYS)
        .agg(kept=kept.any(), dead=pl.col("reward").std(ddof=0) < DEAD_STD)
        .group_by("step")
        .agg(ratio=ratio)
        .collect()
        for _, batch in group_batches(rows)
    )
    return float(per_step["ratio"].mean()) if per_step.height else None  # type: ignore[arg-type]


def diagnose_dead_groups(rows: pl.DataFrame, metric_rows: Sequence[MetricRow] = ()) -> LayerOutput:
    """Dead-group ratio, within-group spread and the coarse-signal rule (paper §6.1, §6.3 rule 1).

    The rollouts give the raw dead-group ratio (reported as `dead_group_ratio`); the alert grades the share
    that reached the update when the trainer logged it (a group filter that drops dead groups fixes them).
    """
    groups = group_stats(rows)
    n = groups.height
    ratio = float(groups["dead"].mean()) if n else math.nan  # type: ignore[arg-type]
    spread = float(groups["std"].mean()) if n else math.nan  # type: ignore[arg-type]
    dead_refs = refs(groups.filter("dead"), EVIDENCE_MAX)
    # lowest spread first; spreads equal to 1e-12 (float noise of a dead group) tie and keep first-seen order
    low_refs = refs(groups.sort(pl.col("std").round(12), maintain_order=True), EVIDENCE_MAX)
    counts = rows.lazy().group_by(pl.col("reward").round(6)).len().collect()
    top_share = float(counts["len"].max()) / rows.height if rows.height else math.nan  # type: ignore[arg-type]
    by_step = groups.group_by("step").agg(pl.col("dead").mean()).sort("step")
    first_ratio = float(by_step["dead"][0]) if n else math.nan
    last_ratio = float(by_step["dead"][-1]) if n else math.nan
    dead_count = float(groups["dead"].sum()) if n else 0.0
    solved_dead = float((groups["dead"] & groups["solved"].fill_null(False)).sum()) if n else 0.0
    metrics = {
        "num_groups": float(n),
        "dead_group_ratio": ratio,
        "dead_group_ratio_first_step": first_ratio,
        "dead_group_ratio_last_step": last_ratio,
        "reward_spread": spread,
        "reward_distinct_values": float(counts.height),
        "reward_top_value_share": top_share,
        "reward_discrete": float(0 < counts.height <= DISCRETE_MAX_LEVELS) if rows.height else math.nan,
        "dead_solved_share": solved_dead / dead_count if dead_count else math.nan,
    }
    numbers = {"num_groups": float(n), "dead_groups": dead_count}
    after_filter = _dead_after_filter(metric_rows, rows)
    graded_ratio = ratio if after_filter is None else after_filter
    # The graded ratio without the dead groups every sample of which the evaluator scores right (solved prompts:
    # progress, not a missing signal); the candidate gate reads it (`agent.decisions.evidence.classify_outcome`).
    unsolved = graded_ratio * (1 - solved_dead / dead_count) if dead_count else graded_ratio
    if after_filter is not None:
        metrics["dead_group_ratio_after_filter"] = after_filter
        numbers = {**numbers, "dead_group_ratio_raw": ratio}
    findings = [
        graded(
            "signal.dead_groups",
            Layer.SIGNAL,
            graded_ratio,
            metric="dead_group_ratio" if after_filter is None else "dead_group_ratio_after_filter",
            warning=DEAD_WARNING,
            critical=DEAD_CRITICAL,
            what="dead groups (reward std 0 within the group: zero GRPO advantage)",
            evidence=dead_refs,
            numbers={**numbers, DEAD_UNSOLVED: unsolved},
        ),
        graded(
            "signal.low_spread",
            Layer.SIGNAL,
            spread,
            metric="reward_spread",
            warning=SPREAD_WARNING,
            above=False,
            what="low within-group reward spread (mean group std)",
            evidence=low_refs,
            numbers=numbers,
        ),
    ]
    coarse = graded_ratio > COARSE_DEAD and top_share > COARSE_TOP_SHARE if n else False
    findings.append(
        Finding(
            alert_id="signal.coarse_reward",
            layer=Layer.SIGNAL,
            severity=Severity.WARNING if coarse else Severity.OK,
            message=(
                f"signal too coarse: {ratio:.0%} dead groups and one reward value holds {top_share:.0%} of rollouts;"
                " consider a continuous reward (paper §6.3 rule 1)"
                if coarse
                else "reward granularity: not flagged"
            ),
            value=top_share,
            threshold=COARSE_TOP_SHARE,
            rule=f"dead_group_ratio > {COARSE_DEAD} and reward_top_value_share > {COARSE_TOP_SHARE}",
            evidence_rollout_ids=tuple(dead_refs) if coarse else (),
            numbers={"dead_group_ratio": ratio, "reward_distinct_values": float(counts.height)},
        )
    )
    return LayerOutput(tuple(findings), metrics)


def diagnose_components(rows: pl.DataFrame) -> LayerOutput:
    """Reward component adoption: share of rollouts where each component is non-zero, and its std.

    A component that fires on almost every rollout with (almost) the same value is a constant offset that
    group normalisation removes (paper §9); one that never fires carries no signal. A row without a
    component counts as 0 for it; components no row of `rows` carries are not listed.
    """
    columns = [c for c in rows.columns if c.startswith(COMPONENT_PREFIX)]
    present = (
        rows.lazy().select(pl.col(columns).is_not_null().any()).collect().row(0) if columns and rows.height else ()
    )
    names = sorted(c[len(COMPONENT_PREFIX) :] for c, seen in zip(columns, present, strict=True) if seen)
    findings: list[Finding] = []
    metrics: dict[str, float] = {"num_reward_components": float(len(names))}
    for name in names:
        values = pl.col(COMPONENT_PREFIX + name).fill_null(0.0)
        adoption, std, mean = aggregate(
            rows, (values != 0).mean().alias("adoption"), values.std(ddof=0).alias("std"), values.mean().alias("mean")
        )
        metrics[f"component/{name}/adoption"] = adoption
        metrics[f"component/{name}/std"] = std
        metrics[f"component/{name}/mean"] = mean
        enough = rows.height >= COMPONENT_MIN_ROLLOUTS
        constant = enough and adoption >= COMPONENT_CONSTANT_ADOPTION and std < COMPONENT_CONSTANT_STD
        silent = enough and adoption == 0.0
        if constant:
            message = f"component '{name}' fires on {adoption:.0%} of rollouts with std {std:.2g}: a constant offset"
        elif silent:
            message = f"component '{name}' is zero on every rollout: it carries no signal"
        else:
            message = f"component '{name}': adoption {adoption:.0%}, std {std:.3g}"
        findings.append(
            Finding(
                alert_id=f"signal.component.{name}",
                layer=Layer.SIGNAL,
                severity=Severity.WARNING if constant or silent else Severity.OK,
                message=message,
                value=adoption,
                threshold=COMPONENT_CONSTANT_ADOPTION,
                rule=(
                    f"adoption >= {COMPONENT_CONSTANT_ADOPTION} and std < {COMPONENT_CONSTANT_STD}, or adoption == 0"
                    f" (n >= {COMPONENT_MIN_ROLLOUTS})"
                ),
                numbers={"adoption": adoption, "std": std, "n": float(rows.height)},
            )
        )
    return LayerOutput(tuple(findings), metrics)


def grpo_advantages(rows: pl.DataFrame) -> pl.Series:
    """Per-rollout GRPO advantage `(r - mean_g) / (std_g + eps)` over each `(step, group_id)` group."""
    reward = pl.col("reward")
    adv = (reward - reward.mean().over(GROUP_KEYS)) / (reward.std(ddof=0).over(GROUP_KEYS) + GRPO_EPS)
    return rows.lazy().select(adv.alias("advantage")).collect().to_series()


def diagnose_advantages(rows: pl.DataFrame, metric_rows: Sequence[MetricRow]) -> LayerOutput:
    """Advantage health: share of zero-advantage samples, trainer-reported extremes, dead training."""
    zero = sum(  # batches of whole steps (`query.group_batches`): a group's advantages are in one batch
        int((grpo_advantages(batch).abs() < GRPO_EPS).sum()) for _, batch in group_batches(rows)
    )
    zero_share = zero / rows.height if rows.height else math.nan
    metrics: dict[str, float] = {"advantage_zero_share": zero_share}
    extremes = [
        abs(row.data[key])
        for row in metric_rows
        for key in ("critic/advantages/max", "critic/advantages/min")
        if key in row.data
    ]
    adv_abs_max = max(extremes) if extremes else math.nan
    metrics["advantage_abs_max_reported"] = adv_abs_max
    findings = [
        graded(
            "signal.advantage_extreme",
            Layer.SIGNAL,
            adv_abs_max,
            metric="max |critic/advantages/{max,min}|",
            warning=ADVANTAGE_ABS_WARNING,
            what="advantage out of the normalised range (corrupted advantage?)",
        )
    ]
    losses = [row.data["actor/pg_loss"] for row in metric_rows if "actor/pg_loss" in row.data]
    tail = losses[-PG_LOSS_ZERO_STEPS:]
    zero_steps = float(sum(1 for x in tail if x == 0.0)) if len(tail) == PG_LOSS_ZERO_STEPS else math.nan
    metrics["pg_loss_zero_last_steps"] = zero_steps
    notes = []
    if math.isnan(adv_abs_max):
        notes.append("signal.advantage_extreme: not evaluated: the trainer logs no critic/advantages/{max,min}")
    if math.isnan(zero_steps):
        notes.append(
            f"signal.dead_training: not evaluated: {len(losses)} step(s) log actor/pg_loss "
            f"({PG_LOSS_ZERO_STEPS} needed)"
        )
    findings.append(
        graded(
            "signal.dead_training",
            Layer.SIGNAL,
            zero_steps,
            metric=f"steps with actor/pg_loss == 0 among the last {PG_LOSS_ZERO_STEPS}",
            warning=None,
            critical=PG_LOSS_ZERO_STEPS - 0.5,
            what="dead training: the policy-gradient loss is exactly zero",
        )
    )
    return LayerOutput(tuple(findings), metrics, tuple(notes))


def diagnose_signal(rows: pl.DataFrame, metric_rows: Sequence[MetricRow]) -> LayerOutput:
    """Run every signal-layer rule over (training) rows and metric rows."""
    return LayerOutput.merge(
        [
            diagnose_dead_groups(rows, metric_rows),
            diagnose_components(rows),
            diagnose_advantages(rows, metric_rows),
        ]
    )
