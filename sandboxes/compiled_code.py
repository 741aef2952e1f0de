"""Compiled code in a candidate: what runs without a source anyone reviewed.

Python imports a sourceless ``.pyc`` (and an extension module) as readily as a ``.py``, yet a diff shows it
only as "Binary files differ". The candidate checks (`agent.decisions.candidates`, the LLM's
`request_backtest`) refuse every changed or ignored file `compiled_code` names. Pure file reads; no git.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

COMPILED_SUFFIXES = (".pyc", ".pyo", ".pyd", ".so")
COMPILED_RULE = (
    "compiled code (Python bytecode .pyc/.pyo or __pycache__, extension modules .so/.pyd, any file with a "
    "bytecode or ELF header) runs without its source and a diff shows it only as 'Binary files differ', so it "
    "is never reviewed: commit the source instead"
)


def compiled_code(worktree: Path, paths: Sequence[str]) -> list[str]:
    """Return the paths of `paths` (relative to `worktree`) that hold compiled code (`COMPILED_RULE`).

    By name (a bytecode or extension suffix, a ``__pycache__`` folder on the way) or by content: a Python
    bytecode header (a CPython 3 magic number, ``\\r\\n``, a flags word of 0 to 3) or an ELF header, whatever the
    name.
    A path that is gone (a deletion) is not compiled code; links are refused elsewhere and never followed here.
    """
    found = []
    for rel in paths:
        parts = rel.split("/")
        name = parts[-1]
        if "__pycache__" in parts[:-1] or name.endswith(COMPILED_SUFFIXES) or ".so." in name:
            found.append(rel)
            continue
        try:
            fd = os.open(worktree / rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            head = os.read(fd, 8) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        finally:
            os.close(fd)
        magic = len(head) == 8 and 0x0A <= head[1] <= 0x1F and head[2:4] == b"\r\n"  # CPython 3: 3000 to 8000
        bytecode = magic and head[4] <= 3 and head[5:8] == b"\0\0\0"
        if bytecode or head.startswith(b"\x7fELF"):
            found.append(rel)
    return found
