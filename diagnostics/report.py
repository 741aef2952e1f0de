"""Assemble a run's health report from its artefact folder (the one place diagnostics read a run).

`build_report(run_dir)` reads `metrics.jsonl` and `rollouts/{train,val}/step_<N>.jsonl` through the
tolerant schema readers (a corrupt or half-written line becomes a `ReadProblem` with file and line; the
rest is still reported), runs the four layers and returns a `HealthReport`.

Which rollouts feed which layer: the signal and behaviour layers use the training rollouts (validation
rollouts when a run has none); the score layer uses both (strict scores come from validation first); the
per-source table (`diagnostics/sources.py`) uses the training rollouts only, since it judges the training
data selection.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from diagnostics.behaviour import diagnose_behaviour
from diagnostics.findings import HealthReport, LayerOutput
from diagnostics.schema import ReadProblem, read_metrics, read_run_rollouts
from diagnostics.score import diagnose_score
from diagnostics.signal import diagnose_signal
from diagnostics.sources import diagnose_sources
from diagnostics.updates import diagnose_updates
from diagnostics.version import compare_siblings, diagnose_version
from harness.answers import AnswerProtocol

METRICS_FILE = "metrics.jsonl"  # same name as trainer_backend.base.METRICS_FILE (artefact layout)

# What the headline metrics mean; the controller and skill triggers read these keys.
METRIC_DOCS = {
    "strict_acc": "mean strict score at the last step that has one (validation first)",
    "strict_acc_delta": "strict score: last-window mean - first-window mean within this run",
    "train_reward_mean": "training reward at the last step (critic/score/mean, else rollouts)",
    "train_reward_delta": "training reward: last-window mean - first-window mean within this run",
    "reward_hacking": "1 when reward rose while the strict score stayed flat/down (within run or vs parent)",
    "rewarded_wrong_rate": "share of strict-wrong rollouts rewarded like correct ones",
    "dead_group_ratio": "share of GRPO groups whose reward std < 1e-6",
    "dead_source_share": "share of training groups from dead data sources (>= 50% of their groups dead)",
    "source_dead_ratio/<data_source>": "dead-group ratio of one training data source (also source_groups/, "
    "source_reward_mean/, source_strict_acc/, source_truncation_rate/)",
    "reward_spread": "mean within-group reward std",
    "truncation_rate": "share of responses cut at the length cap",
    "length_reward_corr": "Pearson corr(response length, reward)",
    "degenerate_rate": "share of repetitive/degenerate responses",
    "format_failure_rate": "share of single-turn responses without a tagged answer",
    "vs_parent/<metric>": "current - parent for the compared metrics",
}


def build_report(
    run_dir: Path,
    parent: HealthReport | None = None,
    siblings: Sequence[HealthReport] = (),
    answer: AnswerProtocol | None = None,
) -> HealthReport:
    """Read a run folder and return its health report; never raises on bad lines (they become problems).

    `answer` is the harness's declared answer protocol. TODO(columnar): the format and answer metrics read
    it instead of the behaviour layer's built-in tag regexes; until then it is accepted and not used.
    """
    problems: list[ReadProblem] = []
    metric_rows = read_metrics(run_dir / METRICS_FILE, problems)
    read = read_run_rollouts(run_dir)
    problems.extend(read.problems)
    train = [r for r in read.rollouts if r.split == "train"]
    val = [r for r in read.rollouts if r.split == "val"]
    if not read.rollouts:
        problems.append(ReadProblem(str(run_dir / "rollouts"), 0, "no readable rollout records"))
    signal_input = train if train else val
    parts = [
        diagnose_score(metric_rows, train, val),
        diagnose_signal(signal_input, metric_rows),
        diagnose_behaviour(signal_input),
        diagnose_sources(train),
        diagnose_updates(metric_rows),
    ]
    base = LayerOutput.merge(parts)
    metrics = dict(base.metrics)
    findings = list(base.findings)
    if parent is not None:
        version = diagnose_version(metrics, findings, parent)
        findings.extend(version.findings)
        metrics.update(version.metrics)
        metrics["reward_hacking"] = max(metrics["reward_hacking"], version.metrics["version_reward_hacking"])
    if siblings:
        metrics.update(compare_siblings(metrics, siblings).metrics)
    run_id = read.rollouts[0].run_id if read.rollouts else run_dir.name
    return HealthReport(
        run_id=run_id,
        run_dir=str(run_dir),
        findings=tuple(findings),
        metrics=metrics,
        problems=tuple(problems),
    )
