"""Session lifecycle: create a session (idempotently), compile the graph with a durable checkpointer, run/resume.

The checkpointer shares the store's database (SQLite file or Postgres URL); Alembic ignores its tables
(`migrations/env.py`). A killed session continues with `resume`: the same graph is rebuilt on the same
checkpoint store and invoked with `None` (langgraph.md §6), or with the session's start input when the
kill came before the first checkpoint; idempotent nodes (the `setup` node included) do the rest.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from agent.adapters import ledger, session_lock
from agent.context import Context
from agent.launch.bootstrap import ensure_session, new_session_id

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

log = logging.getLogger(__name__)

# Graph steps per session: ~12 per iteration; the default (10007) would let a bug loop for hours.
RECURSION_LIMIT = 400
MAX_CONCURRENCY = 2  # parallel training/backtest branches: one per core


def start_session(ctx: Context, harness_src: Path, repo_dir: Path, session_id: str | None = None) -> tuple[str, Path]:
    """Check the inputs, then create the session's repository, main-line branch, store rows (see `ensure_session`).

    Returns:
        (session id, harness repo path) to pass as the graph input.
    """
    session_id = session_id or new_session_id()
    return session_id, ensure_session(ctx, session_id, harness_src, repo_dir)


__all__ = ["ensure_session", "new_session_id", "start_session"]


@contextmanager
def checkpointer(url: str) -> Iterator[Any]:
    """A LangGraph checkpointer on the store's database (SQLite file or Postgres).

    On Postgres its table set-up runs under the store's migration lock (`store.engine.migration_lock`).
    """
    from store.engine import migration_lock, sqlite_path

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
        # setup() creates tables, then inserts its migration rows: not safe against a second process doing
        # the same (UniqueViolation on checkpoint_migrations_pkey), so it runs under the store's lock.
        with migration_lock(url):
            pg_saver.setup()
        yield pg_saver


def thread_config(session_id: str, max_concurrency: int | None = None) -> RunnableConfig:
    """The LangGraph config of a session's thread (`max_concurrency`: parallel branches, default one per core)."""
    return {
        "configurable": {"thread_id": session_id},
        "recursion_limit": RECURSION_LIMIT,
        "max_concurrency": max_concurrency or MAX_CONCURRENCY,
    }


class Observer(Protocol):
    """What a caller of `run_graph` hears: the state it starts from, tasks starting and finishing, updates."""

    def started(self, values: dict[str, Any]) -> None:
        """The thread's saved values before anything runs (empty for a new session)."""

    def task(self, name: str, payload: Any, *, done: bool) -> None:
        """A node task started (`payload`: its input) or finished (`payload`: its result)."""

    def update(self, node: str, update: Any) -> None:
        """A node finished and wrote `update` to the state."""


def run_graph(
    ctx: Context, session_id: str, graph_input: Any, observer: Observer, start_input: Any = None
) -> dict[str, Any]:
    """Run (or resume, with `graph_input=None` or a `Command`) a session until it finishes or hits a gate.

    A resume of a thread that has no checkpoint yet (the controller was killed between creating the
    session and LangGraph's first checkpoint) runs `start_input` instead of `None`, which LangGraph would
    refuse with `EmptyInputError`: the `setup` node then finishes whatever set-up the kill interrupted.

    One process at a time drives a session: the session's lock (`agent.adapters.session_lock`) is held
    throughout, before anything (the repository's recovery included) is touched.

    Returns:
        The final state values, with `__interrupt__` holding the pending gate payloads if it paused.

    Raises:
        SessionBusyError: another live process is running this session.
    """
    from agent.graph import builder

    url = ledger.db_url(ctx.db_url, ctx.workdir)
    cfg = thread_config(session_id, ctx.cluster_parallel_runs)
    with session_lock.hold(ctx.session_dir(session_id), session_id), checkpointer(url) as saver:
        reap_sandboxes(ctx)
        graph = builder.compile(checkpointer=saver)
        before = graph.get_state(cfg)
        if graph_input is None and before.created_at is None:
            graph_input = start_input
        recover_repo(ctx, session_id, before.values.get("harness_dir") or _harness_dir(start_input))
        observer.started(dict(before.values))
        for item in graph.stream(graph_input, cfg, context=ctx, stream_mode=["updates", "tasks"], durability="sync"):
            mode, chunk = cast(tuple[str, dict[str, Any]], item)
            if mode == "tasks":
                observer.task(chunk["name"], chunk.get("result", chunk.get("input")), done="result" in chunk)
                continue
            for node, update in chunk.items():
                if node != "__metadata__":  # {"cached": True}: writes a resumed run restored, not a node
                    observer.update(node, update)
        snapshot = graph.get_state(cfg)
        values = dict(snapshot.values)
        values["__interrupt__"] = [i.value for task in snapshot.tasks for i in task.interrupts]
        values["__next__"] = list(snapshot.next)
        return values


def _harness_dir(start_input: Any) -> str:
    return str(start_input.get("harness_dir") or "") if isinstance(start_input, dict) else ""


def recover_repo(ctx: Context, session_id: str, harness_dir: str) -> None:
    """Remove the git lock files and half-made worktrees a killed controller left in the session repository."""
    from sandboxes.git_recovery import recover_after_kill
    from sandboxes.git_worktree import GitWorktreeError, is_repo_root

    if not harness_dir or not is_repo_root(Path(harness_dir)):
        return  # no repository yet: `setup` builds it whole (a staging folder renamed into place)
    try:
        done = recover_after_kill(Path(harness_dir), session_id, ctx.worktrees_root(session_id))
    except (OSError, GitWorktreeError) as exc:  # the first git call that needs the file reports it
        log.warning("could not look for stale git locks in %s: %s", harness_dir, exc)
        return
    for path in done.worktrees:
        log.warning("removed worktree %s: a killed `git worktree add` left it half checked out", path)
    if done.locks:
        log.warning(
            "removed %d git lock file(s) left by a killed git: %s", len(done.locks), ", ".join(map(str, done.locks))
        )


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
