"""SQLAlchemy models of the campaign tables and the four memory stores (paper §3.4).

Tables: `sessions`; the version ledger (`versions`); `candidates`, `runs`, `backtests`; health reports
and their `findings`; evolvable `diagnostic_metrics`; case memory (`cases`); the skill library
(`skills`, `skill_uses`); the search trace (`search_trace`); human `gate_requests`; `llm_usage`.

Rules: queried attributes are columns, JSON only for free-form payloads; artefacts stay on disk and
rows hold their paths; closed value sets are CHECK-guarded strings (`store/types.py`); timestamps are
aware UTC. Schema changes only through Alembic (`migrations/`), never `create_all` outside tests of
the migrations themselves. This module must not open connections.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Float, ForeignKey, Integer, MetaData, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from store.types import (
    BackendName,
    CandidateStatus,
    CaseKind,
    Decision,
    DecisionOutcome,
    Factor,
    Gate,
    GateStatus,
    JSONPayload,
    Layer,
    OutcomeValue,
    PatchKind,
    PolicyKind,
    RunKind,
    RunStatus,
    SessionMode,
    SessionStatus,
    Severity,
    SkillOrigin,
    SkillResult,
    UTCDateTime,
    Verdict,
    enum_type,
    utcnow,
)

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ID = String(128)  # string primary keys: session slugs, candidate ids, run ids
NAME = String(255)  # branch names, model names, node/tool names


class Base(DeclarativeBase):
    """Declarative base on a metadata with a naming convention (stable constraint names for Alembic)."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _created() -> Mapped[dt.datetime]:
    return mapped_column(UTCDateTime(), default=utcnow)


def _session_fk() -> Mapped[str]:
    return mapped_column(ID, ForeignKey("sessions.id"), index=True)


class EvoSession(Base):
    """One autonomous campaign on one harness, with its budget and how much of it is spent."""

    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    created_at: Mapped[dt.datetime] = _created()
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)
    harness_path: Mapped[str] = mapped_column(Text)
    repo_path: Mapped[str] = mapped_column(Text)
    mode: Mapped[SessionMode] = mapped_column(enum_type(SessionMode, "mode"), default="evotrainer")
    policy: Mapped[PolicyKind] = mapped_column(enum_type(PolicyKind, "policy"), default="heuristic")
    llm_model: Mapped[str | None] = mapped_column(NAME)
    status: Mapped[SessionStatus] = mapped_column(enum_type(SessionStatus, "status"), default="running")
    status_reason: Mapped[str | None] = mapped_column(Text)  # why a session failed, shown by status
    max_iterations: Mapped[int] = mapped_column(Integer)
    max_train_steps: Mapped[int] = mapped_column(Integer)
    steps_used: Mapped[int] = mapped_column(Integer, default=0)
    wall_time_s: Mapped[float] = mapped_column(Float, default=0.0)
    main_branch: Mapped[str] = mapped_column(NAME)
    # the caller who created it on a shared LangGraph server (None: the owner's own process, the CLI)
    owner: Mapped[str | None] = mapped_column(NAME)


