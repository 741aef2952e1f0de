"""Update-stability rules (issue #8 unstable-optimiser scenario): a jumping policy and a collapsed score fire."""

from __future__ import annotations

import math

from diagnostics.findings import Severity
from diagnostics.schema import MetricRow
from diagnostics.updates import diagnose_updates


def _rows(kl: list[float], score: list[float], entropy: list[float]) -> list[MetricRow]:
    return [
        MetricRow(step=i + 1, data={"actor/ppo_kl": k, "critic/score/mean": s, "actor/entropy": e})
        for i, (k, s, e) in enumerate(zip(kl, score, entropy, strict=True))
    ]


def _severity(out, alert_id: str) -> Severity:  # type: ignore[no-untyped-def]
    return next(f.severity for f in out.findings if f.alert_id == alert_id)


def test_a_high_learning_rate_run_fires_both_rules() -> None:
    # Shape of a real 30-step run of benchmarks/scenarios/unstable-optimiser/defective (lr 1.6e-3, clip [0.1, 11]).
    out = diagnose_updates(_rows([0.12, 0.106] + [0.0] * 28, [0.57, 0.05] + [0.0] * 28, [0.13, 0.14] + [0.45] * 28))
    assert out.metrics["ppo_kl_max"] == 0.12
    assert out.metrics["train_score_collapse"] > 0.8
    assert _severity(out, "signal.update_too_large") is Severity.CRITICAL
    assert _severity(out, "signal.train_score_collapse") is Severity.CRITICAL


def test_a_healthy_run_fires_nothing() -> None:
    # The oracle harness: step KL below 0.002, training score rising.
    out = diagnose_updates(_rows([0.001, -0.0003] * 15, [0.55 + 0.007 * i for i in range(30)], [0.12] * 30))
    assert all(f.severity is Severity.OK for f in out.findings)
    assert out.metrics["train_score_collapse"] < 0


def test_no_trainer_metrics_means_no_verdict() -> None:
    out = diagnose_updates([])
    assert math.isnan(out.metrics["ppo_kl_max"]) and math.isnan(out.metrics["train_score_collapse"])
    assert all(f.severity is Severity.OK for f in out.findings)
