"""propose: the policy picks interventions; each becomes a branch + worktree after the surface and factor checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from agent import ledger
from agent.context import Context
from agent.factors import check_candidate
from agent.nodes.common import store_url
from agent.policies.heuristic import Proposal, propose_from_skills, propose_score_only
from agent.state import CandidateInfo, State
from trainer_backend.harness import Harness, load_harness

FACTORS = ("reward", "filter", "data", "trainer", "diagnostic")  # the store's factor values
# Statuses after which a skill is not proposed again in the same session ("kept" ones may come back).
SETTLED = {"refused", "backtest_failed", "pruned", "reverted", "merged"}


def propose(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Propose this iteration's candidates (idempotent: existing branches and commits are reused)."""
    ctx, iteration = runtime.context, state["iteration"]
    if any(c["iteration"] == iteration for c in state.get("candidates", [])):
        return {}
    harness = load_harness(Path(state["harness_dir"]))
    metrics = dict(state["report"]["metrics"])
    tried = {name for c in state.get("candidates", []) if c["status"] in SETTLED for name in c["skill"].split(",")}
    if ctx.mode == "score-only":
        proposals = propose_score_only(tried, ctx.max_candidates)
    else:
        proposals = _skill_proposals(ctx, harness, metrics, tried)
    made = [_materialise(ctx, state, harness, p, k) for k, p in enumerate(proposals, start=1)]
    return {"candidates": [*state.get("candidates", []), *made]}


def _skill_proposals(ctx: Context, harness: Harness, metrics: dict[str, Any], tried: set[str]) -> list[Proposal]:
    from skills.repository import rank

    context = {
        **{k: v for k, v in metrics.items() if v is not None},
        "domain": harness.manifest.domain,
        "filter_present": int(harness.group_filter is not None),
    }
    with ledger.db(store_url(ctx)) as db:
        matches = rank(db, context, harness.manifest.domain)
    return propose_from_skills(matches, context, tried, ctx.max_candidates)


def _materialise(ctx: Context, state: State, harness: Harness, proposal: Proposal, k: int) -> CandidateInfo:
    """Create the branch and worktree, apply the skill's patch, check surface and factors, commit."""
    from git import Repo

    from sandboxes import git_worktree as gw
    from skills.patches import SkillPatchError, apply_skill
    from store.repository import candidate_id as make_id

    session_id, iteration, version = state["session_id"], state["iteration"], state["version"]
    repo = Repo(state["harness_dir"])
    cw = gw.create_candidate(
        repo, session_id, iteration, k, proposal.slug, version["branch"], ctx.session_dir(session_id) / "worktrees"
    )
    cid = make_id(session_id, iteration, k, proposal.slug)
    info = CandidateInfo(
        id=cid,
        iteration=iteration,
        slug=proposal.slug,
        branch=cw.branch,
        worktree=str(cw.path),
        commit="",
        hypothesis=proposal.hypothesis,
        factor=proposal.factor,
        factors=list(proposal.factors),
        justification=proposal.justification,
        success_criterion=proposal.success_criterion,
        skill=",".join(s.name for s in proposal.skills),
        status="proposed",
        reason="",
    )
    head = repo.commit(cw.branch).hexsha
    if head == cw.base_sha:  # not committed yet (first run, or a crash before the commit)
        try:
            for spec in proposal.skills:
                apply_skill(spec, cw.path, harness)
        except (SkillPatchError, gw.GitWorktreeError) as exc:
            return _refuse(ctx, state, info, f"patch did not apply: {exc}")
    check = check_candidate(
        gw.changed_files(cw.path, cw.base_sha),
        gw.diff(cw.path, cw.base_sha),
        harness,
        declared_factors=proposal.factors,
        justification=proposal.justification,
    )
    if not check.ok:
        return _refuse(ctx, state, info, check.reason)
    if head == cw.base_sha:
        message = gw.InterventionMessage(
            title=f"{proposal.slug}: {proposal.skill.expected_outcome}",
            hypothesis=proposal.hypothesis,
            factor=proposal.factor,
            success_criterion=proposal.success_criterion,
            extra={
                "Skill": ", ".join(s.name for s in proposal.skills),
                **({"Justification": proposal.justification} if proposal.justification else {}),
            },
        )
        head = gw.commit_candidate(cw.path, message)
    info["commit"] = head
    _record(ctx, state, info, proposal)
    return info


def _refuse(ctx: Context, state: State, info: CandidateInfo, reason: str) -> CandidateInfo:
    from store.repository import update_candidate_status

    info["status"], info["reason"] = "refused", reason
    with ledger.db(store_url(ctx)) as db:
        _ensure_row(db, state, info)
        update_candidate_status(db, info["id"], "refused", refusal_reason=reason)
    return info


def _record(ctx: Context, state: State, info: CandidateInfo, proposal: Proposal) -> None:
    from skills.repository import evidence, record_use

    with ledger.db(store_url(ctx)) as db:
        _ensure_row(db, state, info)
        if proposal.from_skill:
            for spec in proposal.skills:
                record_use(db, spec.name, state["session_id"], info["id"], evidence(spec, _metrics(state)))


def _metrics(state: State) -> dict[str, Any]:
    return {k: v for k, v in state["report"]["metrics"].items() if v is not None}


def _ensure_row(db: Any, state: State, info: CandidateInfo) -> None:
    version = ledger.version_for_run(db, state["session_id"], state["version"]["run_id"])
    assert version is not None, f"incumbent run {state['version']['run_id']} has no ledger row"
    factor = info["factor"] if info["factor"] in FACTORS else "trainer"
    declared = [f for f in info["factors"] if f in FACTORS]
    ledger.ensure_candidate(
        db,
        candidate_id=info["id"],
        session_id=state["session_id"],
        parent_version_id=version.id,
        iteration=info["iteration"],
        slug=info["slug"],
        branch=info["branch"],
        worktree_path=info["worktree"],
        hypothesis=info["hypothesis"],
        factor=factor,
        success_criterion=info["success_criterion"],
        factors_declared=declared or [factor],
        justification=info["justification"] or None,
    )
