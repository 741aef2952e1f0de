"""Evolvable diagnostics: the contract for harness analyzers and retrospective validation of new metrics.

An analyzer is a Python script in the harness's diagnostics folder (manifest `diagnostics:`). It runs in the
sandbox (`sandboxes.worker.run_script`), reads the rollout JSONL files mounted read-only under
`$EVOTRAINER_INPUTS_DIR` (`/inputs` in Docker: ``train.jsonl``, and ``val_scores.jsonl`` holding the held-out
rollouts' scores only, never their text or answers), and writes `{"metrics": {name: number}}` to
`$EVOTRAINER_RESULTS_DIR/out.json` (`/results/out.json`). Only that file is read; anything the script prints
is ignored (a forged metric line cannot leak in).

A new metric may gate a decision only after `validate_metric_retrospectively` shows it separates the versions
that were kept from those that were rejected (paper §6.4).

Built-in analyzers are the offline counterpart when the harness has none: diagnostics too costly
for every health report because they compare response texts, run by the upgrade step over the latest
`MAX_GROUPS` training groups of a run and validated the same way:

- `group_text_distance`: mean over groups of the mean pairwise Jaccard distance between the responses'
  sets of character `SHINGLE`-grams (0 = the group wrote one text, 1 = no shared shingle): how differently a
  group explores, beyond the report's exact-duplicate count (`identical_group_ratio`);
- `distinct_answer_ratio`: mean over groups of distinct answers (as the declared answer protocol extracts
  them; no answer counts as one value) over samples: whether a group tries different answers at all (only
  with a declared protocol).

The upgrade step also replays the retrospective check on the report's explanatory metrics
(`EXPLANATORY_METRICS`) so the ledger says which of them separate kept from rejected versions.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from diagnostics.schema import Rollout
from harness.answers import AnswerProtocol

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


SHINGLE = 3  # characters per shingle of the text distance
MAX_GROUPS = 200  # latest training groups a built-in analyzer reads per run
BUILTIN_METRICS = ("group_text_distance", "distinct_answer_ratio")
# Report metrics (diagnostics/report.METRIC_DOCS) that explain a stall; validated on past versions by the
# upgrade step.
EXPLANATORY_METRICS = (
    "misranked_group_rate", "reward_rank_agreement", "rewarded_wrong_rate", "unrewarded_correct_rate",
    "kept_group_ratio", "kept_live_ratio", "filter_spread_gap", "reward_spread_after_filter",
    "dead_group_ratio_after_filter", "distinct_response_ratio", "identical_group_ratio", "dead_identical_share",
    "update_norm_mean", "ref_distance", "kl_to_ref", "mean_logprob", "truncation_rate",
)  # fmt: skip


def shingles(text: str) -> frozenset[str]:
    """The text's character `SHINGLE`-grams (the whole text when it is shorter)."""
    if len(text) <= SHINGLE:
        return frozenset({text})
    return frozenset(text[i : i + SHINGLE] for i in range(len(text) - SHINGLE + 1))


def jaccard_distance(a: frozenset[str], b: frozenset[str]) -> float:
    """1 - |a & b| / |a | b| (0 for two empty sets)."""
    union = len(a | b)
    return 1.0 - len(a & b) / union if union else 0.0


def builtin_metrics(rollouts: Sequence[Rollout], answer: AnswerProtocol | None) -> dict[str, float]:
    """The built-in analyzers' metrics over the latest `MAX_GROUPS` training groups (see the module docstring).

    Metrics without data (no group of two or more samples; no answer protocol) are left out.
    """
    groups: dict[tuple[int, str], list[Rollout]] = {}
    for r in rollouts:
        if r.split == "train":
            groups.setdefault((r.step, r.group_id), []).append(r)
    latest = [g for _, g in sorted(groups.items(), key=lambda kv: kv[0][0], reverse=True) if len(g) >= 2]
    latest = latest[:MAX_GROUPS]
    if not latest:
        return {}
    distances = []
    for members in latest:
        sets = [shingles(r.response) for r in members]
        pairs = list(itertools.combinations(sets, 2))
        distances.append(sum(jaccard_distance(a, b) for a, b in pairs) / len(pairs))
    out = {"group_text_distance": sum(distances) / len(distances)}
    if answer is not None:
        ratios = [len({answer.extract(r.response) for r in members}) / len(members) for members in latest]
        out["distinct_answer_ratio"] = sum(ratios) / len(ratios)
    return out
