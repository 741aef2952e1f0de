"""The records the session report is made of: what `gather.py` reads and `html.py` renders.

Frozen dataclasses only; no I/O. A record that could not be filled carries a `note` saying why.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from agent.reporting.artefacts import ModelTrained, RunCurves, RunRollouts
from agent.reporting.summary import SessionSummary
from diagnostics.stats import PairedComparison


@dataclass(frozen=True, slots=True)
class VersionEntry:
    """One ledger row."""

    index: int
    parent_index: int | None
    branch: str
    commit: str
    decision: str | None
    outcome: str | None
    rationale: str
    strict_score: float | None
    train_score: float | None
    run_id: str | None
    diff_stat: tuple[int, int, int]
    lineage_steps: int  # training steps in this version's policy lineage (its run included)
    artefact_dir: str | None = None


@dataclass(frozen=True, slots=True)
class BacktestEntry:
    """The latest backtest of a candidate."""

    verdict: str
    outcome: str
    dead_group_ratio_before: float | None
    dead_group_ratio_after: float | None
    rank_violations_before: int | None
    rank_violations_after: int | None
    kept_ratio: float | None
    hack_max_score: float | None
    reasons: list[str]


@dataclass(frozen=True, slots=True)
class AlertAnswerEntry:
    """A critical alert of an iteration's incumbent report and what answered it: candidates, or why none."""

    iteration: int
    alert_id: str
    candidates: tuple[str, ...]  # candidate names (`CandidateEntry.name`)
    reason: str


@dataclass(frozen=True, slots=True)
class CandidateEntry:
    """A candidate branch with its decision, evidence and diff."""

    id: str
    name: str  # v<i>.<k>-<slug>: the branch without evo/<session>/, the run folder without <session>-
    iteration: int
    parent_index: int | None
    slug: str
    branch: str
    factor: str
    hypothesis: str
    success_criterion: str
    status: str
    skills: list[str]
    outcome: str | None
    rationale: str
    decision_note: str
    comparison: PairedComparison | None
    comparison_note: str
    backtest: BacktestEntry | None
    pilot_run_id: str | None
    diff: str
    diff_note: str
    became: int | None = None  # the version it was merged as


@dataclass(frozen=True, slots=True)
class AlertEntry:
    """One health finding, attributed to the run (and version, if any) it was written for."""

    run_label: str
    run_id: str
    version_index: int | None
    alert_id: str
    layer: str
    severity: str
    value: float | None
    threshold: float | None
    message: str


@dataclass(frozen=True, slots=True)
class VersionHealth:
    """One version's health row: how many checks ran and passed, and what fired."""

    index: int
    run_id: str
    source: str  # file | store | computed | missing
    n_checks: int | None  # None when only the store's fired findings are known
    n_ok: int | None
    alerts: list[AlertEntry]
    note: str
    agentic: dict[str, float] = field(default_factory=dict)  # headline agentic metrics; empty for single-turn runs


@dataclass(frozen=True, slots=True)
class SkillUseEntry:
    """One application of a skill in the session; `result` says whether it counted and why not."""

    skill: str
    candidate_id: str | None
    candidate_name: str
    result: str
    matched_metrics: dict[str, object]


@dataclass(frozen=True, slots=True)
class SkillEntry:
    """A skill the session created (its provenance names the session)."""

    name: str
    factor: str
    trigger: str
    expected_outcome: str
    wins: int
    losses: int
    provenance: str


@dataclass(frozen=True, slots=True)
class LLMUsageEntry:
    """LLM calls aggregated by node and model."""

    node: str
    model: str
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None  # None when no call of this group reported a cost


@dataclass(frozen=True, slots=True)
class SessionReport:
    """Everything the HTML report shows about one session."""

    session_id: str
    created_at: dt.datetime
    mode: str
    policy: str
    llm_model: str | None
    status: str
    harness_path: str
    repo_path: str
    max_iterations: int
    max_train_steps: int
    steps_used: int
    wall_time_s: float
    versions: list[VersionEntry]
    candidates: list[CandidateEntry]
    version_runs: list[RunCurves]
    pilot_runs: dict[int, list[RunCurves]]  # iteration -> control + candidate pilots (replicates included)
    alerts: list[AlertEntry]
    health: list[VersionHealth]
    rollouts: list[RunRollouts]  # the versions' runs, then each iteration's pilots
    skill_uses: list[SkillUseEntry]
    skills_created: list[SkillEntry]
    llm_usage: list[LLMUsageEntry]
    notes: list[str]
    summary: SessionSummary | None = None  # which version to use and why (agent/reporting/summary.py)
    final_checkpoint: str = ""
    alert_answers: list[AlertAnswerEntry] = field(default_factory=list)  # agent/policies/alert_aims.py
    models: list[ModelTrained] = field(default_factory=list)  # what the runs trained (their summary.json cards)
