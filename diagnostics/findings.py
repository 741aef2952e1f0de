"""Typed results of the health report: `Finding` (one checked rule) and `HealthReport` (a run's findings).

This module owns the records, their JSON form and the text renderer. It computes nothing and reads no
files; the layer modules (`score`, `signal`, `behaviour`, `version`) produce findings and `report`
assembles them.

Every rule that was evaluated yields one `Finding`, `Severity.OK` when it did not fire, so a report shows
what was checked as well as what is wrong. `HealthReport.alerts()` returns only the ones that fired.

Applicability: a rule declares when it cannot mean anything for the run it reads, e.g. tool
diversity on a harness with one tool, or length gaming where length only follows tool use. `graded(...,
inconclusive=why)` then returns an inconclusive finding: it never fires, its value is NaN (the value it
would have graded stays in `numbers`), its message and `inconclusive` say why, and the report reads the
metric it grades as unknown (`diagnostics.report`), with a note giving the reason, so no skill trigger
acts on a number that means nothing here.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from diagnostics.agentic_docs import AGENTIC_HACK_ALERT_IDS
from diagnostics.schema import ReadProblem

# The alerts that say the reward is gamed: the decision policy (`agent/decisions/evidence.py`) never calls a
# gain with a new one of these, even below critical severity, an improvement. The agentic ones
# (`diagnostics/agentic_docs.py`) include one-turn collapse: the brevity guard at decision time.
HACK_ALERT_IDS = (
    frozenset({"score.reward_hacking", "version.reward_hacking", "score.rewarded_wrong"}) | AGENTIC_HACK_ALERT_IDS
)


class Severity(enum.StrEnum):
    """How bad a finding is; ordered ok < warning < critical."""

    OK = "ok"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        """Return 0, 1, 2 for ok, warning, critical."""
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {Severity.OK: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}


class Layer(enum.StrEnum):
    """The diagnostics layer a finding belongs to (paper §1)."""

    SCORE = "score"
    SIGNAL = "signal"
    BEHAVIOUR = "behaviour"
    VERSION = "version"


def rollout_ref(run_id: str, step: int, prompt_id: str, sample_index: int) -> str:
    """Return the evidence id of one rollout: `run_id/step/prompt_id/sample_index`."""
    return f"{run_id}/{step}/{prompt_id}/{sample_index}"


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


@dataclass(frozen=True, slots=True)
class Finding:
    """One evaluated rule: its value against its threshold, with evidence.

    `value` and `threshold` are the numbers the rule compared (NaN when the rule had no data);
    `rule` states the comparison in words (e.g. "dead_group_ratio > 0.5"); `numbers` holds further
    evidence; `evidence_rollout_ids` names a few example rollouts (`run_id/step/prompt_id/sample_index`);
    `inconclusive` says why the rule cannot apply to this run ("" when it applies; see the module docstring).
    """

    alert_id: str
    layer: Layer
    severity: Severity
    message: str
    value: float
    threshold: float
    rule: str
    evidence_rollout_ids: tuple[str, ...] = ()
    numbers: Mapping[str, float] = field(default_factory=dict)
    inconclusive: str = ""

    @property
    def fired(self) -> bool:
        """Return True when the rule fired (warning or critical)."""
        return self.severity is not Severity.OK

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict (NaN and infinities become null; `inconclusive` only when set)."""
        out = {
            "alert_id": self.alert_id,
            "layer": self.layer.value,
            "severity": self.severity.value,
            "message": self.message,
            "value": _finite_or_none(self.value),
            "threshold": _finite_or_none(self.threshold),
            "rule": self.rule,
            "evidence_rollout_ids": list(self.evidence_rollout_ids),
            "numbers": {k: _finite_or_none(v) for k, v in self.numbers.items()},
        }
        if self.inconclusive:
            out["inconclusive"] = self.inconclusive
        return out

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> Finding:
        """Rebuild a finding from `to_json` output; raises `KeyError`/`ValueError` on a malformed row."""
        return cls(
            alert_id=str(row["alert_id"]),
            layer=Layer(row["layer"]),
            severity=Severity(row["severity"]),
            message=str(row["message"]),
            value=_float_or_nan(row["value"]),
            threshold=_float_or_nan(row["threshold"]),
            rule=str(row["rule"]),
            evidence_rollout_ids=tuple(str(x) for x in row["evidence_rollout_ids"]),
            numbers={str(k): _float_or_nan(v) for k, v in row["numbers"].items()},
            inconclusive=str(row.get("inconclusive", "")),  # reports written before applicability have none
        )


def _float_or_nan(value: Any) -> float:
    return math.nan if value is None else float(value)


