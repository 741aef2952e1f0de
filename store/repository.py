"""Plain query helpers over the store, each taking the SQLAlchemy `Session` explicitly.

The controller's nodes call these inside `store.engine.session_scope(engine)`; helpers `flush()` so
new rows have their ids, and never commit (the scope does). A missing row raises `NotFoundError`
naming it; a value outside a closed set fails at flush (`LookupError` from the enum type) or at the
database (CHECK constraint). Skill CRUD and retrieval live in `skills/` (models are in `store.models`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NotRequired, TypedDict, TypeVar

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from store.models import (
    Backtest,
    Base,
    Candidate,
    Case,
    DiagnosticMetric,
    EvoSession,
    Finding,
    GateRequest,
    HealthReport,
    LLMUsage,
    Run,
    SearchTrace,
    Version,
)
from store.types import (
    BackendName,
    CandidateStatus,
    CaseKind,
    Decision,
    DecisionOutcome,
    Factor,
    Gate,
    Layer,
    OutcomeValue,
    PolicyKind,
    RunKind,
    RunStatus,
    SessionMode,
    SessionStatus,
    Severity,
    utcnow,
)

RowT = TypeVar("RowT", bound=Base)


class NotFoundError(LookupError):
    """A row the caller named does not exist."""


def get(db: Session, model: type[RowT], key: Any) -> RowT:
    """Return the row of `model` with primary key `key`.

    Raises:
        NotFoundError: no such row.
    """
    row = db.get(model, key)
    if row is None:
        raise NotFoundError(f"no {model.__tablename__} row with id {key!r}")
    return row


def _add(db: Session, row: RowT) -> RowT:
    db.add(row)
    db.flush()
    return row


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
) -> EvoSession:
    """Insert a new running session with its budget."""
    if policy == "llm" and not llm_model:
        raise ValueError("policy 'llm' needs llm_model (pass --llm MODEL)")
    return _add(
        db,
        EvoSession(
            id=session_id,
            harness_path=harness_path,
            repo_path=repo_path,
            mode=mode,
            policy=policy,
            llm_model=llm_model,
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
    return _add(
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
    return _add(
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
    return _add(
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
    return _add(db, Backtest(**fields))


# --- health reports and diagnostics -----------------------------------------------------------------


class FindingIn(TypedDict):
    """One finding to store with its report (the shape of a diagnostics finding)."""

    alert_id: str
    layer: Layer
    severity: Severity
    message: str
    value: NotRequired[float | None]
    threshold: NotRequired[float | None]
    evidence: NotRequired[dict[str, Any]]


def add_health_report(
    db: Session,
    *,
    session_id: str,
    run_id: str,
    path: str,
    findings: Sequence[FindingIn],
    version_id: int | None = None,
) -> HealthReport:
    """Insert a health report with its findings; severity counts are derived from the findings."""
    report = HealthReport(
        session_id=session_id,
        run_id=run_id,
        version_id=version_id,
        path=path,
        n_critical=sum(f["severity"] == "critical" for f in findings),
        n_warning=sum(f["severity"] == "warning" for f in findings),
        findings=[
            Finding(
                alert_id=f["alert_id"],
                layer=f["layer"],
                severity=f["severity"],
                message=f["message"],
                value=f.get("value"),
                threshold=f.get("threshold"),
                evidence=dict(f.get("evidence") or {}),
            )
            for f in findings
        ],
    )
    return _add(db, report)


def add_diagnostic_metric(
    db: Session, *, session_id: str, name: str, source_path: str, validation: Mapping[str, Any], validated: bool
) -> DiagnosticMetric:
    """Record an evolvable diagnostic and the result of validating it against past versions."""
    row = DiagnosticMetric(
        session_id=session_id, name=name, source_path=source_path, validated=validated, validation=dict(validation)
    )
    return _add(db, row)


# --- case memory, search trace, gates, LLM usage ------------------------------------------------------


def add_case(
    db: Session,
    *,
    session_id: str,
    kind: CaseKind,
    domain: str,
    summary: str,
    signature: Mapping[str, Any],
    candidate_id: str | None = None,
    outcome: DecisionOutcome | None = None,
    intervention: str | None = None,
    symptom_key: str | None = None,
) -> Case:
    """Record a pattern or a piece of negative evidence with its metric signature.

    ``intervention`` names what was tried (an exploration probe's id, e.g. ``trainer:lr:up:m0``) and
    ``symptom_key`` the symptom signature it was tried on, so it is not retried blindly (`tried_interventions`).
    """
    row = Case(
        session_id=session_id,
        kind=kind,
        domain=domain,
        summary=summary,
        signature=dict(signature),
        candidate_id=candidate_id,
        outcome=outcome,
        intervention=intervention,
        symptom_key=symptom_key,
    )
    return _add(db, row)


def tried_interventions(db: Session, domain: str) -> list[tuple[str, str, DecisionOutcome | None]]:
    """(intervention, symptom key, outcome) of a domain's negative evidence that names what was tried, oldest first."""
    query = (
        select(Case.intervention, Case.symptom_key, Case.outcome)
        .where(Case.domain == domain, Case.kind == "negative_evidence", Case.intervention.is_not(None))
        .order_by(Case.created_at, Case.id)
    )
    return [(str(i), str(k or ""), o) for i, k, o in db.execute(query)]


def cases_for_domain(db: Session, domain: str, kind: CaseKind | None = None) -> list[Case]:
    """Return a domain's cases, newest first (retrieval is domain-internal first; paper §3.4)."""
    query = select(Case).where(Case.domain == domain)
    if kind is not None:
        query = query.where(Case.kind == kind)
    return list(db.scalars(query.order_by(Case.created_at.desc(), Case.id.desc())))


def record_search(
    db: Session, *, session_id: str, node: str, tool: str, query: str, result_summary: str, used: bool = False
) -> SearchTrace:
    """Append to the search trace: what was looked up, what came back, whether it was used."""
    row = SearchTrace(
        session_id=session_id, node=node, tool=tool, query=query, result_summary=result_summary, used=used
    )
    return _add(db, row)


def add_gate_request(
    db: Session, *, session_id: str, gate: Gate, payload: Mapping[str, Any], candidate_id: str | None = None
) -> GateRequest:
    """Open a pending human gate (launch or promote)."""
    row = GateRequest(session_id=session_id, gate=gate, payload=dict(payload), candidate_id=candidate_id)
    return _add(db, row)


def answer_gate(db: Session, gate_id: int, *, approved: bool, note: str | None = None) -> GateRequest:
    """Approve or reject a pending gate.

    Raises:
        NotFoundError: no such gate request.
        ValueError: the gate was already answered.
    """
    row = get(db, GateRequest, gate_id)
    if row.status != "pending":
        raise ValueError(f"gate request {gate_id} was already answered ({row.status} at {row.answered_at})")
    row.status = "approved" if approved else "rejected"
    row.note, row.answered_at = note, utcnow()
    db.flush()
    return row


def pending_gate(db: Session, session_id: str) -> GateRequest | None:
    """Return the session's oldest unanswered gate request, if any."""
    query = select(GateRequest).where(GateRequest.session_id == session_id, GateRequest.status == "pending")
    return db.scalars(query.order_by(GateRequest.created_at, GateRequest.id).limit(1)).first()


def add_llm_usage(
    db: Session,
    *,
    session_id: str,
    node: str,
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
    cost_usd: float | None = None,
) -> LLMUsage:
    """Record the tokens (and cost, where known) of one LLM call."""
    row = LLMUsage(
        session_id=session_id,
        node=node,
        model=model,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cost_usd=cost_usd,
    )
    return _add(db, row)
