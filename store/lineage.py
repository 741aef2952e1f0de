"""Sessions and their version ledger, and the candidates, runs and backtests behind each version.

Query helpers over the store, each taking the SQLAlchemy `Session` explicitly (re-exported by
`store.repository`). They `flush()` so new rows have their ids and never commit (the caller's
`store.engine.session_scope` does). A missing row raises `store.rows.NotFoundError` naming it; a value
outside a closed set fails at flush (`LookupError` from the enum type) or at the database (CHECK
constraint); a request the ledger cannot hold (e.g. a refusal without a reason, a bundle without a
justification, a run of both a version and a candidate, a negative budget spend) raises `ValueError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from store.models import Backtest, Candidate, EvoSession, Run, Version
from store.rows import add, find, get
from store.types import (
    BackendName,
    CandidateStatus,
    Decision,
    DecisionOutcome,
    Factor,
    OutcomeValue,
    PolicyKind,
    RunKind,
    RunStatus,
    SessionMode,
    SessionStatus,
    utcnow,
)

# --- sessions and the version ledger ---------------------------------------------------------------


def create_session(
    db: Session,
    *,
    session_id: str,
    harness_path: str,
    repo_path: str,
    max_iterations: int,
    max_train_steps: int,
    main_branch: str,
    mode: SessionMode = "evotrainer",
    policy: PolicyKind = "heuristic",
    llm_model: str | None = None,
    owner: str | None = None,
) -> EvoSession:
    """Insert a new running session with its budget (`owner`: its caller on a shared server)."""
    if policy == "llm" and not llm_model:
        raise ValueError("policy 'llm' needs llm_model (pass --llm MODEL)")
    return add(
        db,
        EvoSession(
            id=session_id,
            harness_path=harness_path,
            repo_path=repo_path,
            mode=mode,
            policy=policy,
            llm_model=llm_model,
            owner=owner,
            max_iterations=max_iterations,
            max_train_steps=max_train_steps,
            main_branch=main_branch,
        ),
    )


def set_session_status(db: Session, session_id: str, status: SessionStatus, reason: str | None = None) -> EvoSession:
    """Set a session's status (running / finished / failed / interrupted) and, when given, the reason."""
    row = get(db, EvoSession, session_id)
    row.status = status
    if reason is not None:
        row.status_reason = reason
    db.flush()
    return row


def spend_budget(db: Session, session_id: str, *, steps: int, wall_time_s: float) -> EvoSession:
    """Add training steps and wall time to what the session has used."""
    if steps < 0 or wall_time_s < 0:
        raise ValueError(f"budget spend must be non-negative (steps={steps}, wall_time_s={wall_time_s})")
    row = get(db, EvoSession, session_id)
    row.steps_used += steps
    row.wall_time_s += wall_time_s
    db.flush()
    return row


def session_row(db: Session, session_id: str) -> EvoSession:
    """Return the session's row.

    Raises:
        NotFoundError: no such session.
    """
    return get(db, EvoSession, session_id)


def find_session(db: Session, session_id: str) -> EvoSession | None:
    """Return the session's row, or None."""
    return find(db, EvoSession, session_id)


def session_repo_path(db: Session, session_id: str) -> str | None:
    """The repository of a session (two columns only: readable on a store that still needs a migration)."""
    return db.execute(select(EvoSession.repo_path).where(EvoSession.id == session_id)).scalar()


def session_access(db: Session, session_id: str) -> tuple[str, str | None] | None:
    """(repository, owner) of a session, or None: what decides who may act on it and where."""
    row = db.execute(select(EvoSession.repo_path, EvoSession.owner).where(EvoSession.id == session_id)).first()
    return None if row is None else (row[0], row[1])


def set_session_progress(db: Session, session_id: str, *, steps_used: int, wall_time_s: float) -> None:
    """Write a session's absolute budget use (idempotent, unlike `spend_budget`); no-op for an unknown session."""
    row = find(db, EvoSession, session_id)
    if row is not None:
        row.steps_used, row.wall_time_s = steps_used, wall_time_s
        db.flush()


