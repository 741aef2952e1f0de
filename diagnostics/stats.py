"""Paired statistics for version decisions (paper App. F / reference §13) and the outcome classifier.

Per-prompt paired differences, a paired bootstrap (B = 10,000, seed 42, resampled at prompt level,
optionally stratified) for the 95% CI of the mean difference, and a two-sided Wilcoxon signed-rank test on
the same pairs. `classify_outcome` turns a comparison plus health alerts into one of the paper's four
outcome classes (`classify_restoration` does it by non-inferiority for a candidate that only moves settings
back into their documented range); a higher training reward alone never yields "improvement".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from scipy import stats as sps

from diagnostics.agentic_docs import AGENTIC_HACK_ALERT_IDS
from diagnostics.findings import Finding, Severity, new_alerts
from diagnostics.signal import DEAD_CRITICAL, DEAD_UNSOLVED

OutcomeClass = Literal["improvement", "regression", "mixed", "insufficient"]
CI_LEVEL = 0.95
# Fewer paired prompts than this is never evidence either way.
MIN_PAIRS = 5
# Alerts that make an upward CI "mixed" even below critical severity: hacking is never an improvement. The
# agentic ones (`diagnostics/agentic_docs.py`) include one-turn collapse: the brevity guard at decision time.
HACK_ALERT_IDS = (
    frozenset({"score.reward_hacking", "version.reward_hacking", "score.rewarded_wrong"}) | AGENTIC_HACK_ALERT_IDS
)
_BOOT_CHUNK_ELEMENTS = 4_000_000  # bound the bootstrap's index matrix to ~32 MB per chunk


@dataclass(frozen=True, slots=True)
class PairedComparison:
    """Paired comparison of per-prompt scores `b` (candidate) against `a` (incumbent); `delta = mean_b - mean_a`."""

    mean_a: float
    mean_b: float
    delta: float
    ci_low: float
    ci_high: float
    p_wilcoxon: float
    n: int

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return asdict(self)


def _boot_means(d: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Return `[n_boot]` means of `d` resampled with replacement."""
    n = d.shape[0]
    rows = max(1, _BOOT_CHUNK_ELEMENTS // max(1, n))
    out = np.empty(n_boot, dtype=np.float64)
    for start in range(0, n_boot, rows):
        stop = min(n_boot, start + rows)
        idx = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = d[idx].mean(axis=1)
    return out


def mean_ci(values: Sequence[float], n_boot: int = 10_000, seed: int = 42) -> tuple[float, float, float]:
    """`(mean, 95% CI low, high)` of per-prompt scores by the bootstrap (one sample; `paired_bootstrap` pairs).

    Raises:
        ValueError: `values` is empty or holds NaN or infinity.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0 or not np.isfinite(x).all():
        raise ValueError("scores must be a non-empty sequence of finite numbers")
    boots = _boot_means(x, n_boot, np.random.default_rng(seed))
    return float(x.mean()), float(np.quantile(boots, 0.025)), float(np.quantile(boots, 0.975))


def wilcoxon_p(d: np.ndarray) -> float:
    """Two-sided Wilcoxon signed-rank p-value of paired differences `d`; 1.0 when every difference is 0."""
    if not np.any(d != 0):
        return 1.0
    return float(sps.wilcoxon(d, zero_method="wilcox", alternative="two-sided").pvalue)


def paired_bootstrap(
    a: Sequence[float],
    b: Sequence[float],
    n_boot: int = 10_000,
    seed: int = 42,
    strata: Sequence[str] | None = None,
) -> PairedComparison:
    """Paired bootstrap CI of `mean(b) - mean(a)` and Wilcoxon p over per-prompt pairs.

    With `strata` (one label per pair, e.g. the sub-benchmark) pairs are resampled within each stratum and
    the stratum means are weighted by stratum size (problem-weighted, as in the paper's Math aggregate).

    Raises:
        ValueError: `a` and `b` differ in length, are empty, hold non-finite values, or `strata` misaligns.
    """
    xa = np.asarray(a, dtype=np.float64)
    xb = np.asarray(b, dtype=np.float64)
    if xa.shape != xb.shape or xa.ndim != 1:
        raise ValueError(f"paired scores need two equal-length 1-D sequences, got {xa.shape} and {xb.shape}")
    if xa.size == 0:
        raise ValueError("paired scores are empty: nothing to compare")
    if not (np.isfinite(xa).all() and np.isfinite(xb).all()):
        raise ValueError("paired scores contain NaN or infinity; drop or fix those prompts first")
    d = xb - xa
    rng = np.random.default_rng(seed)
    if strata is None:
        boots = _boot_means(d, n_boot, rng)
    else:
        labels = np.asarray(list(strata))
        if labels.shape != d.shape:
            raise ValueError(f"strata has {labels.shape[0]} labels for {d.shape[0]} pairs")
        boots = np.zeros(n_boot, dtype=np.float64)
        for label in np.unique(labels):
            part = d[labels == label]
            boots += _boot_means(part, n_boot, rng) * (part.size / d.size)
    alpha = (1.0 - CI_LEVEL) / 2.0
    low, high = np.quantile(boots, [alpha, 1.0 - alpha])
    return PairedComparison(
        mean_a=float(xa.mean()),
        mean_b=float(xb.mean()),
        delta=float(d.mean()),
        ci_low=float(low),
        ci_high=float(high),
        p_wilcoxon=wilcoxon_p(d),
        n=int(d.size),
    )


def _dead_by_success(finding: Finding) -> bool:
    """A critical dead-group alert that is not critical once the solved dead groups are left out."""
    unsolved = finding.numbers.get(DEAD_UNSOLVED, math.nan)
    return finding.alert_id == "signal.dead_groups" and unsolved == unsolved and unsolved <= DEAD_CRITICAL


def classify_outcome(
    comparison: PairedComparison,
    alerts_new: Sequence[Finding],
    alerts_parent: Sequence[Finding],
    min_effect: float = 0.0,
) -> OutcomeClass:
    """Classify a candidate against its parent from paired strict scores and health alerts.

    `min_effect` is the smallest |delta| that counts: the per-prompt bootstrap does not see training-seed
    noise (two runs of the same harness with different seeds differ by several points), so a session sets
    it from that noise (`benchmarks/null_candidates.py`); a smaller delta is "insufficient" whatever its CI.

    - fewer than `MIN_PAIRS` pairs, |delta| < `min_effect`, or a CI that contains 0 -> "insufficient";
    - CI entirely below 0 -> "regression";
    - CI entirely above 0 with a new critical alert or any hack alert the parent did not have -> "mixed";
    - CI entirely above 0 otherwise -> "improvement".

    A new critical `signal.dead_groups` that would not be critical without the groups the strict evaluator
    scores all right (`dead_unsolved_ratio`) does not count: prompts the policy now solves every time are
    progress, not a lost learning signal (the agentic tool-spam repair: 0.910 -> 0.980 with 0.569 dead groups,
    nearly all of them solved, was "mixed").
    """
    if comparison.n < MIN_PAIRS or math.isnan(comparison.ci_low) or math.isnan(comparison.ci_high):
        return "insufficient"
    if abs(comparison.delta) < min_effect:
        return "insufficient"
    if comparison.ci_high < 0:
        return "regression"
    if comparison.ci_low > 0:
        return _improvement_unless_alarmed(alerts_new, alerts_parent)
    return "insufficient"


def classify_restoration(
    comparison: PairedComparison,
    alerts_new: Sequence[Finding],
    alerts_parent: Sequence[Finding],
    min_effect: float = 0.0,
) -> OutcomeClass:
    """Classify a candidate whose only change moves trainer settings from outside their documented safe range
    back into it (`agent.decisions.knobs.range_restoration`): non-inferiority instead of superiority.

    The backend's documentation is prior evidence that the old value is a misconfiguration, so the candidate
    needs to show no harm, not a gain above the noise floor: a defect whose cost builds up late (cold-sampling
    seed 1: the reset to the documented temperature gained +0.073, tied on a fresh seed, then gained +0.040, while
    the cold run ended 0.063 below the fixed harness at 160 steps) cannot pass `min_effect` within one pilot.

    - fewer than `MIN_PAIRS` pairs or a NaN CI -> "insufficient";
    - CI entirely below 0 -> "regression";
    - delta > 0 and a CI that reaches no lower than -`min_effect`: "mixed" with a new critical or hack alert
      (as in `classify_outcome`), else "improvement";
    - otherwise -> "insufficient".
    """
    if comparison.n < MIN_PAIRS or math.isnan(comparison.ci_low) or math.isnan(comparison.ci_high):
        return "insufficient"
    if comparison.ci_high < 0:
        return "regression"
    if comparison.delta > 0 and comparison.ci_low > -min_effect:
        return _improvement_unless_alarmed(alerts_new, alerts_parent)
    return "insufficient"


def _improvement_unless_alarmed(alerts_new: Sequence[Finding], alerts_parent: Sequence[Finding]) -> OutcomeClass:
    """Return "mixed" when the candidate brings a new critical alert (bar dead groups it solved) or hack alert."""
    critical = [f for f in new_alerts(alerts_new, alerts_parent, Severity.CRITICAL) if not _dead_by_success(f)]
    hacks = [f for f in new_alerts(alerts_new, alerts_parent, Severity.WARNING) if f.alert_id in HACK_ALERT_IDS]
    return "mixed" if critical or hacks else "improvement"
