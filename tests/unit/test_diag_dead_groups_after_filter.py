"""A group filter that drops dead groups fixes them: the alert grades what reached the update."""

from __future__ import annotations

from diagnostics.findings import Severity
from diagnostics.schema import MetricRow, Rollout
from diagnostics.signal import diagnose_dead_groups
from diagnostics.table import table_from_rollouts


def _rollouts(n_groups: int = 10, n_dead: int = 8) -> list[Rollout]:
    out = []
    for g in range(n_groups):
        for i in range(4):
            reward = 1.0 if g < n_dead else float(i % 2)
            out.append(Rollout("r", 1, "train", f"p{g}", f"g{g}", i, "1+1=>", "x", "2", reward))
    return out


def _severity(metric_rows: list[MetricRow]) -> Severity:
    out = diagnose_dead_groups(table_from_rollouts(_rollouts()), metric_rows)
    [finding] = [f for f in out.findings if f.alert_id == "signal.dead_groups"]
    assert out.metrics["dead_group_ratio"] == 0.8  # the raw ratio is always reported
    return finding.severity


def test_raw_dead_ratio_alerts_without_filter_evidence() -> None:
    assert _severity([]) is Severity.CRITICAL


def test_dead_groups_dropped_by_the_filter_do_not_alert() -> None:
    rows = [MetricRow(1, {"rollout/dead_kept_group_ratio": 0.0, "rollout/kept_group_ratio": 0.2})]
    assert _severity(rows) is Severity.OK


def test_dead_groups_the_filter_let_through_still_alert() -> None:
    rows = [MetricRow(1, {"rollout/dead_kept_group_ratio": 0.6, "rollout/kept_group_ratio": 1.0})]
    assert _severity(rows) is Severity.CRITICAL
