"""Gather one session's evidence from the store, the run artefact folders and the session's git repo.

Plain functions returning frozen records; the HTML assembly (`agent/reporting/html.py`) only reads
these. Nothing here raises on a missing artefact (a deleted run folder, a pruned branch, a repo that
moved): the record carries a `note` saying what is missing, and the report shows it. A session that
does not exist raises `store.repository.NotFoundError`. Candidates and pilot runs carry the candidate's
one name `v<i>.<k>-<slug>` (`agent.adapters.pilots.candidate_name`); the control of iteration i is `v<i>.0-control`.

Decision evidence: the ledger stores decision, outcome class and rationale for promoted versions; for
candidates the status carries the decision, case memory the outcome and rationale, and the decision
note commit on the candidate branch the controller's own words. The paired CI is recomputed from the
pilot's and the control's final validation rollouts with the controller's function and seed
(`agent.decisions.evidence.final_strict_scores` + `diagnostics.stats.paired_bootstrap`), so it matches the one
the decision used whenever the artefacts are still there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from agent.adapters.pilots import candidate_name, parse_pilot_run_id
from agent.adapters.runs import final_checkpoint
from agent.policies.alert_aims import ALERT_ANSWERS
from agent.reporting.artefacts import (
    CURVE_METRICS,
    OPTIM_METRICS,
    REPORT_FILE,
    RunCurves,
    RunHealth,
    compare_pilot,
    models_trained,
    read_curves,
    read_health,
    read_samples,
)
from agent.reporting.records import (
    AlertAnswerEntry,
    AlertEntry,
    BacktestEntry,
    CandidateEntry,
    LLMUsageEntry,
    SessionReport,
    SkillEntry,
    SkillUseEntry,
    VersionEntry,
    VersionHealth,
)
from agent.reporting.summary import session_summary
from diagnostics.agentic_docs import HEADLINE_METRICS
from diagnostics.findings import HealthReport
from diagnostics.tool_roles import DEFAULT_ROLES, ToolRoles
from skills.repository import session_uses, skill_rows
from store.repository import (
    health_reports,
    latest_backtest,
    session_candidates,
    session_cases,
    session_ledger,
    session_llm_usage,
    session_row,
    session_runs,
)

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from store import models

__all__ = ["CURVE_METRICS", "OPTIM_METRICS", "CandidateEntry", "RunCurves", "SessionReport", "gather_session"]
MAX_DIFF_CHARS = 20_000


# --- artefacts and git ------------------------------------------------------------------------------------


def _git_read(repo: str, read: Callable[[str], str]) -> tuple[str, str]:
    """`read(repo)` through the git adapter; return (text, error note)."""
    from sandboxes.git_revisions import RevisionError
    from sandboxes.git_worktree import GitWorktreeError

    if not Path(repo).is_dir():
        return "", f"session repository missing: {repo}"
    try:
        return read(repo), ""
    except (RevisionError, GitWorktreeError, OSError) as exc:
        return "", f"git failed: {str(exc).splitlines()[-1:] or exc}"


def candidate_diff(repo: str, parent_commit: str | None, branch: str) -> tuple[str, str]:
    """Return (`git diff <parent commit> <branch tip>`, note); falls back to `git show` of the tip."""
    from sandboxes import git_revisions as gr

    def read(root: str) -> str:
        tip = gr.verified_commit(root, f"refs/heads/{branch}", "branch")
        if parent_commit:
            return gr.diff_text(root, gr.verified_commit(root, parent_commit, "parent commit"), tip)
        return gr.show_patch(root, tip)

    out, note = _git_read(repo, read)
    if note:
        return "", note
    if len(out) > MAX_DIFF_CHARS:
        return out[:MAX_DIFF_CHARS], f"diff truncated to {MAX_DIFF_CHARS} of {len(out)} characters"
    return out, "" if out.strip() else "empty diff (the branch changes nothing against its parent)"


def decision_note(repo: str, branch: str) -> str:
    """Return the message of the branch tip when it is the controller's decision commit, else ''."""
    from sandboxes import git_revisions as gr

    out, note = _git_read(
        repo, lambda root: gr.tip_message(root, gr.verified_commit(root, f"refs/heads/{branch}", "branch"))
    )
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
    row = latest_backtest(db, candidate_id)
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


