"""Durable checkpoints for `langgraph dev` (langgraph.json `checkpointer.path`).

The dev server must not get a graph compiled with its own checkpointer (langgraph.md §4); it takes this
async context manager instead and stores threads in `.evotrainer/studio-checkpoints.db` (or the file
named by `EVOTRAINER_STUDIO_DB`), so a killed dev server keeps its threads.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any


@contextlib.asynccontextmanager
async def dev_checkpointer() -> AsyncIterator[Any]:
    """Yield an `AsyncSqliteSaver` for the dev server."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    path = Path(os.environ.get("EVOTRAINER_STUDIO_DB", ".evotrainer/studio-checkpoints.db"))
    path.parent.mkdir(parents=True, exist_ok=True)
    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        yield saver
