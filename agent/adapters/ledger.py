"""The controller's adapter to the SQL store: idempotent writes for nodes that may re-run after a crash.

Nodes call these functions and the query helpers of `store.repository`, never SQLAlchemy directly (the
layering test holds it: no SQL is built in agent/). Every write is keyed so a re-run finds the row it
wrote before instead of inserting a second one (runs and candidates by id, versions by run id, reports
by run id, cases by candidate id).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from store import repository
from store.engine import make_engine, resolve_db_url, session_scope

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlalchemy.orm import Session

    from agent.context import Context
    from store import models


@functools.cache
def engine_for(url: str) -> Engine:
    """One engine per URL per process."""
    return make_engine(url)


def db_url(explicit: str, workdir: str) -> str:
    """Resolve the store URL from the context (explicit value > EVOTRAINER_DB > default SQLite)."""
    return resolve_db_url(explicit or None, Path(workdir).resolve())


def store_url(ctx: Context) -> str:
    """The store URL of a session's settings."""
    return db_url(ctx.db_url, ctx.workdir)


@contextmanager
def db(url: str) -> Iterator[Session]:
    """A transaction on the store (commit on success, rollback on error)."""
    with session_scope(engine_for(url)) as session:
        yield session


def ensure_run(session: Session, *, run_id: str, **fields: Any) -> models.Run:
    """Register a run unless a row with this id exists."""
    row = repository.find_run(session, run_id)
    return row if row is not None else repository.add_run(session, run_id=run_id, **fields)


def finish_run(session: Session, run_id: str, **fields: Any) -> None:
    """Record a run's outcome (idempotent: a finished run is left as it is)."""
    row = repository.find_run(session, run_id)
    if row is not None and row.status != "finished":
        repository.finish_run(session, run_id, **fields)


def ensure_candidate(session: Session, *, candidate_id: str, **fields: Any) -> models.Candidate:
    """Insert a candidate unless it exists."""
    row = repository.find_candidate(session, candidate_id)
    return row if row is not None else repository.add_candidate(session, candidate_id=candidate_id, **fields)


def ensure_version(session: Session, *, session_id: str, run_id: str, **fields: Any) -> models.Version:
    """Append a version to the ledger unless the run's version is already there."""
    row = repository.version_for_run(session, session_id, run_id)
    return row if row is not None else repository.add_version(session, session_id=session_id, run_id=run_id, **fields)


def ensure_health_report(
    session: Session, *, session_id: str, run_id: str, path: str, findings: Sequence[Mapping[str, Any]]
) -> None:
    """Store a health report with its findings unless one exists for this run."""
    if not repository.health_reports(session, session_id, run_id):
        repository.add_health_report(
            session,
            session_id=session_id,
            run_id=run_id,
            path=path,
            findings=list(findings),  # type: ignore[arg-type]
        )


def ensure_case(session: Session, *, session_id: str, candidate_id: str | None, **fields: Any) -> None:
    """Record a case (pattern or negative evidence) once per candidate."""
    if candidate_id is not None and repository.case_of_candidate(session, candidate_id) is not None:
        return
    repository.add_case(session, session_id=session_id, candidate_id=candidate_id, **fields)
