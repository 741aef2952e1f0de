"""Gather one session's evidence from the store, the run artefact folders and the session's git repo.

Plain functions returning frozen records; the HTML assembly (`agent/reporting/html.py`) only reads
these. Nothing here raises on a missing artefact (a deleted run folder, a pruned branch, a repo that
moved): the record carries a `note` saying what is missing, and the report shows it. A session that
does not exist raises `store.repository.NotFoundError`.

Decision evidence: the ledger stores decision, outcome class and rationale for promoted versions; for
candidates the status carries the decision, case memory the outcome and rationale, and the decision
note commit on the candidate branch the controller's own words. The paired CI is recomputed from the
pilot's and the control's final validation rollouts with the controller's function and seed
(`agent.evidence.final_strict_scores` + `diagnostics.stats.paired_bootstrap`), so it matches the one
the decision used whenever the artefacts are still there.
"""

from __future__ import annotations

import datetime as dt
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from agent.evidence import final_strict_scores, paired
from diagnostics.schema import ReadProblem, read_metrics
from diagnostics.stats import PairedComparison, paired_bootstrap
from diagnostics.table import read_run_table
from store import models
from store.repository import get, session_candidates, session_ledger
from trainer_backend.base import METRICS_FILE

# Metric name (verl's) -> label; the curves the report draws for every run.
CURVE_METRICS: dict[str, str] = {
    "critic/score/mean": "training reward",
    "val/strict_acc": "strict held-out accuracy",
    "rollout/dead_group_ratio": "dead-group ratio",
    "rollout/truncation_rate": "truncation rate",
    "response_length/mean": "response length (tokens)",
}
MAX_DIFF_CHARS = 20_000
GIT_TIMEOUT_S = 30


@dataclass(frozen=True, slots=True)
class RunCurves:
    """One run's metric series (`{metric: [(step, value), ...]}`) and summary, or a note why it has none."""

    run_id: str
    label: str
    kind: str
    steps: int
    step_offset: int  # lineage steps before this run (its policy's starting point)
    outcome: str | None
    strict_acc: float | None
    train_reward: float | None
    wall_time_s: float | None
    artefact_dir: str
    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    note: str = ""


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
class CandidateEntry:
    """A candidate branch with its decision, evidence and diff."""

    id: str
    iteration: int
    parent_index: int | None
    slug: str
    branch: str
    factor: str
    hypothesis: str
    success_criterion: str
    status: str
    skill: str | None
    outcome: str | None
    rationale: str
    decision_note: str
    comparison: PairedComparison | None
    comparison_note: str
    backtest: BacktestEntry | None
    pilot_run_id: str | None
    diff: str
    diff_note: str


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
class SkillUseEntry:
    """One application of a skill in the session."""

    skill: str
    candidate_id: str | None
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
    pilot_runs: dict[int, list[RunCurves]]  # iteration -> control + candidate pilots
    alerts: list[AlertEntry]
    n_ok_findings: int
    skill_uses: list[SkillUseEntry]
    skills_created: list[SkillEntry]
    llm_usage: list[LLMUsageEntry]
    notes: list[str]


# --- artefacts ----------------------------------------------------------------------------------------


def read_curves(run: models.Run, label: str, step_offset: int = 0) -> RunCurves:
    """Read a run's `metrics.jsonl` into series of the `CURVE_METRICS`; a missing file becomes a note."""
    base = {
        "run_id": run.id,
        "label": label,
        "kind": run.kind,
        "steps": run.steps,
        "step_offset": step_offset,
        "outcome": run.outcome,
        "strict_acc": run.strict_acc,
        "train_reward": run.train_reward,
        "wall_time_s": run.wall_time_s,
        "artefact_dir": run.artefact_dir,
    }
    path = Path(run.artefact_dir) / METRICS_FILE
    if not path.is_file():
        why = "run folder missing" if not Path(run.artefact_dir).exists() else f"no {METRICS_FILE}"
        return RunCurves(**base, note=f"{why}: {path}")  # type: ignore[arg-type]
    problems: list[ReadProblem] = []
    rows = read_metrics(path, problems)
    series: dict[str, list[tuple[int, float]]] = {}
    for name in CURVE_METRICS:
        points = [(r.step, r.data[name]) for r in rows if name in r.data]
        if points:
            series[name] = points
    note = f"{len(problems)} unreadable metric lines in {path}" if problems else ""
    if not rows:
        note = f"{path} holds no metric rows"
    return RunCurves(**base, series=series, note=note)  # type: ignore[arg-type]