def _skills_by_candidate(names: dict[int, str], uses: Sequence[models.SkillUse]) -> dict[str, list[str]]:
    """Skill names applied to each candidate (a candidate may bundle several), from the skill-use records."""
    out: dict[str, list[str]] = {}
    for use in uses:
        if use.candidate_id is not None:
            out.setdefault(use.candidate_id, []).append(names.get(use.skill_id, f"skill #{use.skill_id}"))
    return out


def _pilots(session_id: str, runs: dict[str, models.Run]) -> dict[str, tuple[int, str, int]]:
    """Pilot run id -> (iteration, name, replicate), for the runs named in either scheme."""
    out = {}
    for run in runs.values():
        if run.kind == "pilot":
            parsed = parse_pilot_run_id(session_id, run.id, run.candidate_id)
            if parsed is not None:
                out[run.id] = parsed
    return out


def _candidate_entries(
    db: Session,
    session: models.EvoSession,
    versions: list[models.Version],
    runs: dict[str, models.Run],
    pilots: dict[str, tuple[int, str, int]],
    library: dict[int, models.Skill],
    uses: Sequence[models.SkillUse],
) -> list[CandidateEntry]:
    by_id = {v.id: v for v in versions}
    version_of_run = {v.run_id: v.index for v in versions if v.run_id}
    cases = {c.candidate_id: c for c in session_cases(db, session.id) if c.candidate_id}
    controls = {it: rid for rid, (it, name, r) in pilots.items() if r == 0 and runs[rid].candidate_id is None}
    skill_names = {i: s.name for i, s in library.items()}
    skills = _skills_by_candidate(skill_names, uses)
    out = []
    for cand in session_candidates(db, session.id):
        parent = by_id.get(cand.parent_version_id)
        mine = [r for r in runs.values() if r.candidate_id == cand.id]
        pilot = next((r for r in mine if pilots.get(r.id, (0, "", 0))[2] == 0), mine[0] if mine else None)
        control = runs.get(controls.get(cand.iteration, ""))
        if pilot is None:
            comparison, cmp_note = None, "no pilot run (refused, failed backtest, or not trained yet)"
        elif control is None:
            comparison, cmp_note = None, f"no control run of iteration {cand.iteration} in the store"
        else:
            comparison, cmp_note = compare_pilot(control.artefact_dir, pilot.artefact_dir)
        became = version_of_run.get(pilot.id) if pilot else None
        version = next((v for v in versions if v.index == became), None)
        case = cases.get(cand.id)
        outcome = case.outcome if case else (version.outcome if version else None)
        rationale = case.summary if case else (version.rationale if version else "")
        if cand.status == "refused":
            rationale = f"refused: {cand.refusal_reason}"
        diff, diff_note = candidate_diff(session.repo_path, parent.commit_sha if parent else None, cand.branch)
        named = skills.get(cand.id, [])
        if not named and cand.skill_id is not None:
            named = [skill_names.get(cand.skill_id, f"skill #{cand.skill_id}")]
        out.append(
            CandidateEntry(
                id=cand.id,
                name=candidate_name(session.id, cand.id),
                iteration=cand.iteration,
                parent_index=parent.index if parent else None,
                slug=cand.slug,
                branch=cand.branch,
                factor=cand.factor,
                hypothesis=cand.hypothesis,
                success_criterion=cand.success_criterion,
                status=cand.status,
                skills=named,
                outcome=outcome,
                rationale=rationale,
                decision_note=decision_note(session.repo_path, cand.branch),
                comparison=comparison,
                comparison_note=cmp_note,
                backtest=_backtest(db, cand.id),
                pilot_run_id=pilot.id if pilot else None,
                diff=diff,
                diff_note=diff_note,
                became=became,
            )
        )
    return out


def alert_answers(db: Session, session_id: str) -> list[AlertAnswerEntry]:
    """What answered each iteration's critical alerts, as the propose node recorded it in case memory."""
    out = []
    for case in session_cases(db, session_id):
        answers = case.signature.get(ALERT_ANSWERS) if isinstance(case.signature, dict) else None
        if not isinstance(answers, dict):
            continue
        for alert_id, answer in answers.items():
            names = tuple(candidate_name(session_id, c) for c in answer.get("candidates", []))
            out.append(AlertAnswerEntry(int(case.signature.get("iteration", 0)), alert_id, names,
                                        str(answer.get("reason", ""))))  # fmt: skip
    return out


