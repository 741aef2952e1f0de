"""upgrade_diagnostics: when the evidence cannot explain a stall, run the harness's own analyzers.

Analyzers (scripts in the harness's diagnostics folder) run in the sandbox over the incumbent's
rollouts; each new metric is stored with its retrospective validation and may gate a decision only
once it separates kept from rejected versions (paper §6.4).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from agent import ledger
from agent.context import Context
from agent.state import State

KEPT, REJECTED = ("merged", "kept"), ("pruned", "reverted")


def upgrade_diagnostics(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Run the harness analyzers and merge their validated metrics into the report's metrics."""
    from agent.analyzers import run_harness_analyzers
    from store.repository import add_case, add_diagnostic_metric

    ctx = runtime.context
    status = {c["id"]: c["status"] for c in state.get("candidates", [])}
    labelled = {
        p["run_dir"]: "kept" if status.get(p["candidate_id"]) in KEPT else "rejected"
        for p in state.get("pilots", [])
        if p["outcome"] == "ok" and status.get(p["candidate_id"]) in KEPT + REJECTED
    }
    run_dir = Path(state["version"]["run_dir"])
    metrics, validations = run_harness_analyzers(Path(state["harness_dir"]), run_dir, labelled, ctx.sandbox)
    with ledger.db(ledger.store_url(ctx)) as db:
        for name, validation in validations.items():
            add_diagnostic_metric(
                db,
                session_id=state["session_id"],
                name=name,
                source_path=validation["source"],
                validation=validation,
                validated=bool(validation.get("separates")),
            )
        if not validations:
            add_case(
                db,
                session_id=state["session_id"],
                kind="pattern",
                domain="",
                summary="diagnostic gap: the last iteration failed and no alert explains it; the harness has "
                "no analyzer to run",
                signature={k: v for k, v in state["report"]["metrics"].items()},
            )
    report = dict(state["report"])
    report["metrics"] = {**report["metrics"], **metrics}
    return {"report": report, "gap": False}
