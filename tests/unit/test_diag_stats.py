"""Paired bootstrap + Wilcoxon, and the four-way outcome classifier."""

from __future__ import annotations

import numpy as np
import pytest

from agent.decisions.evidence import classify_outcome
from diagnostics.findings import Finding, Layer, Severity
from diagnostics.stats import PairedComparison, paired_bootstrap


def test_identical_scores_ci_contains_zero_and_p_is_one() -> None:
    a = np.random.default_rng(0).integers(0, 9, size=78) / 8
    c = paired_bootstrap(a, a)
    assert c.ci_low <= 0.0 <= c.ci_high
    assert c.delta == 0.0 and c.p_wilcoxon == 1.0 and c.n == 78


def test_noisy_null_ci_contains_zero() -> None:
    rng = np.random.default_rng(1)
    a = rng.random(200)
    b = a + rng.normal(0, 0.1, 200)
    c = paired_bootstrap(a, b)
    assert c.ci_low < 0 < c.ci_high
    assert c.p_wilcoxon > 0.01


def test_shifted_scores_ci_excludes_zero() -> None:
    rng = np.random.default_rng(2)
    a = rng.random(77)
    b = a + 0.05 + rng.normal(0, 0.02, 77)
    c = paired_bootstrap(a, b)
    assert 0 < c.ci_low < c.delta < c.ci_high
    assert c.delta == pytest.approx(float(np.mean(b - a)))
    assert c.p_wilcoxon < 1e-6
    down = paired_bootstrap(b, a)
    assert down.ci_high < 0


def test_seeded_and_stratified() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.random(60), rng.random(60)
    assert paired_bootstrap(a, b) == paired_bootstrap(a, b)
    strata = ["aime24"] * 30 + ["cnmo"] * 30
    s = paired_bootstrap(a, b, strata=strata)
    assert s.delta == pytest.approx(float(np.mean(b - a)))
    with pytest.raises(ValueError, match="strata"):
        paired_bootstrap(a, b, strata=["x"])


def test_bad_inputs_raise() -> None:
    with pytest.raises(ValueError, match="equal-length"):
        paired_bootstrap([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="empty"):
        paired_bootstrap([], [])
    with pytest.raises(ValueError, match="NaN"):
        paired_bootstrap([float("nan")], [1.0])


def alert(alert_id: str, severity: Severity) -> Finding:
    return Finding(alert_id, Layer.SIGNAL, severity, "m", 1.0, 0.5, "rule")


UP = PairedComparison(0.5, 0.6, 0.1, 0.05, 0.15, 0.001, 50)
DOWN = PairedComparison(0.6, 0.5, -0.1, -0.15, -0.05, 0.001, 50)
FLAT = PairedComparison(0.5, 0.51, 0.01, -0.02, 0.04, 0.4, 50)


def test_classify_outcome() -> None:
    assert classify_outcome(UP, [], []) == "improvement"
    assert classify_outcome(DOWN, [], []) == "regression"
    assert classify_outcome(FLAT, [], []) == "insufficient"
    crit = alert("signal.dead_groups", Severity.CRITICAL)
    assert classify_outcome(UP, [crit], []) == "mixed"
    assert classify_outcome(UP, [crit], [crit]) == "improvement"  # not new
    assert classify_outcome(UP, [alert("score.rewarded_wrong", Severity.WARNING)], []) == "mixed"
    assert classify_outcome(UP, [alert("behaviour.truncation", Severity.WARNING)], []) == "improvement"
    tiny = PairedComparison(0.5, 0.9, 0.4, 0.3, 0.5, 0.1, 3)
    assert classify_outcome(tiny, [], []) == "insufficient"
