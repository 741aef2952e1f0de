"""Concurrent first starts on one Postgres database, and skill counters under concurrent updates.

Before the fix, two `evotrainer run` starting at once on a fresh database: one died with `UniqueViolation`
on `CREATE TABLE alembic_version`; on a migrated one, one died seeding skills (`uq_skills_name`); and two
interleaved `uses += 1` on Postgres lost one. Each start here is a separate process doing what `run` does
before the graph: `start_session` (migrate, seed, session row) and the checkpointer's setup, released
together; each database is a fresh schema of the test database.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from llm_session import copy_demo
from sqlalchemy import create_engine, func, select
from sqlalchemy.engine import make_url

from skills.seeds import SEED_SKILLS
from store import engine as store_engine
from store import models
from store import repository as repo

ROOT = Path(__file__).resolve().parents[2]
STARTS = 3

START = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from agent.context import Context
    from agent.session import checkpointer, start_session

    url, harness, repo_dir, go = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
    ctx = Context(workdir=str(repo_dir.parent), db_url=url, sandbox="none")
    while not go.exists():
        time.sleep(0.002)
    session_id, _ = start_session(ctx, harness, repo_dir)
    with checkpointer(url):
        pass
    print(session_id)
    """
)

COUNT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from skills.repository import record_result, record_use
    from store.engine import make_engine, session_scope

    url, session_id, n, win, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "win", Path(sys.argv[5])
    engine = make_engine(url)
    while not go.exists():
        time.sleep(0.002)
    for _ in range(n):
        with session_scope(engine) as db:
            use = record_use(db, "counted", session_id, None, {"m": 1})
        with session_scope(engine) as db:
            record_result(db, use, win)
    engine.dispose()
    """
)


@pytest.fixture
def pg_schema_url(pg_url: str) -> Iterator[str]:
    """A Postgres URL whose `search_path` is a fresh, empty schema (dropped after the test)."""
    schema = f"starts_{uuid.uuid4().hex[:12]}"
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


def _together(argvs: list[list[str]], go: Path, cwd: Path) -> list[subprocess.CompletedProcess[str]]:
    """Start every process, release them at once through `go`, and wait for all."""
    env = {"PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    procs = [
        subprocess.Popen(a, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for a in argvs
    ]
    go.touch()
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


@pytest.mark.postgres
@pytest.mark.parametrize("database", ["fresh", "migrated"])
def test_concurrent_first_starts_all_succeed(
    database: str, pg_schema_url: str, tmp_path: Path, git_available: None
) -> None:
    if database == "migrated":
        store_engine.upgrade(pg_schema_url)
    harness = copy_demo(tmp_path / "h")
    go = tmp_path / "go"
    argvs = [[sys.executable, "-c", START, pg_schema_url, str(harness), str(tmp_path / f"w{i}" / "repo"), str(go)]
             for i in range(STARTS)]  # fmt: skip
    for i in range(STARTS):
        (tmp_path / f"w{i}").mkdir()
    done = _together(argvs, go, tmp_path)
    assert [d.returncode for d in done] == [0] * STARTS, [d.stderr[-3000:] for d in done]

    engine = store_engine.make_engine(pg_schema_url)
    try:
        assert store_engine.current_revision(engine) == store_engine.head_revision()
        with store_engine.session_scope(engine) as db:
            names = list(db.scalars(select(models.Skill.name)))
            sessions = set(db.scalars(select(models.EvoSession.id)))
    finally:
        engine.dispose()
    assert sorted(names) == sorted(s.name for s in SEED_SKILLS)  # seeded once, by whichever start came first
    assert sessions == {d.stdout.strip() for d in done}
    store_engine.check(pg_schema_url)


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_concurrent_counter_updates_lose_nothing(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    from skills.repository import get_skill, save_skill

    url = f"sqlite:///{tmp_path / 'store.db'}" if backend == "sqlite" else request.getfixturevalue("pg_schema_url")
    store_engine.upgrade(url)
    engine = store_engine.make_engine(url)
    with store_engine.session_scope(engine) as db:
        repo.create_session(db, session_id="s", harness_path="/h", repo_path="/r", max_iterations=1,
                            max_train_steps=1, main_branch="main")  # fmt: skip
        save_skill(db, SEED_SKILLS[0].model_copy(update={"name": "counted"}))
    n = 40
    go = tmp_path / "go"
    argvs = [[sys.executable, "-c", COUNT, url, "s", str(n), result, str(go)] for result in ("win", "loss", "win")]
    done = _together(argvs, go, tmp_path)
    assert [d.returncode for d in done] == [0, 0, 0], [d.stderr[-3000:] for d in done]
    with store_engine.session_scope(engine) as db:
        record = get_skill(db, "counted")
        settled = db.scalar(
            select(func.count()).select_from(models.SkillUse).where(models.SkillUse.result != "pending")
        )
    engine.dispose()
    assert (record.uses, record.wins, record.losses) == (3 * n, 2 * n, n)
    assert settled == 3 * n


def test_settling_a_use_again_moves_the_count_once(tmp_path: Path) -> None:
    from skills.repository import get_skill, record_result, record_use, save_skill

    url = f"sqlite:///{tmp_path / 'store.db'}"
    store_engine.upgrade(url)
    engine = store_engine.make_engine(url)
    with store_engine.session_scope(engine) as db:
        repo.create_session(db, session_id="s", harness_path="/h", repo_path="/r", max_iterations=1,
                            max_train_steps=1, main_branch="main")  # fmt: skip
        save_skill(db, SEED_SKILLS[0].model_copy(update={"name": "counted"}))
        use = record_use(db, "counted", "s", None, {})
        assert (record_result(db, use, True).wins, get_skill(db, "counted").uses) == (1, 1)
        again = record_result(db, use, True)
        flipped = record_result(db, use, False)
    engine.dispose()
    assert (again.wins, again.losses) == (1, 0)
    assert (flipped.wins, flipped.losses, flipped.last_verified_session) == (0, 1, "s")
