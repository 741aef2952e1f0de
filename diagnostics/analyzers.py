"""Evolvable diagnostics: the contract for harness analyzers and retrospective validation of new metrics.

An analyzer is a Python script in the harness's diagnostics folder (manifest `diagnostics:`). It runs in the
sandbox (`sandboxes.worker.run_script`), reads the rollout JSONL files mounted read-only under
`$EVOTRAINER_INPUTS_DIR` (`/inputs` in Docker), and writes `{"metrics": {name: number}}` to
`$EVOTRAINER_RESULTS_DIR/out.json` (`/results/out.json`). Only that file is read; anything the script prints
is ignored (a forged metric line cannot leak in).

A new metric may gate a decision only after `validate_metric_retrospectively` shows it separates the versions
that were kept from those that were rejected (paper §6.4).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

INPUTS_DIR = "/inputs"
RESULTS_FILE = "/results/out.json"
METRIC_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_./-]{0,63}$")
MAX_METRICS = 64


class AnalyzerOutputError(ValueError):
    """An analyzer's out.json does not follow the contract; the message says what is wrong."""


def parse_analyzer_output(raw: object) -> dict[str, float]:
    """Validate an analyzer's parsed out.json and return its metrics.

    Raises:
        AnalyzerOutputError: not `{"metrics": {name: finite number}}`, a bad name, or too many metrics.
    """
    if not isinstance(raw, Mapping) or not isinstance(raw.get("metrics"), Mapping):
        raise AnalyzerOutputError('out.json must be {"metrics": {name: number}}')
    metrics: Mapping[Any, Any] = raw["metrics"]
    if len(metrics) > MAX_METRICS:
        raise AnalyzerOutputError(f"{len(metrics)} metrics; at most {MAX_METRICS}")
    out: dict[str, float] = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not METRIC_NAME_RE.match(name):
            raise AnalyzerOutputError(f"metric name {name!r} must match {METRIC_NAME_RE.pattern}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise AnalyzerOutputError(f"metric {name!r} = {value!r} is not a finite number")
        out[name] = float(value)
    return out


@dataclass(frozen=True, slots=True)
class MetricValidation:
    """Whether a metric separates kept from rejected versions, in which direction and by how much.

    `margin` is the gap between the closest kept and rejected values in the separating direction (positive
    when they separate; the most negative overlap otherwise).
    """

    separates: bool
    margin: float
    n_kept: int
    n_rejected: int
    direction: Literal["higher_is_better", "lower_is_better", "none"]


def validate_metric_retrospectively(
    values_by_version: Mapping[str, float], kept: set[str], rejected: set[str]
) -> MetricValidation:
    """Check that a metric's values on past versions separate kept versions from rejected ones.

    Versions without a value are ignored. It separates when every kept value lies strictly above every
    rejected value (higher is better) or strictly below (lower is better); at least one of each is needed.

    Raises:
        ValueError: a version is both kept and rejected.
    """
    both = kept & rejected
    if both:
        raise ValueError(f"versions both kept and rejected: {sorted(both)}")
    k = [values_by_version[v] for v in kept if v in values_by_version and math.isfinite(values_by_version[v])]
    r = [values_by_version[v] for v in rejected if v in values_by_version and math.isfinite(values_by_version[v])]
    if not k or not r:
        return MetricValidation(False, math.nan, len(k), len(r), "none")
    up = min(k) - max(r)
    down = min(r) - max(k)
    if up > 0:
        return MetricValidation(True, up, len(k), len(r), "higher_is_better")
    if down > 0:
        return MetricValidation(True, down, len(k), len(r), "lower_is_better")
    return MetricValidation(False, max(up, down), len(k), len(r), "none")
