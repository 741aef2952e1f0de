"""The store migrates, checks clean and round-trips every model on SQLite and Postgres.

Each test gets a fresh database migrated with Alembic (never `create_all`): a SQLite file under
tmp_path, or a fresh Postgres schema selected through `search_path`, dropped afterwards.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, StatementError

from store import engine as store_engine
from store import models as m
from store.engine import make_engine, session_scope

STORE_TABLES = {t.name for t in m.Base.metadata.sorted_tables}


@pytest.fixture
def pg_schema_url(pg_url: str) -> Iterator[str]:
    """A Postgres URL whose `search_path` is a fresh, empty schema (dropped after the test)."""
    schema = f"store_{uuid.uuid4().hex[:12]}"
    admin = create_engine(pg_url)
    with admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    url = make_url(pg_url).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """URL of an empty database on each engine."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store' / 'evotrainer.db'}"
    return str(request.getfixturevalue("pg_schema_url"))


@pytest.fixture
def migrated_url(empty_url: str) -> str:
    """URL of a database migrated to head with Alembic."""
    store_engine.upgrade(empty_url)
    return empty_url


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_upgrade_creates_every_table_and_checks_clean(empty_url: str) -> None:
    assert _tables(empty_url) & STORE_TABLES == set()
    store_engine.upgrade(empty_url)
    assert STORE_TABLES | {"alembic_version"} <= _tables(empty_url)
    store_engine.check(empty_url)  # raises SchemaDriftError on drift
    engine = make_engine(empty_url)
    try:
        assert store_engine.current_revision(engine) == store_engine.head_revision()
    finally:
        engine.dispose()


def test_downgrade_to_base_drops_the_store_and_upgrade_restores_it(migrated_url: str) -> None:
    store_engine.downgrade(migrated_url, "base")
    assert _tables(migrated_url) & STORE_TABLES == set()
    store_engine.upgrade(migrated_url)
    assert _tables(migrated_url) >= STORE_TABLES
    store_engine.check(migrated_url)


def test_check_reports_a_database_behind_head(empty_url: str) -> None:
    store_engine.upgrade(empty_url)
    store_engine.downgrade(empty_url, "base")
    with pytest.raises(store_engine.SchemaDriftError, match="db upgrade"):
        store_engine.check(empty_url)


def test_check_ignores_langgraph_checkpoint_tables_but_sees_other_drift(migrated_url: str) -> None:
    engine = make_engine(migrated_url)
    try:
        with engine.begin() as conn:
            # (on Postgres `upgrade` has set up LangGraph's real tables already, under the migration lock)
            conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS checkpoints (thread_id TEXT PRIMARY KEY)")
            conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS writes (thread_id TEXT PRIMARY KEY)")
        store_engine.check(migrated_url)  # LangGraph's tables are not drift
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE stray (id INTEGER PRIMARY KEY)")
    finally:
        engine.dispose()
    with pytest.raises(store_engine.SchemaDriftError, match="stray"):
        store_engine.check(migrated_url)


def _rows(at: dt.datetime) -> list[m.Base]:
    """One fully populated row of every model, in dependency order."""
    later = at + dt.timedelta(minutes=5)
    return [
        m.EvoSession(id="s1", created_at=at, updated_at=at, harness_path="/h", repo_path="/r", mode="score-only",
                     policy="llm", llm_model="gpt-x", status="interrupted", max_iterations=4, max_train_steps=200,
                     steps_used=30, wall_time_s=12.5, main_branch="evo/s1/main"),
        m.Skill(id=7, name="strict-extraction", domain="math", trigger="reward_hacking >= 1 and domain == 'math'",
                factor="reward", patch_kind="template", patch="def f(): ...", params={"k": [1, 2]},
                expected_outcome="strict up", validation_rule="strict +2pt", applicability=["math", "code"],
                provenance="seed", wins=2, losses=1, uses=3, created_at=at, updated_at=at,
                last_verified_session="s1", origin="learned", source_candidate_id=None),
        m.Version(id=1, session_id="s1", index=0, parent_id=None, branch="evo/s1/main", commit_sha="a" * 40,
                  config_snapshot={"lr": 1e-6, "nested": {"x": None}}, diff_stat_files=2, diff_stat_insertions=10,
                  diff_stat_deletions=3, decision="keep", outcome="mixed", rationale="why", strict_score=0.5,
                  train_score=0.7, run_id=None, created_at=at),
        m.Candidate(id="s1-v0.1-x", session_id="s1", parent_version_id=1, iteration=1, slug="x",
                    branch="evo/s1/v0.1-x", worktree_path="/w", hypothesis="h", factor="filter",
                    factors_declared=["filter", "data"], justification="coupled", success_criterion="c",
                    skill_id=7, status="backtest_failed", refusal_reason=None, created_at=at),
        m.Run(id="r1", session_id="s1", candidate_id="s1-v0.1-x", version_id=None, backend="verl", kind="full",
              seed=3, steps=50, artefact_dir="/runs/r1", status="finished", outcome="spoof_detected",
              strict_acc=0.25, train_reward=0.9, wall_time_s=33.0, message="forged line", created_at=at,
              finished_at=later),
        m.Backtest(id=1, candidate_id="s1-v0.1-x", rollouts_run_id="r1", artefact_dir="/b", verdict="inconclusive",
                   outcome="timeout", dead_group_ratio_before=0.5, dead_group_ratio_after=0.2,
                   rank_violations_before=4, rank_violations_after=1, kept_ratio=0.8, hack_max_score=0.1,
                   reasons=["a", "b"], created_at=at),
        m.HealthReport(id=1, session_id="s1", run_id="r1", version_id=1, path="/hr.json", n_critical=1,
                       n_warning=0, created_at=at),
        m.Finding(id=1, report_id=1, alert_id="reward_hacking", layer="behaviour", severity="critical", value=0.4,
                  threshold=0.2, message="m", evidence={"samples": [1, 2]}),
        m.DiagnosticMetric(id=1, session_id="s1", name="echo_rate", source_path="/d.py", validated=True,
                           validation={"auc": 0.9}, created_at=at),
        m.Case(id=1, session_id="s1", kind="negative_evidence", domain="math", signature={"dgr": 0.6},
               summary="s", candidate_id="s1-v0.1-x", outcome="regression", intervention="trainer:lr:up:m0",
               symptom_key="tiny_updates", created_at=at),
        m.SkillUse(id=1, skill_id=7, session_id="s1", candidate_id="s1-v0.1-x", matched_metrics={"dgr": 0.6},
                   result="loss", created_at=at),
        m.SearchTrace(id=1, session_id="s1", node="propose", tool="search_skills", query="q", result_summary="r",
                      used=True, created_at=at),
        m.GateRequest(id=1, session_id="s1", gate="promote", candidate_id="s1-v0.1-x", payload={"p": 1},
                      status="rejected", note="n", created_at=at, answered_at=later),
        m.LLMUsage(id=1, session_id="s1", node="propose", model="gpt-x", prompt_tokens=10, completion_tokens=5,
                   cost_usd=0.002, created_at=at),
    ]  # fmt: skip