class Version(Base):
    """One entry of the version ledger: a commit on the session's main line and the decision behind it."""

    __tablename__ = "versions"
    __table_args__ = (UniqueConstraint("session_id", "index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[str] = _session_fk()
    index: Mapped[int] = mapped_column(Integer)  # v0, v1, ... within the session
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("versions.id"))
    branch: Mapped[str] = mapped_column(NAME)
    commit_sha: Mapped[str] = mapped_column(String(64))
    config_snapshot: Mapped[dict[str, Any]] = mapped_column(JSONPayload, default=dict)
    diff_stat_files: Mapped[int] = mapped_column(Integer, default=0)
    diff_stat_insertions: Mapped[int] = mapped_column(Integer, default=0)
    diff_stat_deletions: Mapped[int] = mapped_column(Integer, default=0)
    decision: Mapped[Decision | None] = mapped_column(enum_type(Decision, "decision"))
    outcome: Mapped[DecisionOutcome | None] = mapped_column(enum_type(DecisionOutcome, "outcome"))
    rationale: Mapped[str] = mapped_column(Text, default="")
    strict_score: Mapped[float | None] = mapped_column(Float)
    train_score: Mapped[float | None] = mapped_column(Float)
    # versions -> runs -> candidates -> versions is a cycle; this edge is added after both tables exist.
    run_id: Mapped[str | None] = mapped_column(ID, ForeignKey("runs.id", use_alter=True))
    created_at: Mapped[dt.datetime] = _created()


class Candidate(Base):
    """A branch `evo/<session>/v<i>.<k>-<slug>` = a version plus one declared intervention.

    `id` is globally unique (not only within a session); `store.repository.candidate_id` builds one.
    """

    __tablename__ = "candidates"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    session_id: Mapped[str] = _session_fk()
    parent_version_id: Mapped[int] = mapped_column(ForeignKey("versions.id"))
    iteration: Mapped[int] = mapped_column(Integer)
    slug: Mapped[str] = mapped_column(String(64))
    branch: Mapped[str] = mapped_column(NAME, unique=True)
    worktree_path: Mapped[str] = mapped_column(Text)
    hypothesis: Mapped[str] = mapped_column(Text)
    factor: Mapped[Factor] = mapped_column(enum_type(Factor, "factor"))
    factors_declared: Mapped[list[str]] = mapped_column(JSONPayload, default=list)
    justification: Mapped[str | None] = mapped_column(Text)
    success_criterion: Mapped[str] = mapped_column(Text)
    skill_id: Mapped[int | None] = mapped_column(ForeignKey("skills.id"))
    status: Mapped[CandidateStatus] = mapped_column(enum_type(CandidateStatus, "status"), default="proposed")
    refusal_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = _created()


class Run(Base):
    """One training job of a version or a candidate; its artefacts live in `artefact_dir`."""

    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    session_id: Mapped[str] = _session_fk()
    candidate_id: Mapped[str | None] = mapped_column(ForeignKey("candidates.id"), index=True)
    version_id: Mapped[int | None] = mapped_column(ForeignKey("versions.id"), index=True)
    backend: Mapped[BackendName] = mapped_column(enum_type(BackendName, "backend"))
    kind: Mapped[RunKind] = mapped_column(enum_type(RunKind, "kind"))
    seed: Mapped[int] = mapped_column(Integer, default=0)
    steps: Mapped[int] = mapped_column(Integer)
    artefact_dir: Mapped[str] = mapped_column(Text)
    status: Mapped[RunStatus] = mapped_column(enum_type(RunStatus, "status"), default="submitted")
    outcome: Mapped[OutcomeValue | None] = mapped_column(enum_type(OutcomeValue, "outcome"))
    strict_acc: Mapped[float | None] = mapped_column(Float)
    train_reward: Mapped[float | None] = mapped_column(Float)
    wall_time_s: Mapped[float | None] = mapped_column(Float)
    message: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[dt.datetime] = _created()
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())


class Backtest(Base):
    """A candidate's code replayed on cached rollouts of one run, inside a sandbox."""

    __tablename__ = "backtests"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    candidate_id: Mapped[str] = mapped_column(ForeignKey("candidates.id"), index=True)
    rollouts_run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    artefact_dir: Mapped[str] = mapped_column(Text)
    verdict: Mapped[Verdict] = mapped_column(enum_type(Verdict, "verdict"))
    outcome: Mapped[OutcomeValue] = mapped_column(enum_type(OutcomeValue, "outcome"))
    dead_group_ratio_before: Mapped[float | None] = mapped_column(Float)
    dead_group_ratio_after: Mapped[float | None] = mapped_column(Float)
    rank_violations_before: Mapped[int | None] = mapped_column(Integer)
    rank_violations_after: Mapped[int | None] = mapped_column(Integer)
    kept_ratio: Mapped[float | None] = mapped_column(Float)
    hack_max_score: Mapped[float | None] = mapped_column(Float)
    reasons: Mapped[list[str]] = mapped_column(JSONPayload, default=list)
    created_at: Mapped[dt.datetime] = _created()


class HealthReport(Base):
    """A health report of one run (JSON + text on disk at `path`), with severity counts."""

    __tablename__ = "health_reports"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[str] = _session_fk()
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    version_id: Mapped[int | None] = mapped_column(ForeignKey("versions.id"))
    path: Mapped[str] = mapped_column(Text)
    n_critical: Mapped[int] = mapped_column(Integer, default=0)
    n_warning: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[dt.datetime] = _created()

    findings: Mapped[list[Finding]] = relationship(
        back_populates="report", cascade="all, delete-orphan", order_by="Finding.id"
    )


class Finding(Base):
    """One alert of a health report (e.g. `reward_hacking`) with its value, threshold and evidence."""

    __tablename__ = "findings"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    report_id: Mapped[int] = mapped_column(ForeignKey("health_reports.id", ondelete="CASCADE"), index=True)
    alert_id: Mapped[str] = mapped_column(String(64), index=True)
    layer: Mapped[Layer] = mapped_column(enum_type(Layer, "layer"))
    severity: Mapped[Severity] = mapped_column(enum_type(Severity, "severity"))
    value: Mapped[float | None] = mapped_column(Float)
    threshold: Mapped[float | None] = mapped_column(Float)
    message: Mapped[str] = mapped_column(Text, default="")
    evidence: Mapped[dict[str, Any]] = mapped_column(JSONPayload, default=dict)

    report: Mapped[HealthReport] = relationship(back_populates="findings")


