"""launch_gate / promote_gate: human approval via `interrupt()`; side effects only after the answer.

A node re-runs from its first line when resumed (langgraph.md §6), so the pending gate row is written
idempotently (one per session, gate and iteration) and nothing else happens before `interrupt()`.
The answer is `{"approve": bool, "note": str}`; `evotrainer approve` writes it to the store and resumes.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import interrupt

from agent.adapters import ledger
from agent.context import Context
from agent.launch.session_guard import TrustedSession, trusted_session
from agent.routing import current, passing_candidates
from agent.state import State

GATES_FOR = {"launch": ("launch", "all"), "promote": ("promote", "all")}


def effective_gate(ctx: Context, state: State) -> str:
    """The gate setting in force: every gate is on once `escalate_after` iterations failed in a row.

    The paper's escalation rule: after repeated failures the autonomous loop asks a human (0 = never).
    """
    if ctx.escalate_after and state.get("failures_in_row", 0) >= ctx.escalate_after:
        return "all"
    return ctx.gate


def launch_gate(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Ask a human before pilots are trained: diff, backtest verdict, diagnostic delta, predicted cost."""
    candidates = passing_candidates(state)
    ctx = runtime.context
    trusted = trusted_session(ctx, state)  # the caller's own session; every path and revision checked
    if effective_gate(ctx, state) not in GATES_FOR["launch"] or not candidates:
        return {}
    verdicts = {b["candidate_id"]: b for b in current(state.get("backtests"), state["iteration"])}
    wall_per_step = _wall_s_per_step(ctx, state)
    pack = {
        "gate": "launch",
        "iteration": state["iteration"],
        "escalated": _escalation(ctx, state),
        "candidates": [
            {
                "id": c["id"],
                "branch": c["branch"],
                "factor": c["factor"],
                "hypothesis": c["hypothesis"],
                "success_criterion": c["success_criterion"],
                "diff": _diff(trusted, state, c),
                "backtest": verdicts.get(c["id"], {}).get("verdict", "none"),
                "backtest_reasons": verdicts.get(c["id"], {}).get("reasons", [])[:5],
                "diagnostic_delta": _diagnostic_delta(trusted, verdicts.get(c["id"], {}).get("report_path", "")),
                "predicted_steps": ctx.pilot_steps,
            }
            for c in candidates
        ],
        "control_steps": ctx.pilot_steps,
        "predicted_cost": {
            "training_steps": ctx.pilot_steps * (len(candidates) + 1),
            "wall_s": None if wall_per_step is None else round(wall_per_step * ctx.pilot_steps * (len(candidates) + 1)),
        },
    }
    answer = _ask(ctx, state, "launch", pack)
    approved = [c["id"] for c in candidates] if answer.get("approve") else []
    update: dict[str, Any] = {
        "gate_answer": {
            "gate": "launch",
            "iteration": state["iteration"],
            "approved": approved,
            "note": answer.get("note", ""),
        }
    }
    if not approved:
        update["candidates"] = _prune_rejected(ctx, state, {c["id"] for c in candidates}, answer.get("note", ""))
    return update


def promote_gate(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Ask a human before the best candidate is merged into the session main line."""
    trusted = trusted_session(runtime.context, state)
    merge = [d for d in state.get("decisions", []) if d["decision"] == "merge"]
    if effective_gate(runtime.context, state) not in GATES_FOR["promote"] or not merge:
        return {}
    cand = next((c for c in state.get("candidates", []) if c["id"] == merge[0]["candidate_id"]), None)
    pack = {
        "gate": "promote",
        "iteration": state["iteration"],
        "escalated": _escalation(runtime.context, state),
        "decision": merge[0],
        "diff": _diff(trusted, state, cand) if cand else "",
    }
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
    from store.repository import add_gate_request, answer_gate, find_gate, gate_requests

    with ledger.db(ledger.store_url(ctx)) as db:
        rows = gate_requests(db, state["session_id"], gate)  # type: ignore[arg-type]
        row = next((r for r in rows if r.payload.get("iteration") == state["iteration"]), None)
        if row is None:
            row = add_gate_request(db, session_id=state["session_id"], gate=gate, payload=pack)  # type: ignore[arg-type]
        gate_id, status, note = row.id, row.status, row.note
    if status != "pending":  # answered already (e.g. `evotrainer approve` before the resume)
        return {"approve": status == "approved", "note": note or ""}
    answer = interrupt({**pack, "gate_id": gate_id})
    if not isinstance(answer, dict):
        answer = {"approve": bool(answer)}
    with ledger.db(ledger.store_url(ctx)) as db:
        if (found := find_gate(db, gate_id)) is not None and found.status == "pending":
            answer_gate(db, gate_id, approved=bool(answer.get("approve")), note=answer.get("note"))
    return answer


def _escalation(ctx: Context, state: State) -> str:
    if effective_gate(ctx, state) != ctx.gate:
        return f"{state.get('failures_in_row', 0)} failed iterations in a row (escalate_after={ctx.escalate_after})"
    return ""


def _prune_rejected(ctx: Context, state: State, rejected: set[str], note: str) -> list[dict[str, Any]]:
    """Prune the candidates a human rejected at the launch gate, with the note, in state and store."""
    from store.repository import find_candidate, update_candidate_status

    reason = f"rejected at the launch gate: {note or '(no note)'}"
    candidates = [dict(c) for c in state.get("candidates", [])]
    with ledger.db(ledger.store_url(ctx)) as db:
        for c in candidates:
            if c["id"] in rejected:
                c["status"], c["reason"] = "pruned", reason
                if find_candidate(db, c["id"]) is not None:
                    update_candidate_status(db, c["id"], "pruned", refusal_reason=reason)
    return candidates


def _diff(trusted: TrustedSession, state: State, cand: Any, max_chars: int = 6000) -> str:
    """The candidate's diff against the incumbent commit (truncated), both verified in the session repository."""
    from sandboxes.git_revisions import diff_text

    base = trusted.commit(state["version"]["commit"], "version.commit")
    head = trusted.branch_commit(cand["branch"], "candidates[].branch")
    text = diff_text(trusted.repo, base, head)
    return text if len(text) <= max_chars else text[:max_chars] + f"\n[... {len(text) - max_chars} more characters]"


def _diagnostic_delta(trusted: TrustedSession, report_path: str) -> dict[str, Any]:
    """Before/after numbers of the backtest: dead groups, rank violations, reward, kept samples, hack score.

    The report is read only from the session's own backtest folder."""
    import json

    path = trusted.inside(report_path, "backtests", "backtests[].report_path") if report_path else None
    if path is None or not path.is_file():
        return {}
    metrics = json.loads(path.read_text()).get("metrics") or {}
    keys = (
        "dead_ratio_before",
        "dead_ratio_after",
        "rank_violations_before",
        "rank_violations_after",
        "reward_mean_before",
        "reward_mean_after",
        "newly_truncated",
        "kept_sample_ratio",
        "hack_max_score",
    )
    return {k: metrics.get(k) for k in keys if k in metrics}


def _wall_s_per_step(ctx: Context, state: State) -> float | None:
    """Seconds per training step of the incumbent's run, if recorded (basis of the predicted wall time)."""
    from store.repository import find_run

    with ledger.db(ledger.store_url(ctx)) as db:
        run = find_run(db, state["version"]["run_id"])
        if run is None or not run.wall_time_s or not run.steps:
            return None
        return float(run.wall_time_s) / run.steps
