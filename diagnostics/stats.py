"""Paired statistics for version decisions (paper App. F / reference §13).

Per-prompt paired differences, a paired bootstrap (B = 10,000, seed 42, resampled at prompt level,
optionally stratified) for the 95% CI of the mean difference, and a two-sided Wilcoxon signed-rank test on
the same pairs. What a comparison means for a candidate (the four outcome classes, the hack-alert rule) is
the decision policy's: `agent/decisions/evidence.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import cast

import numpy as np
from scipy import stats as sps
from typing_extensions import TypedDict  # the LangGraph server builds state schemas only from these

CI_LEVEL = 0.95
_BOOT_CHUNK_ELEMENTS = 4_000_000  # bound the bootstrap's index matrix to ~32 MB per chunk


class ComparisonJSON(TypedDict):
    """`PairedComparison.to_json()`: the comparison as plain JSON (the graph state's `EvaluationInfo` holds one)."""

    mean_a: float
    mean_b: float
    delta: float
    ci_low: float
    ci_high: float
    p_wilcoxon: float
    n: int


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

    def to_json(self) -> ComparisonJSON:
        """Return a JSON-ready dict."""
        return cast(ComparisonJSON, asdict(self))


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
