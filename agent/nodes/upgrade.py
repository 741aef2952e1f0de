"""upgrade_diagnostics: when the evidence cannot explain a stall, run the analyzers and see what separates.

Analyzers (scripts in the harness's diagnostics folder) run in the sandbox over the incumbent's rollouts;
the built-in analyzers (`diagnostics/analyzers.py`: text distance and answer diversity inside groups) run in
process. Each metric is stored with its retrospective validation and may gate a decision only once it
separates kept from rejected versions (paper §6.4); the report's explanatory metrics (filter, diversity,
update size, reward-vs-evaluator ranking) are validated the same way, so the ledger says which explain
the failures. When nothing separates, the gap goes to case memory with what was tried.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from agent.adapters import ledger
from agent.context import Context
from agent.launch.session_guard import trusted_session
from agent.nodes.common import cached_report, session_answer
from agent.state import State

KEPT, REJECTED = ("merged", "kept"), ("pruned", "reverted")


def upgrade_diagnostics(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Run the harness and built-in analyzers and merge their validated metrics into the report's metrics."""
    trusted_session(runtime.context, state)  # the caller's own session; its paths and revisions checked
    from agent.adapters.analyzers import run_builtin_analyzers, run_harness_analyzers
    from store.repository import add_case, add_diagnostic_metric

    ctx = runtime.context
    status = {c["id"]: c["status"] for c in state.get("candidates", [])}
    labelled = {
        p["run_dir"]: "kept" if status.get(p["candidate_id"]) in KEPT else "rejected"
        for p in state.get("pilots", [])
        if p["outcome"] == "ok" and status.get(p["candidate_id"]) in KEPT + REJECTED
    }
    run_dir, answer = Path(state["version"]["run_dir"]), session_answer(state)
    metrics, validations = run_harness_analyzers(Path(state["harness_dir"]), run_dir, labelled, ctx.sandbox)
    builtin, checks = run_builtin_analyzers(
        run_dir, labelled, answer, state["report"]["metrics"], lambda d: cached_report(d, None, answer).metrics
    )
    metrics, validations = {**builtin, **metrics}, {**checks, **validations}  # the harness's own win a clash
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
        if not any(v.get("separates") for v in validations.values()):
            add_case(
                db,
                session_id=state["session_id"],
                kind="pattern",
                domain="",
                summary="diagnostic gap: the last iteration failed and no alert explains it; no analyzer metric "
                f"separates kept from rejected versions ({len(labelled)} labelled run(s); tried: "
                f"{', '.join(sorted(validations)) or 'none'})",
                signature={k: v for k, v in state["report"]["metrics"].items()},
            )
    report = dict(state["report"])
    report["metrics"] = {**report["metrics"], **metrics}
    return {"report": report, "gap": False}
