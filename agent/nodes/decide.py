"""decide: keep / prune / revert / merge each candidate from the evaluations (pure rule in agent/evidence.py)."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from agent.context import Context
from agent.evidence import Evaluation
from agent.evidence import decide as decide_rule
from agent.routing import current
from agent.state import State
from diagnostics.stats import PairedComparison


def decide(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Apply the decision rule of the session's mode to this iteration's evaluations."""
    evaluations = [_from_state(e) for e in current(state.get("evaluations"), state["iteration"])]
    return {"decisions": decide_rule(evaluations, runtime.context.mode)}


def _from_state(row: dict[str, Any]) -> Evaluation:
    cmp = row["comparison"]
    return Evaluation(
        candidate_id=row["candidate_id"],
        run_ok=row["run_ok"],
        message=row["message"],
        comparison=PairedComparison(**cmp) if cmp else None,
        outcome_class=row["outcome_class"],
        train_reward=row["train_reward"],
        control_train_reward=row["control_train_reward"],
        new_alerts=tuple(row["new_alerts"]),
    )
