"""Process ownership on this host, and scratch folders named after their owner (cleanup after a kill).

`owner_token` names a process as `hostname/pid/start time`; `owner_gone` says whether it is dead. Sandbox
containers carry the token as a label (`sandboxes.docker.reap_orphans`), scratch folders in their name.

`tempfile.TemporaryDirectory` removes its folder when the `with` block ends or the owner exits normally; a
process killed with SIGKILL (a controller or trainer under `kill -9`) leaves it behind: a harness snapshot
of about 1 MB per sandbox worker. Folders made here carry the owner's pid and start time in their name
(``evotrainer-<kind>-<pid>-<start>-XXXXXXXX``), and `reap_orphan_dirs` removes those whose owner is dead
(`owner_gone`: a reused pid counts as dead). Sessions call it on start and resume.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
from pathlib import Path


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks since boot) of `pid` from /proc, or None where there is none."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # the command name in parentheses may hold spaces
    return (fields[0], fields[19]) if len(fields) > 19 else None


def owner_token(pid: int | None = None) -> str:
    """Name a process uniquely on this host: `hostname/pid/start time` (start time empty without /proc)."""
    pid = os.getpid() if pid is None else pid
    stat = _proc_stat(pid)
    return f"{socket.gethostname()}/{pid}/{stat[1] if stat else ''}"


def owner_gone(token: str) -> bool:
    """Say whether the process named by `owner_token` is known to be dead (a reused pid counts as dead).

    A token from another host (or malformed) is never "gone": its process cannot be checked from here.
    """
    host, _, rest = token.partition("/")
    pid_text, _, started = rest.partition("/")
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, owned by another user
    if not started:
        return False
    stat = _proc_stat(pid)
    return stat is None or stat[0] == "Z" or stat[1] != started


_OWNED = re.compile(r"^evotrainer-[a-z]+-(\d+)-(\d*)-[^-]+$")


def scratch_dir(kind: str) -> tempfile.TemporaryDirectory[str]:
    """A temporary folder `evotrainer-<kind>-<pid>-<start>-...` in the system temp dir."""
    _, pid, started = owner_token().split("/")
    return tempfile.TemporaryDirectory(prefix=f"evotrainer-{kind}-{pid}-{started}-")


def reap_orphan_dirs(root: Path | None = None) -> list[Path]:
    """Remove scratch folders whose owning process on this host is dead; return them."""
    root = Path(tempfile.gettempdir()) if root is None else root
    removed = []
    for path in root.iterdir():
        match = _OWNED.match(path.name)
        if match is None or not path.is_dir():
            continue
        if owner_gone(f"{socket.gethostname()}/{match[1]}/{match[2]}"):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
