"""Update-stability rules (the unstable-optimiser scenario): a jumping policy and a collapsed score fire."""

from __future__ import annotations

import math

import pytest

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
    # Shape of a real 30-step run of the unstable-optimiser scenario's defective form (lr 1.6e-3, clip [0.1, 11]).
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


def test_update_size_and_reference_distance_are_reported_and_still_steps_fire() -> None:
    """The update the trainer applied (actor/update_norm) and the distance from the reference policy."""
    rows = [
        MetricRow(step=i + 1, data={"actor/update_norm": u, "actor/ref_param_distance": d, "actor/kl_loss": k})
        for i, (u, d, k) in enumerate(
            zip([0.1, 0.0, 0.0, 0.03], [0.1, 0.1, 0.1, 0.12], [0.0, 0.01, 0.02, 0.03], strict=True)
        )
    ]
    out = diagnose_updates(rows)
    assert out.metrics["update_norm_max"] == 0.1 and out.metrics["update_norm_mean"] == pytest.approx(0.0325)
    assert out.metrics["no_update_share"] == 0.5 and out.metrics["ref_distance"] == 0.12
    assert out.metrics["kl_to_ref"] == pytest.approx(0.015)
    assert _severity(out, "signal.no_update") is Severity.WARNING  # 0.5 of the steps: > 0.25, not > 0.5
    moving = diagnose_updates([MetricRow(step=1, data={"actor/update_norm": 0.03})])
    assert _severity(moving, "signal.no_update") is Severity.OK


def test_a_trainer_without_update_metrics_gets_notes_not_silence() -> None:
    out = diagnose_updates([MetricRow(step=1, data={"critic/score/mean": 0.5})])
    assert math.isnan(out.metrics["no_update_share"]) and math.isnan(out.metrics["ref_distance"])
    assert any(n.startswith("signal.no_update: not evaluated") for n in out.notes)
    assert any(n.startswith("signal.update_too_large: not evaluated") for n in out.notes)
