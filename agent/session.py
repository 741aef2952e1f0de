"""Session lifecycle for the CLI: create a session, compile the graph with a durable checkpointer, run/resume.

The checkpointer shares the store's database (SQLite file or Postgres URL); Alembic ignores its tables
(`migrations/env.py`). A killed session continues with `resume`: the same graph is rebuilt on the same
checkpoint store and invoked with `None` (langgraph.md §6); idempotent nodes do the rest.
"""

from __future__ import annotations

import logging
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent import ledger
from agent.context import Context

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

log = logging.getLogger(__name__)

# Graph steps per session: ~12 per iteration; the default (10007) would let a bug loop for hours.
RECURSION_LIMIT = 400
MAX_CONCURRENCY = 2  # parallel training/backtest branches: one per core


def new_session_id() -> str:
    """A short, branch-safe session id."""
    return "s" + time.strftime("%m%d%H%M") + "-" + secrets.token_hex(2)


def start_session(ctx: Context, harness_src: Path, repo_dir: Path, session_id: str | None = None) -> tuple[str, Path]:
    """Create the session's git repo and main-line branch, seed the skills and insert the session row.

    Returns:
        (session id, harness repo path) to pass as the graph input.
    """
    from harness.manifest import load_harness
    from sandboxes import git_worktree as gw
    from skills.repository import list_skills, seed_skills
    from skills.seeds import SEED_SKILLS
    from store.engine import upgrade
    from store.repository import create_session

    session_id = session_id or new_session_id()
    repo = gw.init_session_repo(harness_src, repo_dir)
    root = Path(repo.working_tree_dir or repo_dir)
    load_harness(root)  # fail before anything is recorded when the manifest is invalid
    branch = gw.create_session_branch(repo, session_id)
    repo.git.checkout(branch)
    url = ledger.db_url(ctx.db_url, ctx.workdir)
    upgrade(url)
    with ledger.db(url) as db:
        have = {r.spec.name for r in list_skills(db)}
        seed_skills(db, [s for s in SEED_SKILLS if s.name not in have])
        create_session(
            db,
            session_id=session_id,
            harness_path=str(harness_src),
            repo_path=str(root),
            max_iterations=ctx.max_iterations,
            max_train_steps=ctx.max_train_steps,
            main_branch=branch,
            mode=ctx.mode,
            policy=ctx.policy,
            llm_model=ctx.llm_model or None,
        )
    return session_id, root


@contextmanager
def checkpointer(url: str) -> Iterator[Any]:
    """A LangGraph checkpointer on the store's database (SQLite file or Postgres)."""
    from store.engine import sqlite_path

    path = sqlite_path(url)
    if path is not None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(str(path), check_same_thread=False, timeout=30)
        try:
            saver = SqliteSaver(conn)
            saver.setup()
            yield saver
        finally:
            conn.close()
        return
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(url.replace("postgresql+psycopg://", "postgresql://")) as pg_saver:
        pg_saver.setup()
        yield pg_saver


def thread_config(session_id: str, max_concurrency: int | None = None) -> RunnableConfig:
    """The LangGraph config of a session's thread (`max_concurrency`: parallel branches, default one per core)."""
    return {
        "configurable": {"thread_id": session_id},
        "recursion_limit": RECURSION_LIMIT,
        "max_concurrency": max_concurrency or MAX_CONCURRENCY,
    }


def run_graph(ctx: Context, session_id: str, graph_input: Any, on_update: Callable[[str, Any], None]) -> dict[str, Any]:
    """Run (or resume, with `graph_input=None` or a `Command`) a session until it finishes or hits a gate.

    Returns:
        The final state values, with `__interrupt__` holding the pending gate payloads if it paused.
    """
    from agent.graph import builder

    url = ledger.db_url(ctx.db_url, ctx.workdir)
    cfg = thread_config(session_id, ctx.cluster_parallel_runs)
    reap_sandboxes(ctx)
    with checkpointer(url) as saver:
        graph = builder.compile(checkpointer=saver)
        for chunk in graph.stream(graph_input, cfg, context=ctx, stream_mode="updates", durability="sync"):
            for node, update in chunk.items():
                if node != "__metadata__":  # {"cached": True}: writes a resumed run restored, not a node
                    on_update(node, update)
        snapshot = graph.get_state(cfg)
        values = dict(snapshot.values)
        values["__interrupt__"] = [i.value for task in snapshot.tasks for i in task.interrupts]
        values["__next__"] = list(snapshot.next)
        return values


def reap_sandboxes(ctx: Context) -> None:
    """Remove sandbox containers and scratch folders left by dead processes (kill -9 skips their cleanup)."""
    from sandboxes.owners import reap_orphan_dirs

    try:
        dirs = reap_orphan_dirs()
    except OSError as exc:
        log.warning("could not look for orphaned sandbox scratch folders: %s", exc)
    else:
        if dirs:
            log.warning("removed %d sandbox scratch folder(s) left by a dead process", len(dirs))
    if ctx.sandbox != "docker":
        return
    from sandboxes.docker import engine_client, reap_orphans

    try:
        removed = reap_orphans(engine_client())
    except Exception as exc:  # no engine, engine error: the first sandboxed call reports it where it matters
        log.warning("could not look for orphaned sandbox containers: %s: %s", type(exc).__name__, exc)
        return
    if removed:
        log.warning("removed %d sandbox container(s) left by a dead controller", len(removed))


def context_to_json(ctx: Context) -> dict[str, Any]:
    """Settings as stored with the session, so `resume` rebuilds the same context."""
    return asdict(ctx)
