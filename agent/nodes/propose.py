"""propose: the policy picks interventions; each becomes a branch + worktree after the surface and factor checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from agent import ledger
from agent.candidates import finalise_candidate, open_candidate, refuse_candidate
from agent.context import Context
from agent.policies.heuristic import Proposal, propose_from_skills, propose_score_only
from agent.state import CandidateInfo, State
from agent.triggers import record_unevaluated_triggers, trigger_metrics
from harness.manifest import Harness, load_harness

# When a skill may be proposed again in a session: never after it was merged, refused or failed its
# backtest; after a regression ("reverted") only once the harness changed (a merge since its last try),
# because single factors interact (a longer length budget regresses under a hackable reward and helps
# under a strict one); after thin evidence ("pruned") or a non-best improvement ("kept") again. At most
# MAX_TRIES tries in all.
SETTLED = {"refused", "backtest_failed", "merged"}
MAX_TRIES = 2


def propose(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Propose this iteration's candidates (idempotent: existing branches and commits are reused)."""
    ctx, iteration = runtime.context, state["iteration"]
    if any(c["iteration"] == iteration for c in state.get("candidates", [])):
        return {}
    harness = load_harness(Path(state["harness_dir"]))
    tried = settled_skills(state.get("candidates", []))
    if ctx.mode != "score-only":  # a trigger the report cannot decide is recorded, never silently skipped
        record_unevaluated_triggers(ctx, state, harness, trigger_metrics(state["report"]["metrics"], harness))
    if ctx.policy == "llm" and ctx.mode != "score-only":
        from agent.policies.llm import propose_with_llm

        outcome = propose_with_llm(ctx, state, harness)
        made = [*state.get("candidates", []), *outcome.candidates]
        return {"candidates": made, "llm_stop_reason": outcome.budget_stop}
    metrics = trigger_metrics(state["report"]["metrics"], harness)
    if ctx.mode == "score-only":
        proposals = propose_score_only(tried, ctx.max_candidates)
    else:
        proposals = _skill_proposals(ctx, harness, metrics, tried)
    made = [_materialise(ctx, state, harness, p, k, metrics) for k, p in enumerate(proposals, start=1)]
    return {"candidates": [*state.get("candidates", []), *made]}


def settled_skills(candidates: list[CandidateInfo]) -> set[str]:
    """Skills not to propose again (see the rules above `SETTLED`)."""
    last_merge = max((c["iteration"] for c in candidates if c["status"] == "merged"), default=-1)
    tries: dict[str, int] = {}
    settled: set[str] = set()
    for cand in candidates:
        for name in filter(None, cand["skill"].split(",")):
            tries[name] = tries.get(name, 0) + 1
            if cand["status"] in SETTLED or (cand["status"] == "reverted" and cand["iteration"] > last_merge):
                settled.add(name)
            elif cand["status"] == "reverted":
                settled.discard(name)
    return settled | {name for name, n in tries.items() if n >= MAX_TRIES}


def _skill_proposals(ctx: Context, harness: Harness, metrics: dict[str, Any], tried: set[str]) -> list[Proposal]:
    from skills.patches import skill_fits
    from skills.repository import rank

    with ledger.db(ledger.store_url(ctx)) as db:
        matches = rank(db, metrics, harness.manifest.domain)
    # e.g. a reward-writing skill needs the manifest's answer protocol: never propose what cannot apply
    fitting = [m for m in matches if skill_fits(m.record.spec, harness) is None]
    return propose_from_skills(fitting, metrics, tried, ctx.max_candidates)


def _materialise(
    ctx: Context, state: State, harness: Harness, proposal: Proposal, k: int, metrics: dict[str, Any]
) -> CandidateInfo:
    """Open the candidate, apply the skill patch(es) (ops like reweight_sources read `metrics`), then check,
    commit and record it."""
    from sandboxes import git_worktree as gw
    from skills.patches import SkillPatchError, apply_skill
    from skills.repository import evidence, record_use

    cand = open_candidate(
        ctx,
        state,
        k,
        proposal.slug,
        hypothesis=proposal.hypothesis,
        factors=proposal.factors,
        success_criterion=proposal.success_criterion,
        justification=proposal.justification,
        skill=",".join(s.name for s in proposal.skills),
    )
    if not cand.committed:
        try:
            for spec in proposal.skills:
                apply_skill(spec, Path(cand.info["worktree"]), harness, metrics=metrics, backend=ctx.backend)
        except (SkillPatchError, gw.GitWorktreeError) as exc:
            return refuse_candidate(ctx, state, cand.info, f"patch did not apply: {exc}")
    info = finalise_candidate(ctx, state, harness, cand, f"{proposal.slug}: {proposal.skill.expected_outcome}")
    if info["status"] != "refused" and proposal.from_skill:
        with ledger.db(ledger.store_url(ctx)) as db:
            for spec in proposal.skills:
                record_use(db, spec.name, state["session_id"], info["id"], evidence(spec, metrics))
    return info