def _values(row: m.Base) -> dict[str, Any]:
    return {c.key: getattr(row, c.key) for c in inspect(type(row)).column_attrs}


def test_every_model_round_trips(migrated_url: str) -> None:
    at = dt.datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    expected = [(type(r), _values(r)) for r in _rows(at)]
    assert {model.__tablename__ for model, _ in expected} == STORE_TABLES
    engine = make_engine(migrated_url)
    try:
        with session_scope(engine) as db:
            for row in _rows(at):
                db.add(row)
                db.flush()
            db.get_one(m.Version, 1).run_id = "r1"  # the use_alter edge of the versions/runs cycle
            # ... and of the skills/candidates one (updated_at given: its onupdate would stamp "now")
            db.execute(update(m.Skill).where(m.Skill.id == 7).values(source_candidate_id="s1-v0.1-x", updated_at=at))
        with session_scope(engine) as db:
            for model, values in expected:
                loaded = _values(db.get_one(model, values["id"]))
                if model is m.Version:
                    values = {**values, "run_id": "r1"}
                if model is m.Skill:
                    values = {**values, "source_candidate_id": "s1-v0.1-x"}
                assert loaded == values, model.__tablename__
                for key, value in loaded.items():
                    if isinstance(value, dt.datetime):
                        assert value.utcoffset() == dt.timedelta(0), f"{model.__tablename__}.{key} is not UTC"
    finally:
        engine.dispose()


def test_constraints_hold_on_both_engines(migrated_url: str) -> None:
    engine = make_engine(migrated_url)
    now = dt.datetime.now(dt.UTC)
    session_sql = (
        "INSERT INTO sessions (id, created_at, updated_at, harness_path, repo_path, mode, policy, status, "
        "max_iterations, max_train_steps, steps_used, wall_time_s, main_branch) "
        "VALUES (:id, :t, :t, '/h', '/r', :mode, 'heuristic', 'running', 1, 1, 0, 0, 'main')"
    )
    try:
        with pytest.raises(IntegrityError, match=r"ck_sessions_mode|CHECK"), engine.begin() as conn:
            conn.execute(text(session_sql), {"id": "bad", "t": now, "mode": "yolo"})
        with pytest.raises(StatementError, match="yolo"), session_scope(engine) as db:
            db.add(m.EvoSession(id="bad2", harness_path="/h", repo_path="/r", mode="yolo", max_iterations=1,
                                max_train_steps=1, main_branch="main"))  # fmt: skip
            db.flush()
        with pytest.raises(IntegrityError), session_scope(engine) as db:  # foreign keys are enforced
            db.add(m.Version(session_id="missing", index=0, branch="b", commit_sha="c"))
            db.flush()
        with pytest.raises(StatementError, match="naive datetime"), session_scope(engine) as db:
            db.add(m.EvoSession(id="naive", created_at=dt.datetime(2026, 1, 1), harness_path="/h", repo_path="/r",
                                max_iterations=1, max_train_steps=1, main_branch="main"))  # fmt: skip
            db.flush()
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM sessions")).scalar_one() == 0
    finally:
        engine.dispose()