def status_reasons(db: Session) -> dict[str, str]:
    """Why each session that recorded a reason stopped (failed, stopped, ...), by session id."""
    rows = db.execute(select(EvoSession.id, EvoSession.status_reason).where(EvoSession.status_reason.is_not(None)))
    return {sid: reason for sid, reason in rows if reason}


def add_version(
    db: Session,
    *,
    session_id: str,
    branch: str,
    commit_sha: str,
    parent_id: int | None = None,
    config_snapshot: Mapping[str, Any] | None = None,
    diff_stat: tuple[int, int, int] = (0, 0, 0),
    run_id: str | None = None,
    rationale: str = "",
) -> Version:
    """Append a version to the session's ledger with the next index (v0 first).

    Args:
        diff_stat: (files changed, insertions, deletions) against the parent version.
    """
    last = db.scalar(select(func.max(Version.index)).where(Version.session_id == session_id))
    files, insertions, deletions = diff_stat
    return add(
        db,
        Version(
            session_id=session_id,
            index=0 if last is None else last + 1,
            parent_id=parent_id,
            branch=branch,
            commit_sha=commit_sha,
            config_snapshot=dict(config_snapshot or {}),
            diff_stat_files=files,
            diff_stat_insertions=insertions,
            diff_stat_deletions=deletions,
            run_id=run_id,
            rationale=rationale,
        ),
    )


def record_decision(
    db: Session,
    version_id: int,
    *,
    decision: Decision,
    outcome: DecisionOutcome,
    rationale: str,
    strict_score: float | None = None,
    train_score: float | None = None,
) -> Version:
    """Write the decision about a version, its outcome class, the evidence summary and its scores."""
    row = get(db, Version, version_id)
    row.decision, row.outcome, row.rationale = decision, outcome, rationale
    row.strict_score, row.train_score = strict_score, train_score
    db.flush()
    return row


def session_ledger(db: Session, session_id: str) -> list[Version]:
    """Return the session's versions in ledger order (v0, v1, ...)."""
    return list(db.scalars(select(Version).where(Version.session_id == session_id).order_by(Version.index)))


def version_for_run(db: Session, session_id: str, run_id: str) -> Version | None:
    """The ledger row of the version trained by `run_id`, if recorded."""
    query = select(Version).where(Version.session_id == session_id, Version.run_id == run_id)
    return db.scalars(query).first()


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One line of `evotrainer status`."""

    id: str
    created_at: datetime
    mode: str
    status: str
    n_versions: int
    best_strict_score: float | None


def list_sessions(db: Session) -> list[SessionSummary]:
    """Summarise every session, newest first: version count and best strict score."""
    stats = (
        select(
            Version.session_id,
            func.count(Version.id).label("n"),
            func.max(Version.strict_score).label("best"),
        )
        .group_by(Version.session_id)
        .subquery()
    )
    query = (
        select(EvoSession, stats.c.n, stats.c.best)
        .outerjoin(stats, stats.c.session_id == EvoSession.id)
        .order_by(EvoSession.created_at.desc(), EvoSession.id)
    )
    return [
        SessionSummary(s.id, s.created_at, s.mode, s.status, int(n or 0), best)
        for s, n, best in db.execute(query).all()
    ]


# --- candidates, runs, backtests -------------------------------------------------------------------


def candidate_id(session_id: str, version_index: int, k: int, slug: str) -> str:
    """Return the globally unique candidate id `<session>-v<i>.<k>-<slug>` (e.g. `s1-v1.2-strict-extraction`)."""
    return f"{session_id}-v{version_index}.{k}-{slug}"


def add_candidate(
    db: Session,
    *,
    candidate_id: str,
    session_id: str,
    parent_version_id: int,
    iteration: int,
    slug: str,
    branch: str,
    worktree_path: str,
    hypothesis: str,
    factor: Factor,
    success_criterion: str,
    factors_declared: Sequence[Factor] | None = None,
    justification: str | None = None,
    skill_id: int | None = None,
) -> Candidate:
    """Insert a proposed candidate: one factor, or a declared and justified bundle.

    Raises:
        ValueError: the bundle does not include `factor`, or declares several factors without a justification.
    """
    declared = list(factors_declared) if factors_declared else [factor]
    if factor not in declared:
        raise ValueError(f"candidate {candidate_id}: factor {factor!r} missing from factors_declared {declared}")
    if len(set(declared)) > 1 and not (justification or "").strip():
        raise ValueError(f"candidate {candidate_id}: bundles {declared} need a written justification")
    return add(
        db,
        Candidate(
            id=candidate_id,
            session_id=session_id,
            parent_version_id=parent_version_id,
            iteration=iteration,
            slug=slug,
            branch=branch,
            worktree_path=worktree_path,
            hypothesis=hypothesis,
            factor=factor,
            factors_declared=declared,
            justification=justification,
            success_criterion=success_criterion,
            skill_id=skill_id,
        ),
    )


def update_candidate_status(
    db: Session, candidate_id: str, status: CandidateStatus, *, refusal_reason: str | None = None
) -> Candidate:
    """Move a candidate to `status`; a refusal must say why."""
    if status == "refused" and not refusal_reason:
        raise ValueError(f"candidate {candidate_id}: status 'refused' needs a refusal_reason")
    row = get(db, Candidate, candidate_id)
    row.status = status
    if refusal_reason is not None:
        row.refusal_reason = refusal_reason
    db.flush()
    return row


def find_candidate(db: Session, candidate_id: str) -> Candidate | None:
    """Return the candidate's row, or None."""
    return find(db, Candidate, candidate_id)


