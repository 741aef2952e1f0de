"""Graph state of a campaign session: JSON-only values so checkpoints round-trip exactly.

Every value is a plain dict/list/str/number (LangGraph turns tuples into lists and warns on custom
classes, langgraph.md §8), typed here with TypedDicts from `typing_extensions`: on Python < 3.12 the
LangGraph server builds JSON schemas (Studio's input form, `get_schemas`) only from those. Fan-out
results (`backtests`, `pilots`) are appended by parallel branches through the `operator.add` reducer and
carry their `iteration`, so nodes read only the current iteration's entries.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from typing_extensions import NotRequired, TypedDict  # noqa: UP035 - the server's schemas need these

from diagnostics.stats import ComparisonJSON


class VersionInfo(TypedDict):
    """The incumbent version: a commit on the session main line with its trained policy."""

    index: int
    branch: str
    commit: str
    run_id: str
    run_dir: str
    checkpoint: str
    strict_acc: float
    train_reward: float
    steps: int  # training steps in this policy's lineage
    start_checkpoint: NotRequired[str]  # the policy this version's run started from ("" unknown): a rollback target
    start_steps: NotRequired[int]  # lineage steps of that starting policy


class CandidateInfo(TypedDict):
    """One proposed intervention (a branch + worktree)."""

    id: str
    iteration: int
    slug: str
    branch: str
    worktree: str
    commit: str
    hypothesis: str
    factor: str
    factors: list[str]  # declared factors (more than one only for a justified bundle)
    justification: str
    success_criterion: str
    skill: str  # comma-separated skill names applied
    status: str  # proposed | refused | backtest_failed | trained | kept | pruned | merged
    reason: str
    # an exploration probe (agent/policies/explore.py): {probe_id, symptom_key, symptoms, learned_trigger, spec}
    probe: NotRequired[dict[str, Any]]
    learned_skill: NotRequired[str]  # the skill learned when this candidate merged (skills/learned.py)
    # settings the candidate only moves back into their documented range (agent.decisions.knobs.range_restoration),
    # or the probe of a reward defect named in its code whose backtest must show it fall (symptoms.PROVEN_REPAIRS)
    restores_range: NotRequired[list[str]]
    # settings the candidate changes that act only from the starting model (agent.decisions.knobs.start_changes):
    # its pilots restart from there instead of continuing the incumbent
    restarts: NotRequired[list[str]]
    # the critical alerts of the incumbent's report this candidate is aimed at (agent/policies/alert_aims.py)
    aims: NotRequired[list[str]]
    # it repairs a reward defect its code names (symptoms.PROVEN_REPAIRS): after a run that learned to exploit
    # the reward, its pilots start from before that run (agent/decisions/rollback.py)
    repairs_reward: NotRequired[bool]
    # the content key of its edit against the incumbent (`sandboxes.git_worktree.change_key`): one pilot per key
    content_key: NotRequired[str]
    # the incumbent commit its edit is against, and the symptom signature of the report it was proposed on
    # (`explore.symptom_key`): the evidence an earlier try of the same edit must share to rule it out
    # (agent/decisions/same_edit.py)
    base_commit: NotRequired[str]
    evidence_key: NotRequired[str]
    # every proposer of this edit in its iteration, itself first (the others' duplicates were refused naming it)
    proposers: NotRequired[list[str]]


class BacktestInfo(TypedDict):
    """Result of one candidate's backtest on the incumbent's cached rollouts."""

    iteration: int
    candidate_id: str
    verdict: str  # pass | fail | inconclusive
    outcome: str
    reasons: list[str]
    report_path: str


class PilotInfo(TypedDict):
    """One pilot run: a candidate, or the control (incumbent harness, same steps and seed)."""

    iteration: int
    candidate_id: str  # "control" for the incumbent's own continuation
    run_id: str
    run_dir: str
    outcome: str
    strict_acc: float
    train_reward: float
    checkpoint: str
    steps: int
    message: str
    replicate: NotRequired[int]  # 0 (or absent): the iteration's pilot; r > 0: a confirmation on a fresh seed
    init_checkpoint: NotRequired[str]  # the policy the pilot started from
    start_steps: NotRequired[int]  # lineage steps of that policy (less than the incumbent's after a rollback)


class EvaluationInfo(TypedDict):
    """One candidate pilot compared with the control (`agent.decisions.evidence.Evaluation.to_state`)."""

    iteration: int
    candidate_id: str
    run_ok: bool
    message: str
    comparison: ComparisonJSON | None  # diagnostics.stats.PairedComparison.to_json()
    outcome_class: str  # improvement | regression | mixed | insufficient
    train_reward: float
    control_train_reward: float
    new_alerts: list[str]
    restoration: NotRequired[bool]


class DecisionInfo(TypedDict):
    """Keep / prune / revert / merge for one candidate, with its outcome class and evidence
    (`agent.decisions.evidence.decide`)."""

    candidate_id: str
    decision: str  # keep | prune | revert | merge
    outcome: str  # improvement | regression | mixed | insufficient
    delta: float
    ci_low: float
    ci_high: float
    train_gain: float
    rationale: str


class ReplicationInfo(TypedDict, total=False):
    """The merge candidate to re-train on fresh seeds before it may merge (empty: none this iteration)."""

    iteration: int
    candidate_id: str
    replicates: int


class RollbackInfo(TypedDict, total=False):
    """Where candidates restart when the incumbent's own run damaged its policy (empty: from the incumbent)."""

    checkpoint: str
    steps: int
    reason: str
    repairs_only: bool  # only candidates that repair the exploited reward restart (`CandidateInfo.repairs_reward`)


class GateAnswer(TypedDict, total=False):
    """A human's answer at a gate: the launch gate lists the approved candidate ids, the promote gate a yes/no."""

    gate: str  # launch | promote
    iteration: int
    approved: list[str] | bool
    note: str


class IterationSummary(TypedDict):
    """One line of the session's history, written by `record` at the end of each iteration."""

    iteration: int
    version: int
    merged: str | None
    strict_acc: float
    candidates: int
    decisions: dict[str, str]  # candidate id -> keep | prune | revert | merge


class InputState(TypedDict, total=False):
    """What a caller passes to start (or continue) a session; settings go in the run's `context`.

    A new session needs only `harness`: the `setup` node then creates the session's git repository,
    migrates the store and records the session (docs/studio.md). `session_id` and `harness_dir` name a
    session that already exists (the CLI creates its own before the graph starts).
    """

    harness: str  # the harness folder to start from (holds evotrainer.yaml)
    repo: str  # the git repository the session works in (default: derived from the harness, see agent/setup.py)
    session_id: str  # default: the thread id (Studio/SDK) or a new id
    harness_dir: str  # the session's repository root (set by `setup`; every later node works in it)


class State(InputState, total=False):
    """The whole evolving state of a session."""

    iteration: int
    version: VersionInfo
    report: dict[str, Any]  # HealthReport.to_json() of the incumbent's latest run
    gap: bool
    rollback: RollbackInfo
    candidates: list[CandidateInfo]
    backtests: Annotated[list[BacktestInfo], operator.add]
    pilots: Annotated[list[PilotInfo], operator.add]
    evaluations: Annotated[list[EvaluationInfo], operator.add]
    decisions: list[DecisionInfo]
    replication: ReplicationInfo
    gate_answer: GateAnswer
    steps_used: int
    started_at: float
    v0_strict: float
    failures_in_row: int
    history: Annotated[list[IterationSummary], operator.add]
    status: str  # running | finished
    stop_reason: str
    llm_stop_reason: str  # set by the llm policy when the session's LLM token/cost budget is spent