@dataclass(frozen=True, slots=True)
class HealthReport:
    """A run's health report: findings per layer, the flat metrics dict and the read problems.

    `metrics` is what skill triggers and the controller read (e.g. `dead_group_ratio`, `truncation_rate`,
    `strict_acc`, `train_reward_delta`, `strict_acc_delta`, `reward_hacking`); see `report.METRIC_DOCS`.
    `notes` lists what was not evaluated and why (e.g. the answer rules without a declared protocol).
    """

    run_id: str
    run_dir: str
    findings: tuple[Finding, ...]
    metrics: Mapping[str, float]
    problems: tuple[ReadProblem, ...] = ()
    notes: tuple[str, ...] = ()

    def alerts(self, min_severity: Severity = Severity.WARNING) -> list[Finding]:
        """Return the findings at or above `min_severity`, most severe first."""
        hits = [f for f in self.findings if f.severity.rank >= min_severity.rank and f.fired]
        return sorted(hits, key=lambda f: -f.severity.rank)

    def finding(self, alert_id: str) -> Finding | None:
        """Return the finding with this id, or None when that rule was not evaluated."""
        for f in self.findings:
            if f.alert_id == alert_id:
                return f
        return None

    def why_not_evaluated(self, metric: str) -> str | None:
        """Return the note saying why `metric` has no value (the rule that reads it was not evaluated), or None.

        A note names what it covers before its first `": "`: a rule (`alert_id`) named after `metric`
        (`score.reward_hacking`) or whose comparison reads it with a NaN value, or the metric itself. None when
        `metric` has a value or no note explains it.
        """
        value = self.metrics.get(metric, math.nan)
        if not math.isnan(value):
            return None
        names = {metric} | {
            f.alert_id
            for f in self.findings
            if f.alert_id.split(".", 1)[-1] == metric or (math.isnan(f.value) and rule_metric(f.rule) == metric)
        }
        for note in self.notes:
            if names & set(note.split(": ", 1)[0].split(", ")):
                return note
        return None

    @property
    def worst(self) -> Severity:
        """Return the highest severity among the findings."""
        return max((f.severity for f in self.findings), key=lambda s: s.rank, default=Severity.OK)

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "run_id": self.run_id,
            "run_dir": self.run_dir,
            "worst": self.worst.value,
            "metrics": {k: _finite_or_none(v) for k, v in sorted(self.metrics.items())},
            "findings": [f.to_json() for f in self.findings],
            "problems": [{"path": p.path, "line": p.line, "message": p.message} for p in self.problems],
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> HealthReport:
        """Rebuild a report from `to_json` output."""
        return cls(
            run_id=str(row["run_id"]),
            run_dir=str(row["run_dir"]),
            findings=tuple(Finding.from_json(f) for f in row["findings"]),
            metrics={str(k): _float_or_nan(v) for k, v in row["metrics"].items()},
            problems=tuple(ReadProblem(str(p["path"]), int(p["line"]), str(p["message"])) for p in row["problems"]),
            notes=tuple(str(n) for n in row.get("notes", ())),  # reports written before notes existed have none
        )


_MARK = {Severity.OK: "ok  ", Severity.WARNING: "WARN", Severity.CRITICAL: "CRIT"}
# Per-source metrics (`source_<column>/<data_source>`, diagnostics/sources.py) render as one line per source,
# so a report with many sources stays short enough for the LLM's read_health_report tool.
_PER_SOURCE_KEY = re.compile(r"^source_(?P<column>[a-z_]+)/(?P<source>.+)$")
MAX_SOURCES_SHOWN = 12


def rule_metric(rule: str) -> str:
    """The metric a finding's rule compares (`"dead_group_ratio > 0.5"` -> `"dead_group_ratio"`)."""
    return re.split(r" (?:<=|>=|<|>|==) ", rule, maxsplit=1)[0]


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    return f"{value:.4g}"