class DiagnosticMetric(Base):
    """An evolvable diagnostic added during a session, and its retrospective validation."""

    __tablename__ = "diagnostic_metrics"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[str] = _session_fk()
    name: Mapped[str] = mapped_column(String(128))
    source_path: Mapped[str] = mapped_column(Text)
    validated: Mapped[bool] = mapped_column(default=False)
    validation: Mapped[dict[str, Any]] = mapped_column(JSONPayload, default=dict)
    created_at: Mapped[dt.datetime] = _created()


class Case(Base):
    """Case memory: a recurring pattern or a piece of negative evidence, with its metric signature."""

    __tablename__ = "cases"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[str] = _session_fk()
    kind: Mapped[CaseKind] = mapped_column(enum_type(CaseKind, "kind"))
    domain: Mapped[str] = mapped_column(String(64), index=True)
    signature: Mapped[dict[str, Any]] = mapped_column(JSONPayload, default=dict)
    summary: Mapped[str] = mapped_column(Text)
    candidate_id: Mapped[str | None] = mapped_column(ForeignKey("candidates.id"))
    outcome: Mapped[DecisionOutcome | None] = mapped_column(enum_type(DecisionOutcome, "outcome"))
    # What was tried and on which symptom signature (exploration probes): case memory keeps the same
    # probe from being retried on the same symptoms.
    intervention: Mapped[str | None] = mapped_column(String(128), index=True)
    symptom_key: Mapped[str | None] = mapped_column(String(512))
    created_at: Mapped[dt.datetime] = _created()


class Skill(Base):
    """Skill library entry: trigger predicate over health metrics, patch, expected outcome, track record."""

    __tablename__ = "skills"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    domain: Mapped[str] = mapped_column(String(64), index=True)
    trigger: Mapped[str] = mapped_column(Text)
    factor: Mapped[Factor] = mapped_column(enum_type(Factor, "factor"))
    patch_kind: Mapped[PatchKind] = mapped_column(enum_type(PatchKind, "patch_kind"))
    patch: Mapped[str] = mapped_column(Text)
    params: Mapped[dict[str, Any]] = mapped_column(JSONPayload, default=dict)
    expected_outcome: Mapped[str] = mapped_column(Text)
    validation_rule: Mapped[str] = mapped_column(Text)
    applicability: Mapped[list[str]] = mapped_column(JSONPayload, default=list)
    provenance: Mapped[str] = mapped_column(Text, default="")
    wins: Mapped[int] = mapped_column(Integer, default=0)
    losses: Mapped[int] = mapped_column(Integer, default=0)
    uses: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[dt.datetime] = _created()
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)
    last_verified_session: Mapped[str | None] = mapped_column(ForeignKey("sessions.id"))
    # Where the skill came from: seeding refreshes only "seed" rows whose definition changed;
    # a "learned" skill names the merged candidate it was learned from.
    origin: Mapped[SkillOrigin] = mapped_column(enum_type(SkillOrigin, "origin"), default="user", server_default="user")
    # use_alter: candidates.skill_id points back at skills (the same cycle as versions/runs)
    source_candidate_id: Mapped[str | None] = mapped_column(ForeignKey("candidates.id", use_alter=True))


class SkillUse(Base):
    """One application of a skill in a session, with the metrics that matched its trigger."""

    __tablename__ = "skill_uses"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    skill_id: Mapped[int] = mapped_column(ForeignKey("skills.id"), index=True)
    session_id: Mapped[str] = _session_fk()
    candidate_id: Mapped[str | None] = mapped_column(ForeignKey("candidates.id"))
    matched_metrics: Mapped[dict[str, Any]] = mapped_column(JSONPayload, default=dict)
    result: Mapped[SkillResult] = mapped_column(enum_type(SkillResult, "result"), default="pending")
    created_at: Mapped[dt.datetime] = _created()


class SearchTrace(Base):
    """Search trace: what a node looked up through which tool, what came back, whether it was used."""

    __tablename__ = "search_trace"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[str] = _session_fk()
    node: Mapped[str] = mapped_column(String(64))
    tool: Mapped[str] = mapped_column(String(64))
    query: Mapped[str] = mapped_column(Text)
    result_summary: Mapped[str] = mapped_column(Text, default="")
    used: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[dt.datetime] = _created()


class GateRequest(Base):
    """A human gate (launch or promote) waiting for `evotrainer approve`, and its answer."""

    __tablename__ = "gate_requests"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[str] = _session_fk()
    gate: Mapped[Gate] = mapped_column(enum_type(Gate, "gate"))
    candidate_id: Mapped[str | None] = mapped_column(ForeignKey("candidates.id"))
    payload: Mapped[dict[str, Any]] = mapped_column(JSONPayload, default=dict)
    status: Mapped[GateStatus] = mapped_column(enum_type(GateStatus, "status"), default="pending")
    note: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = _created()
    answered_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())


class LLMUsage(Base):
    """Tokens and cost of one LLM call made by a node."""

    __tablename__ = "llm_usage"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[str] = _session_fk()
    node: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(NAME)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[dt.datetime] = _created()