def session_candidates(db: Session, session_id: str) -> list[Candidate]:
    """Return the session's candidates by iteration, then creation."""
    query = select(Candidate).where(Candidate.session_id == session_id)
    return list(db.scalars(query.order_by(Candidate.iteration, Candidate.created_at, Candidate.id)))


def add_run(
    db: Session,
    *,
    run_id: str,
    session_id: str,
    backend: BackendName,
    kind: RunKind,
    steps: int,
    artefact_dir: str,
    seed: int = 0,
    candidate_id: str | None = None,
    version_id: int | None = None,
) -> Run:
    """Register a submitted run of a version or a candidate (exactly one of them, or neither for imports)."""
    if candidate_id is not None and version_id is not None:
        raise ValueError(f"run {run_id}: give candidate_id or version_id, not both")
    return add(
        db,
        Run(
            id=run_id,
            session_id=session_id,
            candidate_id=candidate_id,
            version_id=version_id,
            backend=backend,
            kind=kind,
            seed=seed,
            steps=steps,
            artefact_dir=artefact_dir,
        ),
    )


def find_run(db: Session, run_id: str) -> Run | None:
    """Return the run's row, or None."""
    return find(db, Run, run_id)


def session_runs(db: Session, session_id: str) -> list[Run]:
    """Return every run of the session (versions' runs, pilots, controls), in id order."""
    return list(db.scalars(select(Run).where(Run.session_id == session_id).order_by(Run.id)))


def set_run_status(db: Session, run_id: str, status: RunStatus) -> Run:
    """Record that a run is running or lost (use `finish_run` for finished runs)."""
    if status == "finished":
        raise ValueError(f"run {run_id}: use finish_run() to record a finished run and its outcome")
    row = get(db, Run, run_id)
    row.status = status
    db.flush()
    return row


def finish_run(
    db: Session,
    run_id: str,
    *,
    outcome: OutcomeValue,
    strict_acc: float | None = None,
    train_reward: float | None = None,
    wall_time_s: float | None = None,
    message: str = "",
) -> Run:
    """Record a finished run: its outcome class and summary numbers (never a fake score on failure)."""
    row = get(db, Run, run_id)
    row.status, row.outcome, row.message = "finished", outcome, message
    row.strict_acc, row.train_reward, row.wall_time_s = strict_acc, train_reward, wall_time_s
    row.finished_at = utcnow()
    db.flush()
    return row


def add_backtest(db: Session, **fields: Any) -> Backtest:
    """Insert a backtest row; `fields` are `Backtest` columns (candidate_id, rollouts_run_id, verdict, ...)."""
    return add(db, Backtest(**fields))


def latest_backtest(db: Session, candidate_id: str) -> Backtest | None:
    """Return the candidate's newest backtest, or None."""
    query = select(Backtest).where(Backtest.candidate_id == candidate_id).order_by(Backtest.id.desc()).limit(1)
    return db.scalars(query).first()
