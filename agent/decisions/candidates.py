"""Candidate lifecycle shared by every policy: open a branch + worktree, finalise (check, commit, record), refuse.

The heuristic policy applies skill patches between `open_candidate` and `finalise_candidate`; the LLM
policy edits files through its tools in between. Either way the same checks decide — no symlink, gitlink
or other non-regular file (`sandboxes.worktree_files.non_regular_changes`), the surface and the
single-factor rule (`agent.decisions.factors.check_candidate`), and what runs is what is committed: no file git
ignores (it would run unreviewed), no ``.gitignore`` / ``.gitattributes`` / ``.gitmodules`` edit
(`sandboxes.git_worktree.unreviewed_files`) and no compiled code, which runs without its source
and shows in a diff only as a binary (`sandboxes.compiled_code`) — and the same store rows are
written. A refused candidate's worktree goes back to its base commit. Idempotent: a re-run finds the branch,
worktree and commit it made before, and drops the uncommitted edits a killed run left half made (it edits
again from the base).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from agent.adapters import ledger
from agent.context import Context
from agent.decisions.factors import check_candidate
from agent.state import CandidateInfo, State
from harness.manifest import Harness
from store.types import Factor

FACTORS: tuple[str, ...] = get_args(Factor)  # the store's factor values, defined once


@dataclass
class OpenCandidate:
    """A candidate between opening and finalising: its worktree, base commit and state record."""

    info: CandidateInfo
    base_sha: str
    committed: bool  # a previous (crashed) run already committed it: do not edit again


def open_candidate(
    ctx: Context,
    state: State,
    k: int,
    slug: str,
    *,
    hypothesis: str,
    factors: tuple[str, ...],
    success_criterion: str,
    justification: str = "",
    skill: str = "",
) -> OpenCandidate:
    """Create (or find) the candidate's branch `evo/<session>/v<i>.<k>-<slug>` and its worktree."""
    from git import Repo

    from sandboxes import git_worktree as gw
    from sandboxes.git_recovery import discard_uncommitted
    from store.repository import candidate_id

    session_id, iteration = state["session_id"], state["iteration"]
    repo = Repo(state["harness_dir"])
    worktrees = ctx.worktrees_root(session_id)
    cw = gw.create_candidate(repo, session_id, iteration, k, slug, state["version"]["branch"], worktrees)
    info = CandidateInfo(
        id=candidate_id(session_id, iteration, k, slug),
        iteration=iteration,
        slug=slug,
        branch=cw.branch,
        worktree=str(cw.path),
        commit="",
        hypothesis=hypothesis,
        factor=factors[0],
        factors=list(factors),
        justification=justification,
        success_criterion=success_criterion,
        skill=skill,
        status="proposed",
        reason="",
    )
    head = repo.commit(cw.branch).hexsha
    if head == cw.base_sha:  # not committed yet: edits left on disk are a killed run's, half made
        discard_uncommitted(cw.path)
    return OpenCandidate(info=info, base_sha=cw.base_sha, committed=head != cw.base_sha)


def finalise_candidate(ctx: Context, state: State, harness: Harness, cand: OpenCandidate, title: str) -> CandidateInfo:
    """Check the candidate's diff against the surface and the single-factor rule, commit it and record it."""
    from agent.adapters.pilots import candidate_name
    from sandboxes import git_worktree as gw
    from sandboxes import worktree_files as wf
    from sandboxes.compiled_code import COMPILED_RULE, compiled_code

    info, path = cand.info, Path(cand.info["worktree"])
    wf.drop_bytecode_caches(path)  # derived, and never reviewed: a stale one would run instead of its source
    links = wf.non_regular_changes(path, cand.base_sha)
    if links:  # by whatever route they came: never committed, never backtested
        return refuse_candidate(ctx, state, info, f"refused: {'; '.join(links)}: {wf.LINK_RULE}")
    changed = wf.changed_files(path, cand.base_sha)  # stages every new file: it is committed and counted
    unreviewed = gw.unreviewed_files(path)
    compiled = compiled_code(path, [*changed, *unreviewed])
    if compiled:  # it would run in the backtest and pilot, yet the diff shows only "Binary files differ"
        shown = ", ".join(compiled[:10]) + (f" and {len(compiled) - 10} more" if len(compiled) > 10 else "")
        return refuse_candidate(ctx, state, info, f"refused: {shown}: {COMPILED_RULE}")
    if unreviewed:  # A file git leaves out of the commit would still run in the backtest and pilot
        shown = ", ".join(unreviewed[:10]) + (f" and {len(unreviewed) - 10} more" if len(unreviewed) > 10 else "")
        return refuse_candidate(
            ctx, state, info, f"refused: {shown}: ignored by git, so never committed or reviewed, yet it would run"
        )
    control = gw.git_control_files(changed)
    if control:
        return refuse_candidate(ctx, state, info, f"refused: {', '.join(control)}: {gw.GIT_CONTROL_RULE}")
    swapped = _model_swapped(harness, path, changed)
    if swapped:
        return refuse_candidate(ctx, state, info, swapped)
    check = check_candidate(
        changed,
        wf.diff(path, cand.base_sha),
        harness,
        declared_factors=tuple(info["factors"]),
        justification=info["justification"],
    )
    if not check.ok:
        return refuse_candidate(ctx, state, info, check.reason)
    if check.factors and check.factors[0] != info["factor"] and len(check.factors) == 1:
        info["factor"] = check.factors[0]  # the classifier's reading of the diff wins over the declaration
    restored = _restored(ctx, harness, path, changed)
    if restored:
        info["restores_range"] = list(restored)  # decided by non-inferiority (diagnostics.stats)
    restarts = _restarts(ctx, harness, path)
    if restarts:
        info["restarts"] = list(restarts)  # its pilots start from the starting model (agent/adapters/pilots.py)
    head = ""
    if not cand.committed:
        extra = {"Skill": info["skill"]} if info["skill"] else {}
        if info["justification"]:
            extra["Justification"] = info["justification"]
        name = candidate_name(state["session_id"], info["id"])
        summary = title.strip().removeprefix(f"{info['slug']}:").strip() or info["slug"]
        message = gw.InterventionMessage(
            title=f"{name}: {summary}",  # cut to git's subject length; the whole title then opens the body
            hypothesis=info["hypothesis"],
            factor=info["factor"],
            success_criterion=info["success_criterion"],
            extra=extra,
        )
        head = gw.commit_candidate(path, message)
    info["commit"] = head or _repo(state).commit(info["branch"]).hexsha
    with ledger.db(ledger.store_url(ctx)) as db:
        _ensure_row(db, state, info)
    return info


