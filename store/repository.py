"""The store's query helpers, each taking the SQLAlchemy `Session` explicitly: the import surface.

The controller's nodes call these inside `store.engine.session_scope(engine)`; helpers `flush()` so
new rows have their ids, and never commit (the scope does). A missing row raises `NotFoundError`
naming it; a value outside a closed set fails at flush (`LookupError` from the enum type) or at the
database (CHECK constraint). Skill CRUD and retrieval live in `skills/` (models are in `store.models`).

Callers import from here (`from store import repository`); the helpers live by concern in
`store.rows` (`get`, `NotFoundError`), `store.lineage` (sessions, the version ledger, candidates, runs,
backtests) and `store.records` (health reports, diagnostics, case memory, search trace, gates, LLM usage).
"""

from __future__ import annotations

from store.lineage import (
    SessionSummary,
    add_backtest,
    add_candidate,
    add_run,
    add_version,
    candidate_id,
    create_session,
    finish_run,
    list_sessions,
    record_decision,
    session_candidates,
    session_ledger,
    set_run_status,
    set_session_status,
    spend_budget,
    update_candidate_status,
)
from store.records import (
    FindingIn,
    add_case,
    add_diagnostic_metric,
    add_gate_request,
    add_health_report,
    add_llm_usage,
    answer_gate,
    cases_for_domain,
    pending_gate,
    record_search,
    tried_interventions,
)
from store.rows import NotFoundError, RowT, get

__all__ = [
    "FindingIn",
    "NotFoundError",
    "RowT",
    "SessionSummary",
    "add_backtest",
    "add_candidate",
    "add_case",
    "add_diagnostic_metric",
    "add_gate_request",
    "add_health_report",
    "add_llm_usage",
    "add_run",
    "add_version",
    "answer_gate",
    "candidate_id",
    "cases_for_domain",
    "create_session",
    "finish_run",
    "get",
    "list_sessions",
    "pending_gate",
    "record_decision",
    "record_search",
    "session_candidates",
    "session_ledger",
    "set_run_status",
    "set_session_status",
    "spend_budget",
    "tried_interventions",
    "update_candidate_status",
]