def compare_pilot(control_dir: str, pilot_dir: str) -> tuple[PairedComparison | None, str]:
    """Recompute the paired strict comparison of a pilot against its control from their val rollouts."""
    for what, folder in (("control", control_dir), ("pilot", pilot_dir)):
        if not Path(folder).is_dir():
            return None, f"{what} run folder missing: {folder}"
    a_scores = final_strict_scores(read_run_table(Path(control_dir), splits=("val",)).val)
    b_scores = final_strict_scores(read_run_table(Path(pilot_dir), splits=("val",)).val)
    a, b = paired(a_scores, b_scores)
    if not a:
        return None, "no paired strict validation scores in the control and pilot rollouts"
    return paired_bootstrap(a, b), ""


def _git(repo: str, *args: str) -> tuple[str, str]:
    """Run git in `repo`; return (stdout, error note)."""
    if not Path(repo).is_dir():
        return "", f"session repository missing: {repo}"
    try:
        done = subprocess.run(
            ["git", "-C", repo, *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "", f"git {' '.join(args)} failed: {exc}"
    if done.returncode != 0:
        return "", f"git {' '.join(args)} failed: {done.stderr.strip().splitlines()[-1:] or done.returncode}"
    return done.stdout, ""


def candidate_diff(repo: str, parent_commit: str | None, branch: str) -> tuple[str, str]:
    """Return (`git diff <parent commit> <branch tip>`, note); falls back to `git show` of the tip."""
    if parent_commit:
        out, note = _git(repo, "diff", parent_commit, branch, "--")
    else:
        out, note = _git(repo, "show", "--format=", branch)
    if note:
        return "", note
    if len(out) > MAX_DIFF_CHARS:
        return out[:MAX_DIFF_CHARS], f"diff truncated to {MAX_DIFF_CHARS} of {len(out)} characters"
    return out, "" if out.strip() else "empty diff (the branch changes nothing against its parent)"


def decision_note(repo: str, branch: str) -> str:
    """Return the message of the branch tip when it is the controller's decision commit, else ''."""
    out, note = _git(repo, "log", "-1", "--format=%B", branch)
    return out.strip() if not note and out.startswith("decision:") else ""


# --- store --------------------------------------------------------------------------------------------


def _lineage_steps(versions: Sequence[models.Version], runs: dict[str, models.Run]) -> dict[int, int]:
    """Training steps in each version's policy lineage: its run's steps plus its ancestors'."""
    by_id = {v.id: v for v in versions}
    memo: dict[int, int] = {}

    def steps(v: models.Version) -> int:
        if v.id not in memo:
            own = runs[v.run_id].steps if v.run_id in runs else 0
            parent = by_id.get(v.parent_id) if v.parent_id is not None else None
            memo[v.id] = own + (steps(parent) if parent is not None else 0)
        return memo[v.id]

    return {v.id: steps(v) for v in versions}


def _backtest(db: Session, candidate_id: str) -> BacktestEntry | None:
    query = select(models.Backtest).where(models.Backtest.candidate_id == candidate_id)
    row = db.scalars(query.order_by(models.Backtest.id.desc()).limit(1)).first()
    if row is None:
        return None
    return BacktestEntry(
        verdict=row.verdict,
        outcome=row.outcome,
        dead_group_ratio_before=row.dead_group_ratio_before,
        dead_group_ratio_after=row.dead_group_ratio_after,
        rank_violations_before=row.rank_violations_before,
        rank_violations_after=row.rank_violations_after,
        kept_ratio=row.kept_ratio,
        hack_max_score=row.hack_max_score,
        reasons=list(row.reasons or []),
    )


def _candidate_entries(
    db: Session, session: models.EvoSession, versions: list[models.Version], runs: dict[str, models.Run]
) -> list[CandidateEntry]:
    by_id = {v.id: v for v in versions}
    merged_rationale = {v.rationale.split(":", 1)[0].removeprefix("merged "): v for v in versions if v.decision}
    cases = {
        c.candidate_id: c
        for c in db.scalars(select(models.Case).where(models.Case.session_id == session.id))
        if c.candidate_id
    }
    skill_names = {s.id: s.name for s in db.scalars(select(models.Skill))}
    out = []
    for cand in session_candidates(db, session.id):
        parent = by_id.get(cand.parent_version_id)
        pilot = next((r for r in runs.values() if r.candidate_id == cand.id), None)
        control = runs.get(f"{session.id}-i{cand.iteration}-control")
        if pilot is None:
            comparison, cmp_note = None, "no pilot run (refused, failed backtest, or not trained yet)"
        elif control is None:
            comparison, cmp_note = None, f"no control run {session.id}-i{cand.iteration}-control in the store"
        else:
            comparison, cmp_note = compare_pilot(control.artefact_dir, pilot.artefact_dir)
        case = cases.get(cand.id)
        version = merged_rationale.get(cand.id)
        outcome = case.outcome if case else (version.outcome if version else None)
        rationale = case.summary if case else (version.rationale if version else "")
        if cand.status == "refused":
            rationale = f"refused: {cand.refusal_reason}"
        diff, diff_note = candidate_diff(session.repo_path, parent.commit_sha if parent else None, cand.branch)
        out.append(
            CandidateEntry(
                id=cand.id,
                iteration=cand.iteration,
                parent_index=parent.index if parent else None,
                slug=cand.slug,
                branch=cand.branch,
                factor=cand.factor,
                hypothesis=cand.hypothesis,
                success_criterion=cand.success_criterion,
                status=cand.status,
                skill=skill_names.get(cand.skill_id) if cand.skill_id is not None else None,
                outcome=outcome,
                rationale=rationale,
                decision_note=decision_note(session.repo_path, cand.branch),
                comparison=comparison,
                comparison_note=cmp_note,
                backtest=_backtest(db, cand.id),
                pilot_run_id=pilot.id if pilot else None,
                diff=diff,
                diff_note=diff_note,
            )
        )
    return out


def _alerts(
    db: Session, session_id: str, labels: dict[str, str], version_of_run: dict[str, int]
) -> tuple[list[AlertEntry], int]:
    query = select(models.HealthReport).where(models.HealthReport.session_id == session_id)
    alerts, n_ok = [], 0
    for report in db.scalars(query.order_by(models.HealthReport.id)):
        for f in report.findings:
            if f.severity == "ok":
                n_ok += 1
                continue
            alerts.append(
                AlertEntry(
                    run_label=labels.get(report.run_id, report.run_id),
                    run_id=report.run_id,
                    version_index=version_of_run.get(report.run_id),
                    alert_id=f.alert_id,
                    layer=f.layer,
                    severity=f.severity,
                    value=f.value,
                    threshold=f.threshold,
                    message=f.message,
                )
            )
    return alerts, n_ok


def _skills(db: Session, session_id: str) -> tuple[list[SkillUseEntry], list[SkillEntry]]:
    names = {s.id: s for s in db.scalars(select(models.Skill).order_by(models.Skill.id))}
    uses = [
        SkillUseEntry(
            skill=names[u.skill_id].name if u.skill_id in names else f"skill #{u.skill_id}",
            candidate_id=u.candidate_id,
            result=u.result,
            matched_metrics=dict(u.matched_metrics or {}),
        )
        for u in db.scalars(
            select(models.SkillUse).where(models.SkillUse.session_id == session_id).order_by(models.SkillUse.id)
        )
    ]
    created = [
        SkillEntry(s.name, s.factor, s.trigger, s.expected_outcome, s.wins, s.losses, s.provenance)
        for s in names.values()
        if session_id in (s.provenance or "")
    ]
    return uses, created


def _llm_usage(db: Session, session_id: str) -> list[LLMUsageEntry]:
    groups: dict[tuple[str, str], list[models.LLMUsage]] = {}
    for row in db.scalars(
        select(models.LLMUsage).where(models.LLMUsage.session_id == session_id).order_by(models.LLMUsage.id)
    ):
        groups.setdefault((row.node, row.model), []).append(row)
    out = []
    for (node, model), rows in groups.items():
        costs = [r.cost_usd for r in rows if r.cost_usd is not None]
        out.append(
            LLMUsageEntry(
                node=node,
                model=model,
                calls=len(rows),
                prompt_tokens=sum(r.prompt_tokens for r in rows),
                completion_tokens=sum(r.completion_tokens for r in rows),
                cost_usd=sum(costs) if costs else None,
            )
        )
    return out


def gather_session(db: Session, session_id: str) -> SessionReport:
    """Collect everything the report shows about `session_id`.

    Raises:
        store.repository.NotFoundError: no such session.
    """
    session = get(db, models.EvoSession, session_id)
    versions = session_ledger(db, session_id)
    runs = {
        r.id: r
        for r in db.scalars(select(models.Run).where(models.Run.session_id == session_id).order_by(models.Run.id))
    }
    index_of = {v.id: v.index for v in versions}
    lineage = _lineage_steps(versions, runs)
    entries = [
        VersionEntry(
            index=v.index,
            parent_index=index_of.get(v.parent_id) if v.parent_id is not None else None,
            branch=v.branch,
            commit=v.commit_sha,
            decision=v.decision,
            outcome=v.outcome,
            rationale=v.rationale,
            strict_score=v.strict_score,
            train_score=v.train_score,
            run_id=v.run_id,
            diff_stat=(v.diff_stat_files, v.diff_stat_insertions, v.diff_stat_deletions),
            lineage_steps=lineage[v.id],
        )
        for v in versions
    ]
    notes: list[str] = []
    version_of_run = {v.run_id: v.index for v in versions if v.run_id}
    version_runs = []
    for v in versions:
        if v.run_id is None or v.run_id not in runs:
            notes.append(f"v{v.index} has no run in the store (run id {v.run_id!r})")
            continue
        run = runs[v.run_id]
        version_runs.append(read_curves(run, f"v{v.index}", lineage[v.id] - run.steps))
    candidates = _candidate_entries(db, session, versions, runs)
    labels = {rid: f"v{idx}" for rid, idx in version_of_run.items()}
    pilot_runs: dict[int, list[RunCurves]] = {}
    for cand in candidates:
        if cand.pilot_run_id is not None:
            became = labels.get(cand.pilot_run_id)
            labels[cand.pilot_run_id] = f"pilot {cand.id.rsplit('-v', 1)[-1]}" + (f" (→ {became})" if became else "")
    for run in runs.values():
        if run.kind != "pilot":
            continue
        iteration = _iteration_of(run, session_id, candidates)
        label = f"control (i{iteration})" if run.candidate_id is None else labels.get(run.id, run.id)
        labels.setdefault(run.id, label)
        pilot_runs.setdefault(iteration, []).append(read_curves(run, label))
    alerts, n_ok = _alerts(db, session_id, labels, version_of_run)
    uses, created = _skills(db, session_id)
    if not Path(session.repo_path).is_dir():
        notes.append(f"session repository {session.repo_path} is missing: diffs and decision notes are unavailable")
    return SessionReport(
        session_id=session.id,
        created_at=session.created_at,
        mode=session.mode,
        policy=session.policy,
        llm_model=session.llm_model,
        status=session.status,
        harness_path=session.harness_path,
        repo_path=session.repo_path,
        max_iterations=session.max_iterations,
        max_train_steps=session.max_train_steps,
        steps_used=session.steps_used,
        wall_time_s=session.wall_time_s,
        versions=entries,
        candidates=candidates,
        version_runs=version_runs,
        pilot_runs=dict(sorted(pilot_runs.items())),
        alerts=alerts,
        n_ok_findings=n_ok,
        skill_uses=uses,
        skills_created=created,
        llm_usage=_llm_usage(db, session_id),
        notes=notes,
    )


def _iteration_of(run: models.Run, session_id: str, candidates: Sequence[CandidateEntry]) -> int:
    """The iteration a pilot run belongs to: its candidate's, or the `-i<N>-` in a control run's id."""
    if run.candidate_id is not None:
        return next((c.iteration for c in candidates if c.id == run.candidate_id), 0)
    tail = run.id.removeprefix(f"{session_id}-")
    if tail.startswith("i") and "-" in tail and tail[1 : tail.index("-")].isdigit():
        return int(tail[1 : tail.index("-")])
    return 0
