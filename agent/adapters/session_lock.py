"""One controller per session: the lock a process holds while it runs a session's graph.

Two `evotrainer resume`s of one session at once would both reset its worktrees, launch its runs and write
its checkpoints. `hold` takes an exclusive `flock` on ``session.lock`` in the session's folder for as long
as the process drives the graph; a second process finds it held and gets `SessionBusyError` naming the
holder's pid, host and start time (written into the file by the holder). The kernel drops the lock when
its process dies, however it dies, so a lock left by a killed controller is taken over by the next one
without any clean-up; the file itself stays (removing it would let two processes lock two different
files). The descriptor is not inherited: a trainer the controller started, which outlives it on purpose,
never holds the session.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

LOCK_FILE = "session.lock"


class SessionBusyError(RuntimeError):
    """Another live process is running this session."""

    def __init__(self, session_id: str, path: Path, holder: dict[str, object]) -> None:
        self.session_id, self.path, self.holder = session_id, path, holder
        pid, host, since = holder.get("pid", "?"), holder.get("host", "?"), holder.get("since", "?")
        super().__init__(
            f"session {session_id} is already running in process {pid} on {host} since {since} (lock {path}); "
            f"follow it with `evotrainer status {session_id}`, or stop that process first to resume it here"
        )


@contextlib.contextmanager
def hold(session_dir: Path, session_id: str) -> Iterator[Path]:
    """Hold the session's lock for the block; yield the lock file's path.

    Raises:
        SessionBusyError: another live process holds it (nothing is changed).
    """
    session_dir.mkdir(parents=True, exist_ok=True)
    path = session_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SessionBusyError(session_id, path, _holder(fd)) from None
        since = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime())
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": since}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, record + b"\n", 0)
        yield path
    finally:
        os.close(fd)  # releases the lock


def _holder(fd: int) -> dict[str, object]:
    try:
        raw = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        raw = None
    return raw if isinstance(raw, dict) else {}
