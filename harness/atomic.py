"""Atomic file writes, one implementation for every package: readers see the old file or the new one, never half.

The ground floor holds it because every floor writes records other processes read while they change
(summaries, handles, checkpoints, metrics, rollouts). The temporary file sits next to the target (same file
system, so the rename is atomic) and is named per process and thread, so two writers never share one.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path next to `path`; once the block has written it, it replaces `path` in one step.

    On an exception the temporary file is removed and `path` is left as it was.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write `data` (text as UTF-8) to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
