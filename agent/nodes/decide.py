"""decide: keep / prune / revert / merge each candidate (pure rule in agent/decisions/evidence.py); ask for replicates.

In `evotrainer` mode a merge first needs its improvement seen again on fresh training seeds
(`Context.replicates`): `decide` names the candidate in `replication`, the `replicate` fan-out re-trains
it and the control, and `confirm` pools the seeds. When the step budget cannot pay for the replicates,
the merge stands on one seed's evidence and says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from agent.adapters.runs import continuation
from agent.context import Context
from agent.decisions.evidence import Evaluation
from agent.decisions.evidence import decide as decide_rule
from agent.launch.session_guard import trusted_session
from agent.routing import CONTROL_ID, current
from agent.state import DecisionInfo, PilotInfo, ReplicationInfo, State


def decide(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Apply the decision rule of the session's mode to this iteration's evaluations."""
    trusted_session(runtime.context, state)  # the caller's own session; its paths and revisions checked
    ctx, it = runtime.context, state["iteration"]
    evaluations = [Evaluation.from_state(e) for e in current(state.get("evaluations"), it)]
    decisions = decide_rule(evaluations, ctx.mode)
    rollback = state.get("rollback") or {}
    if rollback:
        restarted = {c["id"] for c in state.get("candidates", []) if c.get("repairs_reward")}
        for d in decisions:
            if not rollback.get("repairs_only") or d["candidate_id"] in restarted:
                d["rationale"] += f"; rollback: {rollback['reason']}"
    _say_what_was_carried(decisions, current(state.get("pilots"), it))
    merge = next((d for d in decisions if d["decision"] == "merge"), None)
    if merge is None or ctx.mode != "evotrainer" or ctx.replicates == 0:
        return {"decisions": decisions, "replication": {}}
    spent = state.get("steps_used", 0) + sum(p["steps"] for p in current(state.get("pilots"), it))
    cost = 2 * ctx.replicates * ctx.pilot_steps
    if spent + cost > ctx.max_train_steps:
        merge["rationale"] += f"; not replicated: {cost} more steps would pass the budget ({ctx.max_train_steps})"
        return {"decisions": decisions, "replication": {}}
    replication = ReplicationInfo(iteration=it, candidate_id=merge["candidate_id"], replicates=ctx.replicates)
    return {"decisions": decisions, "replication": replication}


def _say_what_was_carried(decisions: list[DecisionInfo], pilots: list[PilotInfo]) -> None:
    """Append to each rationale what the candidate's pilot (and the control, when it differs) took over from the
    checkpoint it continued: weights, optimizer moments, random streams... as far as its backend carries them."""
    carried = {p["candidate_id"]: continuation(Path(p["run_dir"])) for p in pilots if not p.get("replicate")}
    control = carried.get(CONTROL_ID, "")
    for d in decisions:
        mine = carried.get(d["candidate_id"], "")
        if mine:
            d["rationale"] += f"; pilot {mine}" + (f" (control {control})" if control and control != mine else "")
