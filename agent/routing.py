"""Pure routers of the campaign graph: functions of state (and settings) only, unit-tested without an LLM."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from langgraph.types import Send

from agent.state import CandidateInfo, State

CONTROL_ID = "control"


def current(items: list[Any] | None, iteration: int) -> list[Any]:
    """Entries of a fan-out list that belong to `iteration`."""
    return [item for item in (items or []) if item.get("iteration") == iteration]


def route_after_observe(state: State) -> Literal["diagnose", "finish", "__end__"]:
    """End a session whose v0 could not be trained (`failed`: nothing to diagnose, nothing to finish)."""
    if state.get("status") == "failed":
        return "__end__"  # langgraph.graph.END
    return "finish" if state.get("status") == "finished" else "diagnose"


def route_after_diagnose(state: State) -> Literal["upgrade_diagnostics", "propose"]:
    """Upgrade the diagnostics when the evidence cannot explain the version (a diagnostic gap)."""
    return "upgrade_diagnostics" if state.get("gap") else "propose"


def live_candidates(state: State) -> list[CandidateInfo]:
    """Candidates of the current iteration that were not refused."""
    iteration = state.get("iteration", 0)
    return [c for c in state.get("candidates", []) if c["iteration"] == iteration and c["status"] != "refused"]


def fan_out_backtests(state: State) -> list[Send] | Literal["record"]:
    """One `backtest` branch per live candidate.

    With nothing to test, the incumbent harness keeps training (a control-only iteration): the policy
    co-evolves, the next diagnosis sees the new version, and the final policy gets the session's whole
    lineage budget. Only a policy that stopped on its LLM budget goes straight to `record`.
    """
    candidates = live_candidates(state)
    if not candidates:
        return "record" if state.get("llm_stop_reason") else [Send("train", {**_payload(state), "candidate": None})]
    return [Send("backtest", {**_payload(state), "candidate": c}) for c in candidates]


def passing_candidates(state: State) -> list[CandidateInfo]:
    """Live candidates whose backtest passed (or was inconclusive: evidence too thin to block a pilot)."""
    iteration = state.get("iteration", 0)
    verdicts = {b["candidate_id"]: b["verdict"] for b in current(state.get("backtests"), iteration)}
    return [c for c in live_candidates(state) if verdicts.get(c["id"]) in ("pass", "inconclusive")]


def fan_out_pilots(state: State) -> list[Send] | Literal["record"]:
    """One `train` branch per surviving, approved candidate plus the control run.

    A launch gate that approved nothing goes to `record` (a human said no); when every backtest failed,
    only the control trains (the incumbent continues, as in a control-only iteration).
    """
    approved = _approved_ids(state)
    candidates = [c for c in passing_candidates(state) if approved is None or c["id"] in approved]
    if not candidates and approved is not None:
        return "record"
    payload = _payload(state)
    sends = [Send("train", {**payload, "candidate": c}) for c in candidates]
    sends.append(Send("train", {**payload, "candidate": None}))
    return sends


def fan_out_replicates(state: State) -> list[Send] | Literal["promote_gate"]:
    """Re-train the merge candidate and the control on fresh seeds when `decide` asked for it."""
    rep = state.get("replication") or {}
    iteration = state.get("iteration", 0)
    if rep.get("iteration") != iteration:
        return "promote_gate"
    [cand] = [c for c in state.get("candidates", []) if c["id"] == rep["candidate_id"]]
    payload = _payload(state)
    sends = []
    for r in range(1, int(rep["replicates"]) + 1):
        sends.append(Send("replicate", {**payload, "candidate": cand, "replicate": r}))
        sends.append(Send("replicate", {**payload, "candidate": None, "replicate": r}))
    return sends


def route_after_record(state: State) -> Literal["observe", "finish"]:
    """Loop while the session has budget left; `record` sets `status` to `finished` when it has not."""
    return "finish" if state.get("status") == "finished" else "observe"


def _approved_ids(state: State) -> set[str] | None:
    answer = state.get("gate_answer") or {}
    if answer.get("gate") != "launch" or answer.get("iteration") != state.get("iteration"):
        return None
    approved = answer.get("approved", [])
    return set(approved) if isinstance(approved, list) else set()


def _payload(state: State) -> dict[str, Any]:
    return {
        "session_id": state["session_id"],
        "harness_dir": state["harness_dir"],
        "iteration": state.get("iteration", 0),
        "version": state["version"],
        "rollback": state.get("rollback") or {},
    }


# Every node each router may send the session to: a name it returns or the node of a `Send` it makes. `graph.py`
# draws exactly these edges (so Studio and `evotrainer graph` show every path a session can take), and
# `tests/unit/test_graph_routes.py` reads each router's code and fails when it can return a node not listed here.
ROUTES: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {
    "observe": (route_after_observe, ("diagnose", "finish", "__end__")),
    "diagnose": (route_after_diagnose, ("upgrade_diagnostics", "propose")),
    "propose": (fan_out_backtests, ("backtest", "train", "record")),
    "launch_gate": (fan_out_pilots, ("train", "record")),
    "decide": (fan_out_replicates, ("replicate", "promote_gate")),
    "record": (route_after_record, ("observe", "finish")),
}