def _stored_findings(db: Session, session_id: str) -> dict[str, list[models.Finding]]:
    out: dict[str, list[models.Finding]] = {}
    for report in health_reports(db, session_id):
        out.setdefault(report.run_id, []).extend(report.findings)
    return out


def _health(
    db: Session, session_id: str, versions: list[VersionEntry], labels: dict[str, str], roles: ToolRoles
) -> tuple[list[VersionHealth], list[AlertEntry]]:
    """One health row per version: its run's report file, else the store's findings, else built from artefacts."""
    stored = _stored_findings(db, session_id)
    rows, alerts = [], []
    parent: HealthReport | None = None
    for v in versions:
        if v.run_id is None or v.artefact_dir is None:
            rows.append(VersionHealth(v.index, v.run_id or "", "missing", None, None, [], "no run in the store"))
            continue
        label = labels.get(v.run_id, f"v{v.index}")
        found: RunHealth | None = None
        if (Path(v.artefact_dir) / REPORT_FILE).is_file() or v.run_id not in stored:
            found = read_health(v.run_id, v.artefact_dir, parent, roles)
        if found is not None and found.report is not None:
            parent = found.report
            fired = [f for f in found.report.findings if f.fired]
            mine = [
                AlertEntry(label, v.run_id, v.index, f.alert_id, f.layer.value, f.severity.value,
                           f.value, f.threshold, f.message)
                for f in sorted(fired, key=lambda f: -f.severity.rank)
            ]  # fmt: skip
            n_checks, n_ok = len(found.report.findings), len(found.report.findings) - len(fired)
            agentic = {k: found.report.metrics[k] for k in HEADLINE_METRICS if k in found.report.metrics}
            rows.append(VersionHealth(v.index, v.run_id, found.source, n_checks, n_ok, mine, found.note, agentic))
        elif v.run_id in stored:
            fired_rows = [f for f in stored[v.run_id] if f.severity != "ok"]
            mine = [
                AlertEntry(label, v.run_id, v.index, f.alert_id, f.layer, f.severity, f.value, f.threshold, f.message)
                for f in fired_rows
            ]
            note = "the store keeps fired findings only; the run's health_report.json is missing"
            rows.append(VersionHealth(v.index, v.run_id, "store", None, None, mine, note))
        else:
            note = found.note if found is not None else "not diagnosed"
            rows.append(VersionHealth(v.index, v.run_id, "missing", None, None, [], note))
            continue
        alerts += mine
    return rows, alerts


def _skills(
    session_id: str,
    names: dict[int, models.Skill],
    recorded: Sequence[models.SkillUse],
    candidates: Sequence[CandidateEntry],
) -> tuple[list[SkillUseEntry], list[SkillEntry]]:
    by_id = {c.id: c for c in candidates}
    uses = []
    for u in recorded:
        cand = by_id.get(u.candidate_id or "")
        uses.append(
            SkillUseEntry(
                skill=names[u.skill_id].name if u.skill_id in names else f"skill #{u.skill_id}",
                candidate_id=u.candidate_id,
                candidate_name=cand.name if cand else (u.candidate_id or "—"),
                result=skill_result(u.result, cand),
                matched_metrics=dict(u.matched_metrics or {}),
            )
        )
    created = [
        SkillEntry(s.name, s.factor, s.trigger, s.expected_outcome, s.wins, s.losses, s.provenance)
        for s in names.values()
        if session_id in (s.provenance or "")
    ]
    return uses, created


def skill_result(result: str, cand: CandidateEntry | None) -> str:
    """What a skill use counted as: win / loss, or why a decided candidate's use was left uncounted."""
    if result != "pending" or cand is None:
        return result
    if cand.status in ("pruned", "kept", "reverted"):
        return f"not counted: {cand.status} on {cand.outcome or 'no'} evidence"
    if cand.status in ("refused", "backtest_failed"):
        return f"not counted: never trained ({cand.status})"
    return "pending (not decided yet)"


def _llm_usage(db: Session, session_id: str) -> list[LLMUsageEntry]:
    groups: dict[tuple[str, str], list[models.LLMUsage]] = {}
    for row in session_llm_usage(db, session_id):
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


def _version_entries(versions: list[models.Version], runs: dict[str, models.Run]) -> list[VersionEntry]:
    index_of = {v.id: v.index for v in versions}
    lineage = _lineage_steps(versions, runs)
    return [
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
            artefact_dir=runs[v.run_id].artefact_dir if v.run_id in runs else None,
        )
        for v in versions
    ]


