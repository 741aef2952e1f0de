"""Sessions record their caller on a shared server (`sessions.owner`), on SQLite and Postgres alike.

Revision 3c9d0e4f5a61 adds the nullable column: sessions recorded before it keep every value and have no owner
(the owner's own process made them), a session created after it records its owner, `alembic check` finds the
models and the schema equal, and downgrading drops the column and keeps the rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url

from agent.adapters import ledger
from store import engine as store_engine
from store.engine import make_engine
from store.repository import create_session, session_access

OWNER_REVISION = "3c9d0e4f5a61"
BEFORE = "7fd02a5a7710"
SESSION_SQL = (
    "INSERT INTO sessions (id, created_at, updated_at, harness_path, repo_path, mode, policy, status, "
    "max_iterations, max_train_steps, steps_used, wall_time_s, main_branch) VALUES ('old', :t, :t, '/h', '/r', "
    "'evotrainer', 'heuristic', 'running', 2, 100, 0, 0.0, 'evo/old/main')"
)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """An empty database on each engine (a fresh Postgres schema, dropped afterwards)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    pg_url = str(request.getfixturevalue("pg_url"))
    schema = f"owner_{uuid.uuid4().hex[:12]}"
    admin = create_engine(pg_url)
    with admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    try:
        yield (
            make_url(pg_url)
            .update_query_dict({"options": f"-csearch_path={schema}"})
            .render_as_string(hide_password=False)
        )
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        admin.dispose()


def _columns(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return {c["name"] for c in inspect(engine).get_columns("sessions")}
    finally:
        engine.dispose()


def test_old_sessions_have_no_owner_and_new_ones_record_it(url: str) -> None:
    import datetime as dt

    store_engine.upgrade(url, BEFORE)
    assert "owner" not in _columns(url)
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(SESSION_SQL), {"t": dt.datetime.now(dt.UTC)})
    finally:
        engine.dispose()
    store_engine.upgrade(url)
    store_engine.check(url)
    with ledger.db(url) as db:
        create_session(db, session_id="new", harness_path="/h", repo_path="/r2", max_iterations=1,
                       max_train_steps=10, main_branch="evo/new/main", owner="alice")  # fmt: skip
    with ledger.db(url) as db:
        assert session_access(db, "old") == ("/r", None)
        assert session_access(db, "new") == ("/r2", "alice")
        assert session_access(db, "missing") is None
    store_engine.downgrade(url, BEFORE)
    assert "owner" not in _columns(url)
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            ids = conn.execute(text("SELECT id FROM sessions ORDER BY id")).scalars().all()
            version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
    finally:
        engine.dispose()
    assert ids == ["new", "old"] and version == BEFORE
    store_engine.upgrade(url, OWNER_REVISION)
    assert "owner" in _columns(url)
