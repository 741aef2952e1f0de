"""One controller per session: a second `evotrainer resume` of a running session says so and exits.

Two resumes of one session at once both reset its worktrees, launch its runs and write its checkpoints.
Here, through the real CLI: `run` starts a session (process sandbox, demo harness); while it trains, a
`resume` of it exits non-zero naming the running process and since when, having touched nothing. The
first is then killed (kill -9, its lock file left behind) and a new `resume` takes the session over.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from llm_session import copy_demo

from agent.adapters.session_lock import LOCK_FILE

ROOT = Path(__file__).resolve().parents[2]
LONG = ["--sandbox", "process", "--base-steps", "400", "--pilot-steps", "4", "--iterations", "1", "--candidates", "1"]

pytestmark = [pytest.mark.slow]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVOTRAINER_CACHE": str(tmp_path / "cache")}
    env.pop("EVOTRAINER_DB", None)
    return env


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def launch(*args: str) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "agent.cli", *args]
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        proc = subprocess.Popen(argv, cwd=tmp_path, env=_env(tmp_path), start_new_session=True, **quiet)
        procs.append(proc)
        return proc

    yield launch
    handles = tmp_path.glob(".evotrainer/sessions/*/runs/*/handle.json")
    trainers = [json.loads(h.read_text()).get("pid") for h in handles]
    for pid in [p.pid for p in procs] + [t for t in trainers if isinstance(t, int)]:  # trainers: their own groups
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    for proc in procs:
        proc.wait(timeout=60)


def _held_by(lock: Path, pid: int, proc: subprocess.Popen[bytes], timeout_s: float = 300) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"process {pid} ended (status {proc.returncode}) before it held the session"
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(lock.read_text())
            if record.get("pid") == pid:
                return dict(record)
        time.sleep(0.1)
    raise AssertionError(f"{lock} never named process {pid}")


def test_a_second_resume_of_a_running_session_exits_and_a_dead_holder_is_taken_over(
    tmp_path: Path, git_available: None, start: Callable[..., subprocess.Popen[bytes]]
) -> None:
    harness = copy_demo(tmp_path / "mine")
    first = start("run", "--harness", str(harness), *LONG)
    sessions = tmp_path / ".evotrainer" / "sessions"
    deadline = time.monotonic() + 300
    while not (sessions.is_dir() and list(sessions.glob(f"*/{LOCK_FILE}"))) and time.monotonic() < deadline:
        assert first.poll() is None, "run ended before it took its session"
        time.sleep(0.1)
    [lock] = list(sessions.glob(f"*/{LOCK_FILE}"))
    session_id = lock.parent.name
    record = _held_by(lock, first.pid, first)

    second = subprocess.run([sys.executable, "-m", "agent.cli", "resume", session_id], cwd=tmp_path,
                            env=_env(tmp_path), capture_output=True, text=True, timeout=300)  # fmt: skip
    said = second.stdout + second.stderr
    assert second.returncode != 0, said
    assert f"session {session_id} is already running in process {first.pid}" in said, said
    assert f"since {record['since']}" in said, said
    assert first.poll() is None, "the running session goes on"
    assert json.loads(lock.read_text())["pid"] == first.pid

    os.killpg(first.pid, signal.SIGKILL)  # its lock file stays, naming a dead process
    first.wait(timeout=60)
    assert json.loads(lock.read_text())["pid"] == first.pid
    third = start("resume", session_id)
    _held_by(lock, third.pid, third)  # taken over: the new process runs the session
