"""Two sessions set up side by side in one process (a LangGraph server's workers) migrate their stores at once.

Alembic keeps its migration context in a module-global proxy; without the store's in-process lock, threads
migrating at the same time broke each other (`KeyError: 'config'` / `'script'`).
"""

from __future__ import annotations

import threading
from pathlib import Path

from store.engine import current_revision, head_revision, make_engine, upgrade


def test_threads_migrating_different_stores_at_once_all_reach_head(tmp_path: Path) -> None:
    urls = [f"sqlite:///{tmp_path}/store-{k}.db" for k in range(6)]
    errors: list[str] = []

    def migrate(url: str) -> None:
        try:
            upgrade(url)
        except Exception as exc:  # a thread's exception would otherwise vanish
            errors.append(repr(exc))

    threads = [threading.Thread(target=migrate, args=(url,)) for url in urls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert [current_revision(make_engine(url)) for url in urls] == [head_revision()] * len(urls)
