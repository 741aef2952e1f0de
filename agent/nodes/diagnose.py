"""diagnose: write the incumbent's health report (four layers), flag a diagnostic gap, and say whether the
incumbent's own run damaged its policy, so candidates restart from before it (agent/rollback.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from agent import ledger
from agent.context import Context
from agent.nodes.common import REPORT_FILE, cached_report, run_table, session_answer, session_roles
from agent.rollback import rollback_point
from agent.state import State
from diagnostics.findings import HealthReport, Severity


def diagnose(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Build (or re-read) the incumbent run's health report, store it, and flag a diagnostic gap."""
    version = state["version"]
    run_dir = Path(version["run_dir"])
    parent = HealthReport.from_json(state["report"]) if state.get("report") else None
    answer = session_answer(state)
    report = cached_report(run_dir, parent, answer, session_roles(state))
    with ledger.db(ledger.store_url(runtime.context)) as db:
        ledger.ensure_health_report(
            db,
            session_id=state["session_id"],
            run_id=version["run_id"],
            path=str(run_dir / REPORT_FILE),
            findings=[_finding_row(f) for f in report.findings if f.fired],
        )
    gap = is_diagnostic_gap(report, state.get("failures_in_row", 0))
    ctx = runtime.context  # score-only decides on training reward alone, so it never reads held-out drops
    rollback = (
        rollback_point(version, ctx.min_effect, run_table(run_dir, answer).val) if ctx.mode == "evotrainer" else {}
    )
    return {"report": report.to_json(), "gap": gap, "rollback": rollback}


def is_diagnostic_gap(report: HealthReport, failures_in_row: int) -> bool:
    """The evidence cannot explain the version: the last iteration failed yet no alert fires (paper §2.1)."""
    return failures_in_row > 0 and not report.alerts(Severity.WARNING)


def _finding_row(finding: Any) -> dict[str, Any]:
    row = finding.to_json()
    evidence = {"rollouts": row["evidence_rollout_ids"], "numbers": row["numbers"], "rule": row["rule"]}
    keys = ("alert_id", "layer", "severity", "message", "value", "threshold")
    return {**{k: row[k] for k in keys}, "evidence": evidence}
