"""Assemble a run's health report from its artefact folder (the one place diagnostics read a run).

`build_report(run_dir, answer=...)` reads `metrics.jsonl` through the tolerant schema reader and the rollout
files once, column-wise, into a run table (`diagnostics/table.py`; a corrupt or half-written line becomes a
`ReadProblem` with file and line, the rest is still reported), runs the four layers over the table and
returns a `HealthReport`. `report_from_table` does the same for a table the caller already holds (the
session shares one table per run between its steps).

Which rollouts feed which layer: the signal and behaviour layers use the training rollouts (validation
rollouts when a run has none); the score layer uses both (strict scores come from validation first); the
per-source table (`diagnostics/sources.py`) uses the training rollouts only, since it judges the training
data selection. The agentic layer (`diagnostics/agentic.py`) reads the same rows as the behaviour layer and
adds nothing to a run without agentic episodes. The format and answer rules read the harness's declared
answer protocol; without one they are not evaluated and the report's `notes` say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from diagnostics.agentic import diagnose_agentic
from diagnostics.agentic_docs import AGENTIC_METRIC_DOCS
from diagnostics.behaviour import NO_ANSWER_PROTOCOL, diagnose_behaviour
from diagnostics.findings import HealthReport, LayerOutput
from diagnostics.schema import MetricRow, ReadProblem, read_metrics
from diagnostics.score import diagnose_score
from diagnostics.signal import diagnose_signal
from diagnostics.sources import diagnose_sources
from diagnostics.table import RunTable, read_run_table
from diagnostics.tool_roles import DEFAULT_ROLES, ToolRoles
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
    "format_failure_rate": "share of single-turn responses without an answer the declared protocol reads "
    "(NaN, with a note, when the harness declares no answer protocol)",
    "vs_parent/<metric>": "current - parent for the compared metrics",
    # Agentic episodes only (diagnostics/agentic.py): absent from single-turn reports.
    **AGENTIC_METRIC_DOCS,
}


def build_report(
    run_dir: Path,
    parent: HealthReport | None = None,
    siblings: Sequence[HealthReport] = (),
    answer: AnswerProtocol | None = None,
    roles: ToolRoles = DEFAULT_ROLES,
) -> HealthReport:
    """Read a run folder and return its health report; never raises on bad lines (they become problems).

    `answer` is the harness's declared answer protocol (`harness.manifest.answer`): the format and answer
    rules read it, and are not evaluated without it. `roles` classifies an agentic harness's tools
    (`ToolRoles.from_env(manifest.env)`; by tool name when not given).
    """
    return report_from_table(run_dir, read_run_table(run_dir, answer), parent, siblings, roles)


def report_from_table(
    run_dir: Path,
    table: RunTable,
    parent: HealthReport | None = None,
    siblings: Sequence[HealthReport] = (),
    roles: ToolRoles = DEFAULT_ROLES,
) -> HealthReport:
    """The health report of a run whose rollouts were already read into `table` (metrics are read here)."""
    problems: list[ReadProblem] = []
    metric_rows: list[MetricRow] = read_metrics(run_dir / METRICS_FILE, problems)
    problems.extend(table.problems)
    train, val = table.train, table.val
    if not table.height:
        problems.append(ReadProblem(str(run_dir / "rollouts"), 0, "no readable rollout records"))
    signal_input = train if train.height else val
    parts = [
        diagnose_score(metric_rows, train, val),
        diagnose_signal(signal_input, metric_rows),
        diagnose_behaviour(signal_input, table.answer is not None),
        diagnose_agentic(signal_input, roles),
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
    run_id = table.run_id or run_dir.name
    notes = () if table.answer is not None else (f"format_failure_rate, multi_answer_rate: {NO_ANSWER_PROTOCOL}",)
    return HealthReport(
        run_id=run_id,
        run_dir=str(run_dir),
        findings=tuple(findings),
        metrics=metrics,
        problems=tuple(problems),
        notes=notes,
    )
