"""What a session records along the way: health reports, diagnostics, case memory, search trace, gates, LLM usage.

Query helpers over the store, each taking the SQLAlchemy `Session` explicitly (re-exported by
`store.repository`). They `flush()` so new rows have their ids and never commit (the caller's
`store.engine.session_scope` does). A missing row raises `store.rows.NotFoundError` naming it; a value
outside a closed set fails at flush (`LookupError` from the enum type) or at the database (CHECK
constraint). Cases are retrieved per domain, newest first; a human gate is answered once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NotRequired, TypedDict

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from store.models import Case, DiagnosticMetric, Finding, GateRequest, HealthReport, LLMUsage, SearchTrace
from store.rows import add, find, get
from store.types import CaseKind, DecisionOutcome, Gate, Layer, Severity, utcnow

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
    return add(db, report)


def health_reports(db: Session, session_id: str, run_id: str | None = None) -> list[HealthReport]:
    """Return the session's stored health reports (only `run_id`'s, when given), oldest first."""
    query = select(HealthReport).where(HealthReport.session_id == session_id)
    if run_id is not None:
        query = query.where(HealthReport.run_id == run_id)
    return list(db.scalars(query.order_by(HealthReport.id)))


def add_diagnostic_metric(
    db: Session, *, session_id: str, name: str, source_path: str, validation: Mapping[str, Any], validated: bool
) -> DiagnosticMetric:
    """Record an evolvable diagnostic and the result of validating it against past versions."""
    row = DiagnosticMetric(
        session_id=session_id, name=name, source_path=source_path, validated=validated, validation=dict(validation)
    )
    return add(db, row)


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
    return add(db, row)


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


def session_cases(db: Session, session_id: str) -> list[Case]:
    """Return the cases a session recorded, oldest first."""
    return list(db.scalars(select(Case).where(Case.session_id == session_id).order_by(Case.id)))


def case_of_candidate(db: Session, candidate_id: str) -> Case | None:
    """Return the case recorded about a candidate, if any."""
    return db.scalars(select(Case).where(Case.candidate_id == candidate_id).order_by(Case.id)).first()


def record_search(
    db: Session, *, session_id: str, node: str, tool: str, query: str, result_summary: str, used: bool = False
) -> SearchTrace:
    """Append to the search trace: what was looked up, what came back, whether it was used."""
    row = SearchTrace(
        session_id=session_id, node=node, tool=tool, query=query, result_summary=result_summary, used=used
    )
    return add(db, row)


def mark_searches_used(db: Session, trace_ids: Sequence[int]) -> None:
    """Mark search-trace rows as used (they informed a submitted candidate)."""
    if trace_ids:
        for row in db.scalars(select(SearchTrace).where(SearchTrace.id.in_(list(trace_ids)))):
            row.used = True
        db.flush()


def add_gate_request(
    db: Session, *, session_id: str, gate: Gate, payload: Mapping[str, Any], candidate_id: str | None = None
) -> GateRequest:
    """Open a pending human gate (launch or promote)."""
    row = GateRequest(session_id=session_id, gate=gate, payload=dict(payload), candidate_id=candidate_id)
    return add(db, row)


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


def find_gate(db: Session, gate_id: int) -> GateRequest | None:
    """Return the gate request, or None."""
    return find(db, GateRequest, gate_id)


def gate_requests(db: Session, session_id: str, gate: Gate) -> list[GateRequest]:
    """Return the session's requests of one gate (launch or promote), oldest first."""
    query = select(GateRequest).where(GateRequest.session_id == session_id, GateRequest.gate == gate)
    return list(db.scalars(query.order_by(GateRequest.id)))


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
    return add(db, row)


def session_llm_usage(db: Session, session_id: str) -> list[LLMUsage]:
    """Return the session's LLM calls, oldest first."""
    return list(db.scalars(select(LLMUsage).where(LLMUsage.session_id == session_id).order_by(LLMUsage.id)))


def llm_usage_per_node(db: Session, session_id: str) -> list[tuple[str, int, int, int, float]]:
    """(node, calls, prompt tokens, completion tokens, cost in USD) of the session's LLM calls, per node."""
    query = (
        select(
            LLMUsage.node,
            func.count(LLMUsage.id),
            func.coalesce(func.sum(LLMUsage.prompt_tokens), 0),
            func.coalesce(func.sum(LLMUsage.completion_tokens), 0),
            func.coalesce(func.sum(LLMUsage.cost_usd), 0.0),
        )
        .where(LLMUsage.session_id == session_id)
        .group_by(LLMUsage.node)
    )
    return [(str(node), int(n), int(p), int(c), float(cost or 0.0)) for node, n, p, c, cost in db.execute(query)]
