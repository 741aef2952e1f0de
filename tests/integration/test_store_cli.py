"""`evotrainer db ...` and `evotrainer status` in a subprocess, as a user runs them.

A bad store URL must exit 2 with one stderr line naming `--db`/`EVOTRAINER_DB`, and write nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from store import repository as repo
from store.engine import make_engine, session_scope


def evotrainer(cwd: Path, *args: str, env_db: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a fresh interpreter, with EVOTRAINER_DB set only when `env_db` is given."""
    env = {k: v for k, v in os.environ.items() if k != "EVOTRAINER_DB"}
    env["COLUMNS"] = "200"
    if env_db is not None:
        env["EVOTRAINER_DB"] = env_db
    cmd = [sys.executable, "-m", "agent.cli", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _assert_bad_url(result: subprocess.CompletedProcess[str], origin: str) -> None:
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and "--db" in lines[0] and "EVOTRAINER_DB" in lines[0]
    assert f"(from {origin})" in lines[0] or "cannot connect" in lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "env_db", "origin"),
    [
        (["db", "upgrade", "--db", "mysql://root@localhost/x"], None, "--db"),
        (["db", "check", "--db", "::not a url::"], None, "--db"),
        (["db", "upgrade"], "oracle://scott@tiger/db", "EVOTRAINER_DB"),
        (["status"], "redis://localhost", "EVOTRAINER_DB"),
        (["db", "upgrade", "--db", "postgresql://postgres@127.0.0.1:1/unreachable"], None, "--db"),
        (["status", "--db", "postgresql://postgres@127.0.0.1:1/unreachable"], None, "--db"),
        (["db", "downgrade", "base", "--db", "sqlite+aiosqlite:///x.db"], None, "--db"),
    ],
)
def test_bad_url_exits_2_with_one_line_and_writes_nothing(
    tmp_path: Path, args: list[str], env_db: str | None, origin: str
) -> None:
    result = evotrainer(tmp_path, *args, env_db=env_db)
    _assert_bad_url(result, origin)
    assert list(tmp_path.iterdir()) == [], "a rejected URL must not create files"


def test_explicit_db_beats_a_bad_environment_variable(tmp_path: Path) -> None:
    store = tmp_path / "explicit.db"
    result = evotrainer(tmp_path, "db", "upgrade", "--db", f"sqlite:///{store}", env_db="mysql://nope/x")
    assert result.returncode == 0, result.stderr
    assert store.exists() and not (tmp_path / ".evotrainer").exists()


@pytest.mark.postgres
def test_missing_postgres_database_exits_2_and_creates_nothing(pg_url: str, tmp_path: Path) -> None:
    name = f"evotrainer_missing_{uuid.uuid4().hex[:8]}"
    bad = pg_url.rsplit("/", 1)[0] + "/" + name
    _assert_bad_url(evotrainer(tmp_path, "db", "upgrade", "--db", bad), "--db")
    admin = create_engine(pg_url)
    try:
        with admin.connect() as conn:
            found = conn.execute(text("SELECT count(*) FROM pg_database WHERE datname = :n"), {"n": name}).scalar_one()
    finally:
        admin.dispose()
    assert found == 0
    assert list(tmp_path.iterdir()) == []


def test_status_on_the_default_store_lifecycle(tmp_path: Path) -> None:
    default = tmp_path / ".evotrainer" / "evotrainer.db"
    first = evotrainer(tmp_path, "status")
    assert first.returncode == 0 and "no sessions yet; run `evotrainer run`" in first.stdout
    assert not default.exists(), "status is read-only: it must not create the store"

    default.parent.mkdir()
    default.touch()  # a store file that was never migrated
    unmigrated = evotrainer(tmp_path, "status")
    assert unmigrated.returncode == 1 and "evotrainer db upgrade" in unmigrated.stderr

    assert evotrainer(tmp_path, "db", "upgrade").returncode == 0
    assert evotrainer(tmp_path, "db", "check").returncode == 0
    empty = evotrainer(tmp_path, "status")
    assert empty.returncode == 0 and "no sessions yet" in empty.stdout

    _populate(f"sqlite:///{default}")
    listing = evotrainer(tmp_path, "status")
    assert listing.returncode == 0, listing.stderr
    line = next(row for row in listing.stdout.splitlines() if "demo-1" in row)
    assert "score-only" in line and "finished" in line and "0.610" in line and " 2 " in line

    ledger = evotrainer(tmp_path, "status", "demo-1")
    assert ledger.returncode == 0, ledger.stderr
    v1 = next(row for row in ledger.stdout.splitlines() if "│ v1 " in row)
    assert "v0" in v1 and "merge" in v1 and "improvement" in v1 and "0.610" in v1 and "strict accuracy up" in v1
    assert "v0.1-strict" in ledger.stdout and "refused" in ledger.stdout and "touches eval/" in ledger.stdout

    missing = evotrainer(tmp_path, "status", "nope")
    assert missing.returncode == 2 and "no session 'nope'" in missing.stderr


def test_status_after_downgrade_asks_for_upgrade(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    assert evotrainer(tmp_path, "db", "upgrade", "--db", url).returncode == 0
    assert evotrainer(tmp_path, "db", "downgrade", "base", "--db", url).returncode == 0
    result = evotrainer(tmp_path, "status", "--db", url)
    assert result.returncode == 1 and "run `evotrainer db upgrade`" in result.stderr
    drift = evotrainer(tmp_path, "db", "check", "--db", url)
    assert drift.returncode == 1 and "db upgrade" in drift.stderr


def _populate(url: str) -> None:
    engine = make_engine(url)
    try:
        with session_scope(engine) as db:
            repo.create_session(db, session_id="demo-1", harness_path="/h", repo_path="/r", max_iterations=3,
                                max_train_steps=90, main_branch="evo/demo-1/main", mode="score-only")  # fmt: skip
            v0 = repo.add_version(db, session_id="demo-1", branch="evo/demo-1/main", commit_sha="a1")
            repo.record_decision(db, v0.id, decision="keep", outcome="insufficient", rationale="baseline",
                                 strict_score=0.42)  # fmt: skip
            repo.add_candidate(db, candidate_id="demo-1-v0.1-strict", session_id="demo-1", parent_version_id=v0.id,
                               iteration=1, slug="strict", branch="evo/demo-1/v0.1-strict", worktree_path="/w",
                               hypothesis="h", factor="reward", success_criterion="c")  # fmt: skip
            repo.update_candidate_status(db, "demo-1-v0.1-strict", "refused", refusal_reason="touches eval/")
            v1 = repo.add_version(db, session_id="demo-1", branch="evo/demo-1/main", commit_sha="b2", parent_id=v0.id)
            why = "strict accuracy up 19 points, paired p<0.01"
            repo.record_decision(db, v1.id, decision="merge", outcome="improvement", rationale=why, strict_score=0.61)
            repo.set_session_status(db, "demo-1", "finished")
    finally:
        engine.dispose()
