"""Version layer: how a run compares with its parent version and its siblings.

Pure functions over two or more `HealthReport`s (paper §1 "version" layer, §6.3 rule 4 across versions).
Deltas are `current - parent` under the key `vs_parent/<metric>`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from diagnostics.findings import Finding, HealthReport, Layer, LayerOutput, Severity, graded, new_alerts
from diagnostics.score import HACK_REWARD_RISE, HACK_STRICT_FLAT

COMPARED_METRICS = (
    "strict_acc",
    "train_reward_mean",
    "val_reward_mean",
    "dead_group_ratio",
    "reward_spread",
    "truncation_rate",
    "response_length_mean",
    "degenerate_rate",
    "format_failure_rate",
    "rewarded_wrong_rate",
)
# Strict score below the parent's by more than this: warning / critical.
STRICT_REGRESSION_WARNING = -0.02
STRICT_REGRESSION_CRITICAL = -0.05


def _delta(current: Mapping[str, float], parent: Mapping[str, float], key: str) -> float:
    a, b = current.get(key, math.nan), parent.get(key, math.nan)
    return a - b


def diagnose_version(metrics: Mapping[str, float], findings: Sequence[Finding], parent: HealthReport) -> LayerOutput:
    """Compare a run's metrics and findings with its parent version's report."""
    deltas = {f"vs_parent/{k}": _delta(metrics, parent.metrics, k) for k in COMPARED_METRICS}
    strict_d = deltas["vs_parent/strict_acc"]
    reward_d = deltas["vs_parent/train_reward_mean"]
    out: list[Finding] = [
        graded(
            "version.strict_regression",
            Layer.VERSION,
            strict_d,
            metric="vs_parent/strict_acc",
            warning=STRICT_REGRESSION_WARNING,
            critical=STRICT_REGRESSION_CRITICAL,
            above=False,
            what=f"strict score below the parent {parent.run_id}",
            numbers={"parent_strict_acc": parent.metrics.get("strict_acc", math.nan)},
        )
    ]
    hacking = not (math.isnan(strict_d) or math.isnan(reward_d)) and (
        reward_d > HACK_REWARD_RISE and strict_d <= HACK_STRICT_FLAT
    )
    out.append(
        Finding(
            alert_id="version.reward_hacking",
            layer=Layer.VERSION,
            severity=Severity.CRITICAL if hacking else Severity.OK,
            message=(
                f"reward hacking across versions: training reward {reward_d:+.3f} vs {parent.run_id} "
                f"while the strict score moved {strict_d:+.3f}"
                if hacking
                else f"reward vs strict against parent {parent.run_id}: consistent or not comparable"
            ),
            value=reward_d,
            threshold=HACK_REWARD_RISE,
            rule=f"vs_parent/train_reward_mean > {HACK_REWARD_RISE} and vs_parent/strict_acc <= {HACK_STRICT_FLAT}",
            numbers={"vs_parent/strict_acc": strict_d},
        )
    )
    fresh = new_alerts(findings, parent.findings, Severity.CRITICAL)
    out.append(
        Finding(
            alert_id="version.new_critical",
            layer=Layer.VERSION,
            severity=Severity.WARNING if fresh else Severity.OK,
            message=(
                f"new critical alerts vs {parent.run_id}: {', '.join(f.alert_id for f in fresh)}"
                if fresh
                else f"no new critical alerts vs {parent.run_id}"
            ),
            value=float(len(fresh)),
            threshold=0.0,
            rule="count of critical alerts absent from the parent > 0",
        )
    )
    deltas["version_reward_hacking"] = 1.0 if hacking else 0.0
    deltas["new_critical_alerts"] = float(len(fresh))
    return LayerOutput(tuple(out), deltas)


def compare_siblings(
    metrics: Mapping[str, float], siblings: Sequence[HealthReport], key: str = "strict_acc"
) -> LayerOutput:
    """Rank a run among sibling candidates on `key` (1 = best); no findings, metrics only."""
    mine = metrics.get(key, math.nan)
    others = [s.metrics.get(key, math.nan) for s in siblings]
    others = [x for x in others if not math.isnan(x)]
    if math.isnan(mine) or not others:
        return LayerOutput((), {})
    return LayerOutput(
        (),
        {
            f"siblings/{key}_rank": float(1 + sum(1 for x in others if x > mine)),
            f"siblings/{key}_best_delta": mine - max(others),
            "siblings/count": float(len(others)),
        },
    )
