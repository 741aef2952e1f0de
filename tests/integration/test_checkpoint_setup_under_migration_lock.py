"""Concurrent checkpointer set-ups on a fresh Postgres database all succeed.

`agent.session.checkpointer` runs LangGraph's `PostgresSaver.setup()` (create the checkpoint tables, then
insert its migration rows), which is not safe against a second process doing the same: two `evotrainer
resume` of sessions started at the same instant on a fresh database died with `UniqueViolation`
(`checkpoint_migrations_pkey`). It now holds the store's migration lock (`store.engine.migration_lock`)
around it. Each set-up here is a separate process, all released together, on a throwaway database of the
test server (a fresh database each round: the race only exists while the tables are missing).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 4
ROUNDS = 3

SETUP = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from agent.session import checkpointer

    url, go = sys.argv[1], Path(sys.argv[2])
    while not go.exists():
        time.sleep(0.001)
    with checkpointer(url):
        pass
    """
)


def _race(url: str, tmp_path: Path) -> list[subprocess.CompletedProcess[str]]:
    go = tmp_path / f"go-{uuid.uuid4().hex[:8]}"
    procs = [
        subprocess.Popen([sys.executable, "-c", SETUP, url, str(go)], cwd=ROOT, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(PROCESSES)
    ]  # fmt: skip
    time.sleep(4)  # every process has imported LangGraph and waits for the signal
    go.touch()
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


@pytest.mark.slow
def test_concurrent_checkpointer_setups_on_a_fresh_database_all_succeed(pg_url: str, tmp_path: Path) -> None:
    admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    try:
        for _ in range(ROUNDS):
            name = f"ckpt_race_{uuid.uuid4().hex[:12]}"
            with admin.connect() as conn:
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
            try:
                url = make_url(pg_url).set(database=name).render_as_string(hide_password=False)
                for result in _race(url, tmp_path):
                    assert result.returncode == 0, result.stderr[-3000:]
            finally:
                with admin.connect() as conn:
                    conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()
