"""Routers are pure functions of state: fan-out, gates and the loop, tested without an LLM."""

from __future__ import annotations

from typing import Any

from langgraph.types import Send

from agent import routing


def _cand(cid: str, iteration: int = 1, status: str = "proposed") -> dict[str, Any]:
    return {"id": cid, "iteration": iteration, "status": status, "worktree": f"/wt/{cid}", "branch": f"b/{cid}"}


def _state(**extra: Any) -> dict[str, Any]:
    base = {"session_id": "s1", "harness_dir": "/repo", "iteration": 1, "version": {"index": 0}}
    return {**base, **extra}


def test_backtest_fan_out_sends_one_branch_per_live_candidate() -> None:
    state = _state(candidates=[_cand("a"), _cand("b", status="refused"), _cand("old", iteration=0)])
    sends = routing.fan_out_backtests(state)  # type: ignore[arg-type]
    assert isinstance(sends, list) and [s.arg["candidate"]["id"] for s in sends] == ["a"]
    assert all(isinstance(s, Send) and s.node == "backtest" for s in sends)


def test_no_live_candidate_trains_the_incumbent_only_unless_the_llm_budget_stopped_it() -> None:
    sends = routing.fan_out_backtests(_state(candidates=[_cand("b", status="refused")]))  # type: ignore[arg-type]
    assert isinstance(sends, list) and [(s.node, s.arg["candidate"]) for s in sends] == [("train", None)]
    stopped = _state(candidates=[], llm_stop_reason="token budget spent")
    assert routing.fan_out_backtests(stopped) == "record"  # type: ignore[arg-type]


def test_every_backtest_failed_trains_the_control_only() -> None:
    backtests = [{"iteration": 1, "candidate_id": "a", "verdict": "fail"}]
    sends = routing.fan_out_pilots(_state(candidates=[_cand("a")], backtests=backtests))  # type: ignore[arg-type]
    assert isinstance(sends, list) and [s.arg["candidate"] for s in sends] == [None]


def test_pilots_only_for_passing_candidates_plus_control() -> None:
    backtests = [
        {"iteration": 1, "candidate_id": "a", "verdict": "pass"},
        {"iteration": 1, "candidate_id": "b", "verdict": "fail"},
        {"iteration": 1, "candidate_id": "c", "verdict": "inconclusive"},
        {"iteration": 0, "candidate_id": "d", "verdict": "pass"},
    ]
    state = _state(candidates=[_cand("a"), _cand("b"), _cand("c"), _cand("d")], backtests=backtests)
    sends = routing.fan_out_pilots(state)  # type: ignore[arg-type]
    assert isinstance(sends, list)
    ids = [s.arg["candidate"]["id"] if s.arg["candidate"] else "control" for s in sends]
    assert ids == ["a", "c", "control"]


def test_launch_gate_rejection_trains_nothing() -> None:
    backtests = [{"iteration": 1, "candidate_id": "a", "verdict": "pass"}]
    answer = {"gate": "launch", "iteration": 1, "approved": []}
    state = _state(candidates=[_cand("a")], backtests=backtests, gate_answer=answer)
    assert routing.fan_out_pilots(state) == "record"  # type: ignore[arg-type]


def test_stale_gate_answer_from_another_iteration_is_ignored() -> None:
    backtests = [{"iteration": 2, "candidate_id": "a", "verdict": "pass"}]
    answer = {"gate": "launch", "iteration": 1, "approved": []}
    state = _state(iteration=2, candidates=[_cand("a", iteration=2)], backtests=backtests, gate_answer=answer)
    sends = routing.fan_out_pilots(state)  # type: ignore[arg-type]
    assert isinstance(sends, list) and len(sends) == 2


def test_loop_and_finish() -> None:
    assert routing.route_after_record({"status": "running"}) == "observe"  # type: ignore[typeddict-item]
    assert routing.route_after_record({"status": "finished"}) == "finish"  # type: ignore[typeddict-item]
    assert routing.route_after_diagnose({"gap": True}) == "upgrade_diagnostics"  # type: ignore[typeddict-item]
    assert routing.route_after_diagnose({"gap": False}) == "propose"  # type: ignore[typeddict-item]
    assert routing.route_after_observe({"status": "finished"}) == "finish"  # type: ignore[typeddict-item]


def test_skills_settle_by_outcome_or_after_two_tries() -> None:
    from agent.nodes.propose import settled_skills

    def cand(skill: str, status: str, iteration: int = 1) -> dict[str, Any]:
        return {"skill": skill, "status": status, "iteration": iteration}

    rows = [
        cand("a", "pruned"),
        cand("b", "merged"),
        cand("c", "pruned"),
        cand("c", "pruned", 2),
        cand("d,e", "refused"),
        cand("f", "reverted"),
    ]
    # f regressed in the iteration where b was merged: the harness changed since, so f may be retried once
    assert settled_skills(rows) == {"b", "c", "d", "e"}  # type: ignore[arg-type]
    later = [cand("b", "merged", 1), cand("f", "reverted", 2)]
    assert settled_skills(later) == {"b", "f"}  # type: ignore[arg-type]


def test_replicates_fan_out_candidate_and_control_per_fresh_seed_only_when_decide_asked() -> None:
    state = _state(
        candidates=[_cand("a"), _cand("b")], replication={"iteration": 1, "candidate_id": "b", "replicates": 2}
    )
    sends = routing.fan_out_replicates(state)  # type: ignore[arg-type]
    assert isinstance(sends, list) and all(s.node == "replicate" for s in sends)
    got = [(s.arg["candidate"]["id"] if s.arg["candidate"] else "control", s.arg["replicate"]) for s in sends]
    assert got == [("b", 1), ("control", 1), ("b", 2), ("control", 2)]
    stale = _state(candidates=[_cand("a")], replication={"iteration": 0, "candidate_id": "a", "replicates": 1})
    assert routing.fan_out_replicates(stale) == "promote_gate"  # type: ignore[arg-type]
    assert routing.fan_out_replicates(_state(replication={})) == "promote_gate"  # type: ignore[arg-type]


def test_a_session_whose_v0_failed_ends_without_diagnosis_or_finish() -> None:
    assert routing.route_after_observe(_state(status="failed")) == "__end__"  # type: ignore[arg-type]
    assert routing.route_after_observe(_state(status="finished")) == "finish"  # type: ignore[arg-type]
    assert routing.route_after_observe(_state()) == "diagnose"  # type: ignore[arg-type]
