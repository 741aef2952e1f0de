"""Signal layer: is there a learning signal? Dead groups, within-group spread, reward components, advantages.

Pure functions over `Rollout` records and metric rows (paper §6.1 dimension 1, §6.3 rule 1, §10). Every
threshold lives next to the rule that uses it. GRPO groups are keyed by `(step, group_id)`.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np

from diagnostics.findings import Finding, Layer, LayerOutput, Severity, graded, rollout_ref
from diagnostics.schema import MetricRow, Rollout

# A group is dead when its reward std is below this: zero GRPO advantage (paper §1, DGR).
DEAD_STD = 1e-6
# Paper §6.1: dead > 50% CRITICAL, dead > 30% WARNING; spread < 0.05 WARNING.
DEAD_WARNING = 0.30
DEAD_CRITICAL = 0.50
SPREAD_WARNING = 0.05
# Paper §6.3 rule 1: dead > 30% and one discrete reward value holds > 50% of rollouts -> signal too coarse.
COARSE_DEAD = 0.30
COARSE_TOP_SHARE = 0.50
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
    """Group rollouts by `(step, group_id)`, keeping file order inside each group."""
    groups: dict[GroupKey, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        groups[(r.step, r.group_id)].append(r)
    return dict(groups)


def group_reward_stds(rewards: Sequence[Sequence[float]]) -> np.ndarray:
    """Return the population std of each group's rewards (shape `[num_groups]`)."""
    return np.array([float(np.std(np.asarray(g, dtype=np.float64))) if len(g) else 0.0 for g in rewards])


def dead_mask(rewards: Sequence[Sequence[float]]) -> np.ndarray:
    """Return a bool mask `[num_groups]`: True where the group's reward std < `DEAD_STD`."""
    return group_reward_stds(rewards) < DEAD_STD


def _ref(r: Rollout) -> str:
    return rollout_ref(r.run_id, r.step, r.prompt_id, r.sample_index)


# Trainer metric: the dead share among the groups a group filter let through to the update. When a run
# logs it, the dead-group alert grades it, since dead groups the filter dropped cost no signal.
DEAD_KEPT_METRIC = "rollout/dead_kept_group_ratio"


def _dead_after_filter(metric_rows: Sequence[MetricRow]) -> float | None:
    values = [row.data[DEAD_KEPT_METRIC] for row in metric_rows if DEAD_KEPT_METRIC in row.data]
    return float(np.mean(values)) if values else None


def diagnose_dead_groups(rollouts: Sequence[Rollout], metric_rows: Sequence[MetricRow] = ()) -> LayerOutput:
    """Dead-group ratio, within-group spread and the coarse-signal rule (paper §6.1, §6.3 rule 1).

    The rollouts give the raw dead-group ratio (reported as `dead_group_ratio`); the alert grades the share
    that reached the update when the trainer logged it (a group filter that drops dead groups fixes them).
    """
    groups = group_rollouts(rollouts)
    keys = list(groups)
    rewards = [[r.reward for r in groups[k]] for k in keys]
    stds = group_reward_stds(rewards)
    n = len(keys)
    dead = stds < DEAD_STD
    ratio = float(dead.mean()) if n else math.nan
    spread = float(stds.mean()) if n else math.nan
    dead_refs = [_ref(groups[k][0]) for k, d in zip(keys, dead, strict=True) if d][:EVIDENCE_MAX]
    low_refs = [_ref(groups[k][0]) for k, s in sorted(zip(keys, stds, strict=True), key=lambda x: x[1])][:EVIDENCE_MAX]
    counts = Counter(round(r.reward, 6) for r in rollouts)
    top_share = counts.most_common(1)[0][1] / len(rollouts) if rollouts else math.nan
    steps = sorted({k[0] for k in keys})
    last_ratio = float(np.mean([d for k, d in zip(keys, dead, strict=True) if k[0] == steps[-1]])) if n else math.nan
    first_ratio = float(np.mean([d for k, d in zip(keys, dead, strict=True) if k[0] == steps[0]])) if n else math.nan
    metrics = {
        "num_groups": float(n),
        "dead_group_ratio": ratio,
        "dead_group_ratio_first_step": first_ratio,
        "dead_group_ratio_last_step": last_ratio,
        "reward_spread": spread,
        "reward_distinct_values": float(len(counts)),
        "reward_top_value_share": top_share,
    }
    numbers = {"num_groups": float(n), "dead_groups": float(dead.sum()) if n else 0.0}
    after_filter = _dead_after_filter(metric_rows)
    graded_ratio = ratio if after_filter is None else after_filter
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
            numbers=numbers,
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
            numbers={"dead_group_ratio": ratio, "reward_distinct_values": float(len(counts))},
        )
    )
    return LayerOutput(tuple(findings), metrics)


def diagnose_components(rollouts: Sequence[Rollout]) -> LayerOutput:
    """Reward component adoption: share of rollouts where each component is non-zero, and its std.

    A component that fires on almost every rollout with (almost) the same value is a constant offset that
    group normalisation removes (paper §9); one that never fires carries no signal.
    """
    names = sorted({name for r in rollouts for name in r.reward_components})
    findings: list[Finding] = []
    metrics: dict[str, float] = {"num_reward_components": float(len(names))}
    for name in names:
        values = np.array([r.reward_components.get(name, 0.0) for r in rollouts], dtype=np.float64)
        adoption = float((values != 0).mean())
        std = float(values.std())
        metrics[f"component/{name}/adoption"] = adoption
        metrics[f"component/{name}/std"] = std
        metrics[f"component/{name}/mean"] = float(values.mean())
        enough = len(values) >= COMPONENT_MIN_ROLLOUTS
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
                numbers={"adoption": adoption, "std": std, "n": float(len(values))},
            )
        )
    return LayerOutput(tuple(findings), metrics)


def grpo_advantages(rewards: Sequence[Sequence[float]]) -> list[np.ndarray]:
    """Return per-group GRPO advantages `(r - mean_g) / (std_g + eps)`, one array `[group_size]` per group."""
    out = []
    for g in rewards:
        arr = np.asarray(g, dtype=np.float64)
        out.append((arr - arr.mean()) / (arr.std() + GRPO_EPS) if len(arr) else arr)
    return out


def diagnose_advantages(rollouts: Sequence[Rollout], metric_rows: Sequence[MetricRow]) -> LayerOutput:
    """Advantage health: share of zero-advantage samples, trainer-reported extremes, dead training."""
    groups = group_rollouts(rollouts)
    adv = grpo_advantages([[r.reward for r in g] for g in groups.values()])
    flat = np.concatenate(adv) if adv else np.zeros(0)
    zero_share = float((np.abs(flat) < GRPO_EPS).mean()) if flat.size else math.nan
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
    return LayerOutput(tuple(findings), metrics)


def diagnose_signal(rollouts: Sequence[Rollout], metric_rows: Sequence[MetricRow]) -> LayerOutput:
    """Run every signal-layer rule over (training) rollouts and metric rows."""
    return LayerOutput.merge(
        [
            diagnose_dead_groups(rollouts, metric_rows),
            diagnose_components(rollouts),
            diagnose_advantages(rollouts, metric_rows),
        ]
    )