def render_text(report: HealthReport, show_ok: bool = False, max_problems: int = 20) -> str:
    """Render a report as plain text: alerts per layer, then key metrics, then read problems."""
    lines = [f"Health report {report.run_id}  ({report.run_dir})  worst: {report.worst.value}"]
    for layer in Layer:
        shown = [f for f in report.findings if f.layer is layer and (show_ok or f.fired)]
        if not shown:
            continue
        lines.append(f"[{layer.value}]")
        for f in sorted(shown, key=lambda x: -x.severity.rank):
            lines.append(f"  {_MARK[f.severity]} {f.alert_id}: {f.message}  ({f.rule}; value {_fmt(f.value)})")
            if f.fired and f.evidence_rollout_ids:
                lines.append(f"       e.g. {', '.join(f.evidence_rollout_ids[:3])}")
    lines.append("[metrics]")
    per_source: dict[str, dict[str, float]] = {}
    for key in sorted(report.metrics):
        match = _PER_SOURCE_KEY.match(key)
        if match:
            per_source.setdefault(match["source"], {})[match["column"]] = report.metrics[key]
        else:
            lines.append(f"  {key} = {_fmt(report.metrics[key])}")
    if per_source:
        lines.append("[training data sources]")
        for source in sorted(per_source)[:MAX_SOURCES_SHOWN]:
            cells = " ".join(f"{c}={'n/a' if math.isnan(v) else f'{v:.3g}'}" for c, v in per_source[source].items())
            lines.append(f"  {source}: {cells}")
        if len(per_source) > MAX_SOURCES_SHOWN:
            lines.append(f"  ... and {len(per_source) - MAX_SOURCES_SHOWN} more (see the JSON report)")
    if report.notes:
        lines.append("[not evaluated]")
        lines.extend(f"  {note}" for note in report.notes)
    if report.problems:
        lines.append(f"[read problems: {len(report.problems)}]")
        lines.extend(f"  {p}" for p in report.problems[:max_problems])
    return "\n".join(lines)


def new_alerts(current: Sequence[Finding], parent: Sequence[Finding], min_severity: Severity) -> list[Finding]:
    """Return the findings of `current` at or above `min_severity` that `parent` did not have at that level."""
    before = {f.alert_id for f in parent if f.fired and f.severity.rank >= min_severity.rank}
    return [f for f in current if f.fired and f.severity.rank >= min_severity.rank and f.alert_id not in before]


def graded(
    alert_id: str,
    layer: Layer,
    value: float,
    *,
    metric: str,
    warning: float | None,
    critical: float | None = None,
    above: bool = True,
    what: str,
    evidence: Sequence[str] = (),
    numbers: Mapping[str, float] | None = None,
    inconclusive: str = "",
) -> Finding:
    """Grade `value` against warning/critical thresholds and return the finding.

    With `above=True` the rule fires when `value > threshold`, otherwise when `value < threshold`.
    A NaN value (no data for the rule) yields an OK finding saying so. `what` describes the problem the
    rule detects (e.g. "dead groups: zero GRPO advantage"). `inconclusive` (why the rule cannot mean
    anything for this run) makes the finding inconclusive whatever the value: OK, value NaN, the value
    kept in `numbers` under `metric` (module docstring).
    """
    op = ">" if above else "<"
    if inconclusive:
        kept = {**(numbers or {}), metric: value}
        limit = warning if warning is not None else (critical if critical is not None else math.nan)
        return Finding(
            alert_id=alert_id,
            layer=layer,
            severity=Severity.OK,
            message=f"{what}: inconclusive: {inconclusive}",
            value=math.nan,
            threshold=limit,
            rule=f"{metric} {op} {_fmt(limit)}",
            numbers=kept,
            inconclusive=inconclusive,
        )

    def hits(limit: float | None) -> bool:
        if limit is None or math.isnan(value):
            return False
        return value > limit if above else value < limit

    if hits(critical):
        assert critical is not None
        severity, limit = Severity.CRITICAL, critical
    elif hits(warning):
        assert warning is not None
        severity, limit = Severity.WARNING, warning
    else:
        severity = Severity.OK
        limit = warning if warning is not None else (critical if critical is not None else math.nan)
    if math.isnan(value):
        message = f"{what}: no data"
    elif severity is Severity.OK:
        message = f"{what}: not detected ({metric} = {_fmt(value)})"
    else:
        message = f"{what} ({metric} = {_fmt(value)} {op} {_fmt(limit)})"
    return Finding(
        alert_id=alert_id,
        layer=layer,
        severity=severity,
        message=message,
        value=value,
        threshold=limit,
        rule=f"{metric} {op} {_fmt(limit)}",
        evidence_rollout_ids=tuple(evidence) if severity is not Severity.OK else (),
        numbers=dict(numbers or {}),
    )


@dataclass(frozen=True, slots=True)
class LayerOutput:
    """What one layer's diagnosis returns: its findings, the flat metrics it computed, and its notes.

    `notes` say which rules could not be evaluated and why (`"<alert_id>: not evaluated: <reason>"`); the report
    adds a generic one for any other finding whose value is NaN, so no rule goes dark silently.
    """

    findings: tuple[Finding, ...]
    metrics: Mapping[str, float]
    notes: tuple[str, ...] = ()

    @staticmethod
    def merge(parts: Sequence[LayerOutput]) -> LayerOutput:
        """Concatenate findings and notes, and merge metrics (later parts win on a key clash)."""
        metrics: dict[str, float] = {}
        for part in parts:
            metrics.update(part.metrics)
        findings = tuple(f for part in parts for f in part.findings)
        return LayerOutput(findings, metrics, tuple(n for part in parts for n in part.notes))