def _curves(
    run: models.Run, label: str, step_offset: int = 0, replicate: int = 0, roles: ToolRoles = DEFAULT_ROLES
) -> RunCurves:
    return read_curves(
        run.id,
        run.artefact_dir,
        label,
        step_offset=step_offset,
        replicate=replicate,
        roles=roles,
        kind=run.kind,
        steps=run.steps,
        outcome=run.outcome,
        strict_acc=run.strict_acc,
        train_reward=run.train_reward,
        wall_time_s=run.wall_time_s,
    )


def pilot_label(name: str, replicate: int, became: int | None) -> str:
    """A pilot's label: its name, `replicate r` for a fresh-seed re-run, `→ v<n>` when it became a version."""
    return name + (f" replicate {replicate}" if replicate else "") + (f" → v{became}" if became is not None else "")


def session_tool_roles(repo_path: str) -> ToolRoles:
    """The tool roles of the session harness's declared tools (its env is protected: every run shares them);
    classification by tool name when the repository is gone or its harness declares no env."""
    from harness.manifest import HarnessError, load_harness

    try:
        env = load_harness(Path(repo_path)).manifest.env
    except (HarnessError, OSError):
        return DEFAULT_ROLES
    return DEFAULT_ROLES if env is None else ToolRoles.from_env(env)


def gather_session(db: Session, session_id: str) -> SessionReport:
    """Collect everything the report shows about `session_id`.

    Raises:
        store.repository.NotFoundError: no such session.
    """
    session = session_row(db, session_id)
    versions = session_ledger(db, session_id)
    runs = {r.id: r for r in session_runs(db, session_id)}
    entries = _version_entries(versions, runs)
    notes: list[str] = []
    version_of_run = {v.run_id: v.index for v in entries if v.run_id}
    labels = {rid: f"v{idx}" for rid, idx in version_of_run.items()}
    version_runs, rollouts = [], []
    roles = session_tool_roles(session.repo_path)
    for v in entries:
        if v.run_id is None or v.run_id not in runs:
            notes.append(f"v{v.index} has no run in the store (run id {v.run_id!r})")
            continue
        run = runs[v.run_id]
        version_runs.append(_curves(run, f"v{v.index}", v.lineage_steps - run.steps, roles=roles))
    pilots = _pilots(session_id, runs)
    library, skill_uses = skill_rows(db), session_uses(db, session_id)  # read once: candidates and skills use both
    candidates = _candidate_entries(db, session, versions, runs, pilots, library, skill_uses)
    pilot_runs: dict[int, list[RunCurves]] = {}
    iteration_of = {c.id: c.iteration for c in candidates}
    for run in runs.values():
        if run.kind != "pilot":
            continue
        unnamed = (iteration_of.get(run.candidate_id or "", 0), run.id.removeprefix(f"{session_id}-"), 0)
        iteration, name, replicate = pilots.get(run.id, unnamed)
        labels[run.id] = label = pilot_label(name, replicate, version_of_run.get(run.id))
        pilot_runs.setdefault(iteration, []).append(_curves(run, label, replicate=replicate, roles=roles))
    for group in pilot_runs.values():
        group.sort(key=lambda c: (c.label.split(" ")[0], c.replicate))
    health, alerts = _health(db, session_id, entries, labels, roles)
    for curves in version_runs:
        rollouts.append(read_samples(curves.run_id, curves.artefact_dir, curves.label))
    for iteration in sorted(pilot_runs):
        rollouts += [read_samples(c.run_id, c.artefact_dir, c.label) for c in pilot_runs[iteration]]
    uses, created = _skills(session_id, library, skill_uses, candidates)
    if not Path(session.repo_path).is_dir():
        notes.append(f"session repository {session.repo_path} is missing: diffs and decision notes are unavailable")
    final = entries[-1] if entries else None
    found = final_checkpoint(Path(final.artefact_dir)) if final and final.artefact_dir else None
    checkpoint = str(found) if found is not None else ""
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
        health=health,
        rollouts=rollouts,
        skill_uses=uses,
        skills_created=created,
        llm_usage=_llm_usage(db, session_id),
        notes=notes,
        summary=session_summary(db, session_id),
        final_checkpoint=checkpoint,
        alert_answers=alert_answers(db, session_id),
        models=models_trained([(run.id, run.artefact_dir) for run in runs.values()]),
    )
