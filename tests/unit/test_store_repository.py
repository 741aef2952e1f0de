"""The store's query helpers keep the ledger, gates and reports consistent (SQLite, migrated)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session

from store import engine as store_engine
from store import repository as repo
from store.models import Finding, HealthReport, Run


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('store') / 'evotrainer.db'}"
    store_engine.upgrade(url)
    return url


@pytest.fixture
def db(migrated: str) -> Iterator[Session]:
    """A session whose writes are rolled back after the test."""
    engine = store_engine.make_engine(migrated)
    session = Session(engine)
    try:
        repo.create_session(session, session_id="s", harness_path="/h", repo_path="/r", max_iterations=3,
                            max_train_steps=100, main_branch="main")  # fmt: skip
        yield session
    finally:
        session.rollback()
        session.close()
        engine.dispose()


def test_versions_get_consecutive_indexes_per_session(db: Session) -> None:
    repo.create_session(db, session_id="t", harness_path="/h", repo_path="/r", max_iterations=1,
                        max_train_steps=1, main_branch="main")  # fmt: skip
    s = [repo.add_version(db, session_id="s", branch="main", commit_sha=str(i)) for i in range(3)]
    t = repo.add_version(db, session_id="t", branch="main", commit_sha="x")
    assert [v.index for v in s] == [0, 1, 2] and t.index == 0
    assert [v.commit_sha for v in repo.session_ledger(db, "s")] == ["0", "1", "2"]


def test_best_strict_score_and_version_count_per_session(db: Session) -> None:
    for score in (0.3, None, 0.55, 0.4):
        v = repo.add_version(db, session_id="s", branch="main", commit_sha="c")
        if score is not None:
            repo.record_decision(db, v.id, decision="keep", outcome="mixed", rationale="r", strict_score=score)
    (summary,) = [row for row in repo.list_sessions(db) if row.id == "s"]
    assert (summary.n_versions, summary.best_strict_score, summary.status) == (4, 0.55, "running")


def test_bundles_need_a_justification_and_must_include_the_factor(db: Session) -> None:
    v0 = repo.add_version(db, session_id="s", branch="main", commit_sha="c")
    common = dict(session_id="s", parent_version_id=v0.id, iteration=1, worktree_path="/w", hypothesis="h",
                  success_criterion="c")  # fmt: skip
    with pytest.raises(ValueError, match="justification"):
        repo.add_candidate(db, candidate_id="a", slug="a", branch="b/a", factor="reward",
                           factors_declared=["reward", "filter"], **common)  # type: ignore[arg-type]  # fmt: skip
    with pytest.raises(ValueError, match="missing from factors_declared"):
        repo.add_candidate(db, candidate_id="b", slug="b", branch="b/b", factor="reward",
                           factors_declared=["filter"], **common)  # type: ignore[arg-type]  # fmt: skip
    ok = repo.add_candidate(db, candidate_id="c", slug="c", branch="b/c", factor="reward", **common)  # type: ignore[arg-type]
    assert ok.factors_declared == ["reward"] and ok.status == "proposed"
    with pytest.raises(ValueError, match="refusal_reason"):
        repo.update_candidate_status(db, "c", "refused")
    assert repo.update_candidate_status(db, "c", "refused", refusal_reason="edits eval/").status == "refused"
    with pytest.raises(repo.NotFoundError, match="'nope'"):
        repo.update_candidate_status(db, "nope", "kept")


def test_gates_are_answered_once_and_served_oldest_first(db: Session) -> None:
    first = repo.add_gate_request(db, session_id="s", gate="launch", payload={"candidates": ["a"]})
    second = repo.add_gate_request(db, session_id="s", gate="promote", payload={})
    assert repo.pending_gate(db, "s") is first
    answered = repo.answer_gate(db, first.id, approved=False, note="too risky")
    assert answered.status == "rejected" and answered.answered_at is not None
    with pytest.raises(ValueError, match="already answered"):
        repo.answer_gate(db, first.id, approved=True)
    assert repo.pending_gate(db, "s") is second
    repo.answer_gate(db, second.id, approved=True)
    assert repo.pending_gate(db, "s") is None


def test_health_report_counts_come_from_its_findings(db: Session) -> None:
    repo.add_run(db, run_id="r", session_id="s", backend="local", kind="pilot", steps=5, artefact_dir="/a")
    report = repo.add_health_report(
        db, session_id="s", run_id="r", path="/r.json",
        findings=[
            {"alert_id": "reward_hacking", "layer": "behaviour", "severity": "critical", "message": "m", "value": 0.4},
            {"alert_id": "dead_groups", "layer": "signal", "severity": "warning", "message": "m"},
            {"alert_id": "entropy", "layer": "signal", "severity": "ok", "message": "m", "evidence": {"x": 1}},
        ],
    )  # fmt: skip
    db.expire_all()
    loaded = db.get_one(HealthReport, report.id)
    assert (loaded.n_critical, loaded.n_warning) == (1, 1)
    assert [f.alert_id for f in loaded.findings] == ["reward_hacking", "dead_groups", "entropy"]
    db.delete(loaded)
    db.flush()
    assert db.query(Finding).count() == 0


def test_runs_finish_with_an_outcome_and_a_time(db: Session) -> None:
    with pytest.raises(ValueError, match="not both"):
        repo.add_run(db, run_id="x", session_id="s", backend="local", kind="pilot", steps=1, artefact_dir="/a",
                     candidate_id="c", version_id=1)  # fmt: skip
    repo.add_run(db, run_id="r", session_id="s", backend="verl", kind="full", steps=5, artefact_dir="/a")
    with pytest.raises(ValueError, match="finish_run"):
        repo.set_run_status(db, "r", "finished")
    repo.set_run_status(db, "r", "running")
    run = repo.finish_run(db, "r", outcome="timeout", message="killed at 600 s; see /a/train.log")
    assert (run.status, run.outcome, run.strict_acc) == ("finished", "timeout", None)
    assert run.finished_at is not None and run.finished_at >= run.created_at
    assert db.get_one(Run, "r").message.endswith("train.log")


def test_budget_memory_and_usage_helpers_write_rows(db: Session) -> None:
    repo.spend_budget(db, "s", steps=10, wall_time_s=2.5)
    session = repo.spend_budget(db, "s", steps=5, wall_time_s=1.0)
    assert (session.steps_used, session.wall_time_s) == (15, 3.5)
    with pytest.raises(ValueError, match="non-negative"):
        repo.spend_budget(db, "s", steps=-1, wall_time_s=0)
    repo.add_case(db, session_id="s", kind="pattern", domain="math", summary="old", signature={"dgr": 0.6})
    repo.add_case(db, session_id="s", kind="negative_evidence", domain="math", summary="new", signature={})
    repo.add_case(db, session_id="s", kind="pattern", domain="code", summary="other", signature={})
    assert [c.summary for c in repo.cases_for_domain(db, "math")] == ["new", "old"]
    assert [c.summary for c in repo.cases_for_domain(db, "math", "pattern")] == ["old"]
    trace = repo.record_search(db, session_id="s", node="propose", tool="search_skills", query="dgr>0.5",
                               result_summary="StdGroupFilter", used=True)  # fmt: skip
    usage = repo.add_llm_usage(db, session_id="s", node="propose", model="m", prompt_tokens=100, completion_tokens=20)
    metric = repo.add_diagnostic_metric(db, session_id="s", name="echo", source_path="/e.py",
                                        validation={"auc": 0.8}, validated=True)  # fmt: skip
    assert trace.id and usage.id and metric.id and repo.set_session_status(db, "s", "finished").status == "finished"


def test_llm_policy_needs_a_model(db: Session) -> None:
    with pytest.raises(ValueError, match="llm_model"):
        repo.create_session(db, session_id="x", harness_path="/h", repo_path="/r", max_iterations=1,
                            max_train_steps=1, main_branch="main", policy="llm")  # fmt: skip


def test_candidate_ids_are_unique_across_sessions() -> None:
    assert repo.candidate_id("s1", 1, 2, "strict-extraction") == "s1-v1.2-strict-extraction"
    assert repo.candidate_id("s2", 1, 2, "strict-extraction") != repo.candidate_id("s1", 1, 2, "strict-extraction")


def test_the_read_helpers_agent_uses_return_the_rows_it_wrote(db: Session) -> None:
    """The queries agent/ no longer writes itself answer from the store's own functions."""
    assert repo.find_session(db, "nope") is None and repo.session_row(db, "s").id == "s"
    with pytest.raises(repo.NotFoundError, match="'nope'"):
        repo.session_row(db, "nope")
    assert repo.session_repo_path(db, "s") == "/r" and repo.session_repo_path(db, "nope") is None
    repo.set_session_progress(db, "s", steps_used=7, wall_time_s=1.5)
    repo.set_session_progress(db, "s", steps_used=9, wall_time_s=2.0)  # absolute: a re-run writes the same
    assert (repo.session_row(db, "s").steps_used, repo.session_row(db, "s").wall_time_s) == (9, 2.0)
    repo.set_session_status(db, "s", "failed", reason="store gone")
    assert repo.status_reasons(db)["s"] == "store gone"
    v0 = repo.add_version(db, session_id="s", branch="main", commit_sha="c")
    for rid in ("s-b", "s-a"):
        repo.add_run(db, run_id=rid, session_id="s", backend="local", kind="pilot", steps=5, artefact_dir="/a")
    assert [r.id for r in repo.session_runs(db, "s")] == ["s-a", "s-b"] and repo.find_run(db, "x") is None
    assert repo.version_for_run(db, "s", "s-a") is None
    common = dict(session_id="s", parent_version_id=v0.id, iteration=1, worktree_path="/w", hypothesis="h",
                  success_criterion="c", slug="c", branch="b/c", factor="reward")  # fmt: skip
    repo.add_candidate(db, candidate_id="c", **common)  # type: ignore[arg-type]
    assert repo.find_candidate(db, "c") is not None and repo.latest_backtest(db, "c") is None
    for verdict in ("fail", "pass"):
        repo.add_backtest(db, candidate_id="c", rollouts_run_id="s-a", artefact_dir="/b", verdict=verdict,
                          outcome="ok")  # fmt: skip
    assert repo.latest_backtest(db, "c").verdict == "pass"  # type: ignore[union-attr]
    repo.add_case(db, session_id="s", candidate_id="c", kind="negative_evidence", domain="d", summary="x",
                  signature={})  # fmt: skip
    assert repo.case_of_candidate(db, "c").summary == "x" and [c.summary for c in repo.session_cases(db, "s")] == ["x"]  # type: ignore[union-attr]
    launch = repo.add_gate_request(db, session_id="s", gate="launch", payload={"iteration": 1})
    repo.add_gate_request(db, session_id="s", gate="promote", payload={"iteration": 1})
    assert repo.gate_requests(db, "s", "launch") == [launch] and repo.find_gate(db, launch.id) is launch
    for node, tokens, cost in (("propose", 10, 0.5), ("propose", 5, None), ("analyze", 1, 0.1)):
        repo.add_llm_usage(db, session_id="s", node=node, model="m", prompt_tokens=tokens, completion_tokens=1,
                           cost_usd=cost)  # fmt: skip
    assert sorted(repo.llm_usage_per_node(db, "s")) == [("analyze", 1, 1, 1, 0.1), ("propose", 2, 15, 2, 0.5)]
    assert [u.node for u in repo.session_llm_usage(db, "s")] == ["propose", "propose", "analyze"]
    trace = repo.record_search(db, session_id="s", node="propose", tool="t", query="q", result_summary="r")
    repo.mark_searches_used(db, [trace.id])
    assert trace.used is True
    repo.add_health_report(db, session_id="s", run_id="s-a", path="/h.json", findings=[])
    assert [h.run_id for h in repo.health_reports(db, "s")] == ["s-a"] and not repo.health_reports(db, "s", "s-b")
