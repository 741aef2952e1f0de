"""Atomic file writes, one implementation for every package: readers see the old file or the new one, never half.

The ground floor holds it because every floor writes records other processes read while they change
(summaries, handles, checkpoints, metrics, rollouts). The temporary file sits next to the target (same file
system, so the rename is atomic) and is named per process and thread, so two writers never share one. The
data is flushed to disk (fsync) before the rename and the folder after it, so a crash or a full disk leaves
the old file or the whole new one, never an empty file that a resume would trust.

`read_json` is the other half: a cached file that is missing, empty or not the JSON it should be reads as
None, so the caller recomputes it instead of trusting it.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path next to `path`; once the block has written it, it replaces `path` in one step.

    On an exception the temporary file is removed and `path` is left as it was.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)
        _fsync(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_json(path: Path) -> Any:
    """Return the JSON value in `path`, or None when the file is missing, empty or not valid JSON."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        return json.loads(data) if data.strip() else None
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        return None


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write `data` (text as UTF-8) to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
