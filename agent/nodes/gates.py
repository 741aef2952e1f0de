"""launch_gate / promote_gate: human approval via `interrupt()`; side effects only after the answer.

A node re-runs from its first line when resumed (langgraph.md §6), so the pending gate row is written
idempotently (one per session, gate and iteration) and nothing else happens before `interrupt()`.
The answer is `{"approve": bool, "note": str}`; `evotrainer approve` writes it to the store and resumes.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import interrupt

from agent import ledger
from agent.context import Context
from agent.nodes.common import store_url
from agent.routing import current, passing_candidates
from agent.state import State

GATES_FOR = {"launch": ("launch", "all"), "promote": ("promote", "all")}


def launch_gate(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Ask a human before pilots are trained: diff, backtest verdict, predicted cost per candidate."""
    candidates = passing_candidates(state)
    if runtime.context.gate not in GATES_FOR["launch"] or not candidates:
        return {}
    verdicts = {b["candidate_id"]: b for b in current(state.get("backtests"), state["iteration"])}
    pack = {
        "gate": "launch",
        "iteration": state["iteration"],
        "candidates": [
            {
                "id": c["id"],
                "branch": c["branch"],
                "factor": c["factor"],
                "hypothesis": c["hypothesis"],
                "backtest": verdicts.get(c["id"], {}).get("verdict", "none"),
                "backtest_reasons": verdicts.get(c["id"], {}).get("reasons", [])[:5],
                "predicted_steps": runtime.context.pilot_steps,
            }
            for c in candidates
        ],
        "control_steps": runtime.context.pilot_steps,
    }
    answer = _ask(runtime.context, state, "launch", pack)
    approved = [c["id"] for c in candidates] if answer.get("approve") else []
    return {
        "gate_answer": {
            "gate": "launch",
            "iteration": state["iteration"],
            "approved": approved,
            "note": answer.get("note", ""),
        }
    }


def promote_gate(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Ask a human before the best candidate is merged into the session main line."""
    merge = [d for d in state.get("decisions", []) if d["decision"] == "merge"]
    if runtime.context.gate not in GATES_FOR["promote"] or not merge:
        return {}
    pack = {"gate": "promote", "iteration": state["iteration"], "decision": merge[0]}
    answer = _ask(runtime.context, state, "promote", pack)
    return {
        "gate_answer": {
            "gate": "promote",
            "iteration": state["iteration"],
            "approved": bool(answer.get("approve")),
            "note": answer.get("note", ""),
        }
    }


def _ask(ctx: Context, state: State, gate: str, pack: dict[str, Any]) -> dict[str, Any]:
    from sqlalchemy import select

    from store import models
    from store.repository import add_gate_request, answer_gate

    with ledger.db(store_url(ctx)) as db:
        rows = db.scalars(
            select(models.GateRequest).where(
                models.GateRequest.session_id == state["session_id"], models.GateRequest.gate == gate
            )
        ).all()
        row = next((r for r in rows if r.payload.get("iteration") == state["iteration"]), None)
        if row is None:
            row = add_gate_request(db, session_id=state["session_id"], gate=gate, payload=pack)  # type: ignore[arg-type]
        gate_id, status, note = row.id, row.status, row.note
    if status != "pending":  # answered already (e.g. `evotrainer approve` before the resume)
        return {"approve": status == "approved", "note": note or ""}
    answer = interrupt({**pack, "gate_id": gate_id})
    if not isinstance(answer, dict):
        answer = {"approve": bool(answer)}
    with ledger.db(store_url(ctx)) as db:
        if db.get(models.GateRequest, gate_id).status == "pending":  # type: ignore[union-attr]
            answer_gate(db, gate_id, approved=bool(answer.get("approve")), note=answer.get("note"))
    return answer
