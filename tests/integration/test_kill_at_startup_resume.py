"""`resume` continues a session killed at any instant after `run` started.

The former hole: a kill -9 between writing the session's `context.json` and LangGraph's first checkpoint
left a session `resume` could never continue (`EmptyInputError: Received no input for __start__`). Here
the controller is killed (its whole process group) as soon as `context.json` appears, on SQLite and on
Postgres, and, on SQLite, as soon as the session's repository appears; `resume` must then finish the
session: status finished, v0 and the iteration's version in the ledger, no half-built repository left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from llm_session import copy_demo
from sqlalchemy import select

from agent.graph import builder
from agent.session import checkpointer, thread_config
from store import models
from store.engine import make_engine, session_scope

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--sandbox", "process", "--base-steps", "4", "--pilot-steps", "4", "--iterations", "1", "--candidates", "1"]
POLL_S = 0.005

pytestmark = [pytest.mark.slow]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVOTRAINER_CACHE": str(tmp_path / "cache")}
    env.pop("EVOTRAINER_DB", None)
    return env


def _kill_when(tmp_path: Path, db: list[str], ready: str) -> str:
    """Start `run`, kill -9 its whole process group once `ready` holds; return the session id."""
    harness = copy_demo(tmp_path / "mine")
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "run", "--harness", str(harness), *SMALL, *db],
        cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    sessions = tmp_path / ".evotrainer" / "sessions"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            found = list(sessions.glob("*/context.json")) if sessions.is_dir() else []
            if found and (ready == "context.json" or (tmp_path / "evotrainer-arithmetic").is_dir()):
                break
            time.sleep(POLL_S)
        assert proc.poll() is None, "the session ended before the kill"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    [folder] = list(sessions.iterdir())
    return folder.name


def _has_checkpoint(url: str, session_id: str) -> bool:
    with checkpointer(url) as saver:
        return builder.compile(checkpointer=saver).get_state(thread_config(session_id)).created_at is not None


def _resume_finishes(tmp_path: Path, url: str, session_id: str) -> None:
    out = subprocess.run([sys.executable, "-m", "agent.cli", "resume", session_id], cwd=tmp_path,
                         env=_env(tmp_path), capture_output=True, text=True, timeout=900)  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    engine = make_engine(url)
    try:
        with session_scope(engine) as db:
            session = db.get(models.EvoSession, session_id)
            assert session is not None and session.status == "finished", session and session.status
            versions = db.scalars(select(models.Version).where(models.Version.session_id == session_id)).all()
            assert sorted(v.index for v in versions) == [0, 1]
            repo = Path(session.repo_path)
    finally:
        engine.dispose()
    assert (repo / "evotrainer.yaml").is_file()
    assert not list(tmp_path.glob(".evotrainer-*.partial")), "a half-built repository was left behind"


@pytest.mark.parametrize("ready", ["context.json", "repository"])
def test_kill_at_start_up_then_resume_finishes_on_sqlite(tmp_path: Path, git_available: None, ready: str) -> None:
    session_id = _kill_when(tmp_path, [], ready)
    url = f"sqlite:///{tmp_path / '.evotrainer' / 'evotrainer.db'}"
    if ready == "context.json":  # the kill must have come before the first checkpoint: the case that broke
        assert not (tmp_path / ".evotrainer" / "evotrainer.db").exists() or not _has_checkpoint(url, session_id)
    _resume_finishes(tmp_path, url, session_id)


@pytest.mark.postgres
def test_kill_at_start_up_then_resume_finishes_on_postgres(tmp_path: Path, git_available: None, pg_url: str) -> None:
    session_id = _kill_when(tmp_path, ["--db", pg_url], "context.json")
    assert not _has_checkpoint(pg_url, session_id)
    _resume_finishes(tmp_path, pg_url, session_id)
