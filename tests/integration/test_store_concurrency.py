"""Two processes writing one SQLite store at once lose no rows and never duplicate an index.

Both writers also append versions to one shared session, where the next ledger index is read and
written in one transaction: without `BEGIN IMMEDIATE` the two would read the same max and collide.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from sqlalchemy import func, select

from store import engine as store_engine
from store import repository as repo
from store.models import EvoSession, Version

N_PER_WRITER = 40

WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from store import repository as repo
    from store.engine import make_engine, session_scope

    url, tag, n, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
    engine = make_engine(url)
    while not go.exists():
        time.sleep(0.005)
    for i in range(n):
        with session_scope(engine) as db:
            sid = f"{tag}-{i}"
            repo.create_session(db, session_id=sid, harness_path="/h", repo_path="/r", max_iterations=1,
                                max_train_steps=1, main_branch="main")
            repo.add_version(db, session_id=sid, branch="main", commit_sha=f"{tag}{i}")
        with session_scope(engine) as db:
            repo.add_version(db, session_id="shared", branch="main", commit_sha=f"shared-{tag}-{i}")
    engine.dispose()
    """
)


def test_two_writer_processes_lose_no_rows(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store_engine.upgrade(url)
    engine = store_engine.make_engine(url)
    with store_engine.session_scope(engine) as db:
        repo.create_session(db, session_id="shared", harness_path="/h", repo_path="/r", max_iterations=1,
                            max_train_steps=1, main_branch="main")  # fmt: skip
    go = tmp_path / "go"
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, url, tag, str(N_PER_WRITER), str(go)], stderr=subprocess.PIPE)
        for tag in ("a", "b")
    ]
    go.touch()
    errors = [w.communicate(timeout=180)[1].decode() for w in writers]
    assert [w.returncode for w in writers] == [0, 0], errors

    with store_engine.session_scope(engine) as db:
        assert db.scalar(select(func.count()).select_from(EvoSession)) == 2 * N_PER_WRITER + 1
        assert db.scalar(select(func.count()).select_from(Version)) == 4 * N_PER_WRITER
        shared = repo.session_ledger(db, "shared")
        assert [v.index for v in shared] == list(range(2 * N_PER_WRITER))
        by_writer = {tag: sum(v.commit_sha.startswith(f"shared-{tag}-") for v in shared) for tag in ("a", "b")}
        assert by_writer == {"a": N_PER_WRITER, "b": N_PER_WRITER}
    engine.dispose()
