"""The environment's code is a factor of its own, on SQLite and Postgres alike.

Revision 7fd02a5a7710 widens the CHECK constraints of `skills.factor` and `candidates.factor` to allow `env`;
before it the same insert is refused, and downgrading below it refuses while a row records `env` (nothing a
session recorded is dropped or rewritten by a migration).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError

from store import engine as store_engine
from store.engine import make_engine

ENV_REVISION = "7fd02a5a7710"
BEFORE = "fee96c26e3b0"
SKILL_SQL = (
    "INSERT INTO skills (name, domain, trigger, factor, patch_kind, patch, params, expected_outcome, "
    "validation_rule, applicability, provenance, wins, losses, uses, created_at, updated_at, origin) "
    "VALUES (:name, 'agentic', 'x > 1', :factor, 'template', '[]', '{}', 'e', 'v', '[]', '', 0, 0, 0, :t, :t, "
    "'learned')"
)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """An empty database on each engine (a fresh Postgres schema, dropped afterwards)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    pg_url = str(request.getfixturevalue("pg_url"))
    schema = f"envf_{uuid.uuid4().hex[:12]}"
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


def _insert(url: str, name: str, factor: str) -> None:
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(SKILL_SQL), {"name": name, "factor": factor, "t": dt.datetime.now(dt.UTC)})
    finally:
        engine.dispose()


def test_env_is_refused_before_the_revision_and_stored_after_it(url: str) -> None:
    store_engine.upgrade(url, BEFORE)
    with pytest.raises(IntegrityError, match=r"ck_skills_factor|CHECK"):
        _insert(url, "env-before", "env")
    _insert(url, "reward-before", "reward")
    store_engine.upgrade(url)
    store_engine.check(url)
    _insert(url, "env-after", "env")
    with pytest.raises(IntegrityError, match=r"ck_skills_factor|CHECK"):
        _insert(url, "bogus", "environment")
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT name, factor FROM skills ORDER BY name")).all()
    finally:
        engine.dispose()
    assert [tuple(r) for r in rows] == [("env-after", "env"), ("reward-before", "reward")]


def test_downgrade_refuses_while_a_row_records_env_and_loses_nothing(url: str) -> None:
    store_engine.upgrade(url, ENV_REVISION)  # later revisions are downgraded on their own
    _insert(url, "env-skill", "env")
    with pytest.raises(Exception, match=r"skills: 1 row\(s\) record the factor 'env'"):
        store_engine.downgrade(url, BEFORE)
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT factor FROM skills")).scalar_one() == "env"
            version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM skills"))
    finally:
        engine.dispose()
    assert version == ENV_REVISION
    store_engine.downgrade(url, BEFORE)
    with pytest.raises(IntegrityError, match=r"ck_skills_factor|CHECK"):
        _insert(url, "env-again", "env")