def _model_swapped(base: Harness, worktree: Path, changed: list[str]) -> str:
    """The refusal when the candidate changes the setting naming the model that trains, else ''."""
    from agent.decisions.knobs import model_settings
    from harness.manifest import BACKEND_NAMES, load_harness

    files = {base.manifest.trainer.config, *(base.manifest.trainer.settings(b) for b in BACKEND_NAMES)}
    if not files & set(changed):
        return ""
    try:
        before, after = model_settings(base), model_settings(load_harness(worktree))
    except (ValueError, OSError):
        return ""  # the candidate's harness does not load: its backtest and run say why
    moved = [k for k in before if k in after and before[k] != after[k]]  # an unreadable file: its run says why
    if not moved:
        return ""
    return (
        f"refused: {', '.join(moved)} changed: the model that trains is fixed for the session (a candidate changes "
        "the harness, not the policy); start a new session to train another model"
    )


def _restored(ctx: Context, harness: Harness, worktree: Path, changed: list[str]) -> tuple[str, ...]:
    """The settings the candidate only moves back into their documented range (`knobs.range_restoration`)."""
    from agent.decisions.knobs import range_restoration
    from harness.manifest import load_harness

    if len(changed) != 1:
        return ()  # more than the settings file changed: never a restoration
    try:
        return range_restoration(harness, load_harness(worktree), ctx.backend, changed)
    except (ValueError, OSError):
        return ()  # the candidate's harness does not load: its backtest and run say why; no special rule applies


def _restarts(ctx: Context, harness: Harness, worktree: Path) -> tuple[str, ...]:
    """The settings the candidate changes that act only from the starting model (`knobs.start_changes`)."""
    from agent.decisions.knobs import start_changes
    from harness.manifest import load_harness

    try:
        return start_changes(harness, load_harness(worktree), ctx.backend)
    except (ValueError, OSError):
        return ()  # the candidate's harness does not load: its backtest and run say why


def refuse_candidate(ctx: Context, state: State, info: CandidateInfo, reason: str) -> CandidateInfo:
    """Mark a candidate refused with its reason (recorded; the session goes on).

    Its worktree is restored to the base commit first, so nothing it changed (a protected file written
    through a link, a link itself) stays on disk; the reason and the store row keep the record.
    """
    from sandboxes.git_recovery import restore_to_base
    from store.repository import update_candidate_status

    restore_to_base(Path(info["worktree"]), info["branch"])
    info["status"], info["reason"] = "refused", reason
    with ledger.db(ledger.store_url(ctx)) as db:
        _ensure_row(db, state, info)
        update_candidate_status(db, info["id"], "refused", refusal_reason=reason)
    return info


def _repo(state: State) -> Any:
    from git import Repo

    return Repo(state["harness_dir"])


def _ensure_row(db: Any, state: State, info: CandidateInfo) -> None:
    from skills.repository import skill_id_of
    from store.repository import version_for_run

    version = version_for_run(db, state["session_id"], state["version"]["run_id"])
    assert version is not None, f"incumbent run {state['version']['run_id']} has no ledger row"
    factor = info["factor"] if info["factor"] in FACTORS else "trainer"
    declared = [f for f in info["factors"] if f in FACTORS] or [factor]
    if factor not in declared:
        declared.append(factor)
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
        factors_declared=declared,
        justification=info["justification"] or None,
        # the stored skill (seed, learned or user) it applies, first named; a probe is no stored skill
        skill_id=skill_id_of(db, info["skill"].split(",")[0]) if info["skill"] else None,
    )
