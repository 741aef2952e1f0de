"""record: apply the iteration's decisions to git and the store, advance the incumbent, check the budget.

Every new version is one commit on the session's main line, tagged `evo/<session>/v<n>`: the merge of the
winner, or an empty commit when the incumbent harness trained on (the control run is adopted). Subjects
name the version and the candidate (`v2: merge v2.1-raise-length-budget`); the evidence is in the body.
Idempotent: decision commits, merges, continuation commits and tags are no-ops when already done, ledger
rows are keyed by run id, cases by candidate id, skill results settle a use once.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

from langgraph.runtime import Runtime

from agent.adapters import ledger
from agent.adapters.pilots import candidate_name
from agent.context import Context
from agent.decisions.rollback import own_start
from agent.launch.session_guard import trusted_session
from agent.nodes.common import session_main_commit
from agent.routing import CONTROL_ID, current
from agent.state import CandidateInfo, DecisionInfo, State, VersionInfo

STATUS_OF = {"merge": "merged", "keep": "kept", "prune": "pruned", "revert": "reverted"}


def record(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Record decisions, merge the winner (or continue the incumbent), and decide whether to go on."""
    trusted_session(runtime.context, state)  # the caller's own session; its paths and revisions checked
    ctx, it = runtime.context, state["iteration"]
    candidates = [CandidateInfo(**c) for c in state.get("candidates", [])]
    mine = {c["id"]: c for c in candidates if c["iteration"] == it}
    decisions = [d for d in state.get("decisions", []) if d["candidate_id"] in mine]
    failed = {b["candidate_id"]: b for b in current(state.get("backtests"), it) if b["verdict"] == "fail"}
    for cid in failed:
        mine[cid]["status"] = "backtest_failed"
    promote = state.get("gate_answer") or {}
    for d in decisions:
        if (
            d["decision"] == "merge"
            and promote.get("gate") == "promote"
            and promote.get("iteration") == it
            and not promote.get("approved")
        ):
            d["decision"], d["rationale"] = "keep", d["rationale"] + f"; promotion rejected: {promote.get('note', '')}"
        mine[d["candidate_id"]]["status"] = STATUS_OF[d["decision"]]
    ran = current(state.get("pilots"), it)
    pilots = {p["candidate_id"]: p for p in ran if not p.get("replicate")}  # replicates never become versions
    winner = next((d for d in decisions if d["decision"] == "merge"), None)
    version = _advance(ctx, state, mine, decisions, winner, pilots)
    _store(ctx, state, mine, decisions, winner, version, failed)
    spent = sum(p["steps"] for p in ran)
    steps_used = state.get("steps_used", 0) + spent
    failures = 0 if winner else state.get("failures_in_row", 0) + 1
    summary = {
        "iteration": it,
        "version": version["index"],
        "merged": winner["candidate_id"] if winner else None,
        "strict_acc": version["strict_acc"],
        "candidates": len(mine),
        "decisions": {d["candidate_id"]: d["decision"] for d in decisions},
    }
    trained = not pilots or any(p["outcome"] == "ok" for p in pilots.values())  # no pilots: a gate said no
    stop = _stop_reason(ctx, state, it, steps_used, trained=trained)
    if not stop and not decisions and version["run_id"] != state["version"]["run_id"]:
        stop = _decline(ctx, state, version, steps_used)
    _store_budget(ctx, state, steps_used)
    return {
        "candidates": candidates,
        "version": version,
        "iteration": it + 1,
        "steps_used": steps_used,
        "failures_in_row": failures,
        "decisions": [],
        "history": [summary],
        "status": "finished" if stop else "running",
        "stop_reason": stop,
    }


def _advance(
    ctx: Context,
    state: State,
    mine: dict[str, CandidateInfo],
    decisions: list[DecisionInfo],
    winner: DecisionInfo | None,
    pilots: dict[str, Any],
) -> VersionInfo:
    """Write decision commits, merge the winner, and return the new incumbent."""
    from git import Repo

    from sandboxes import git_versions as gv
    from sandboxes import git_worktree as gw

    version, session_id = state["version"], state["session_id"]
    repo = Repo(state["harness_dir"])
    for d in decisions:
        name = candidate_name(session_id, d["candidate_id"])
        gw.amend_decision_note(
            repo,
            mine[d["candidate_id"]]["branch"],
            f"{d['decision']} {name} ({d['outcome']})\n\n{d['rationale']}",
            decision=d["decision"],
        )
    n = version["index"] + 1
    if winner is not None:
        cand, pilot = mine[winner["candidate_id"]], pilots[winner["candidate_id"]]
        name = candidate_name(session_id, cand["id"])
        evidence = f"{cand['hypothesis']}\n\nEvidence: {winner['rationale']}"
        gw.merge_candidate(
            repo, version["branch"], cand["branch"], _version_message(n, f"merge {name}", evidence, pilot)
        )
    elif pilots.get(CONTROL_ID, {}).get("outcome") == "ok":
        pilot = pilots[CONTROL_ID]  # nothing beat the control: the incumbent harness continues training
        why = "no candidate beat the control" if decisions else "no candidate this iteration"
        evidence = "\n".join(f"{candidate_name(session_id, d['candidate_id'])}: {d['rationale']}" for d in decisions)
        subject = f"v{version['index']} harness trained on ({why})"
        gv.continue_main(repo, version["branch"], _version_message(n, subject, evidence, pilot))
    else:
        return version
    _, commit = session_main_commit(Path(state["harness_dir"]), session_id)
    gv.tag_version(repo, session_id, version["index"], version["commit"])
    gv.tag_version(repo, session_id, n, commit)
    return VersionInfo(
        index=n,
        branch=version["branch"],
        commit=commit,
        run_id=pilot["run_id"],
        run_dir=pilot["run_dir"],
        checkpoint=pilot["checkpoint"],
        strict_acc=pilot["strict_acc"],
        train_reward=pilot["train_reward"],
        steps=pilot.get("start_steps", version["steps"]) + pilot["steps"],
        # a pilot that restarted from the starting model (pilots.py) started from its own step-0 policy
        start_checkpoint=pilot.get("init_checkpoint", version["checkpoint"]) or own_start(pilot["run_dir"]),
        start_steps=pilot.get("start_steps", version["steps"]),
    )


def _version_message(index: int, subject: str, evidence: str, pilot: dict[str, Any]) -> str:
    """A main-line commit message: ``v<n>: <subject>``, the evidence, and the run that trained the policy."""
    run = f"Run: {pilot['run_id']}\nStrict-Acc: {pilot['strict_acc']:.3f}\nTrain-Reward: {pilot['train_reward']:.3f}"
    return f"v{index}: {subject}\n\n" + (f"{evidence.strip()}\n\n" if evidence.strip() else "") + run


def _store(
    ctx: Context,
    state: State,
    mine: dict[str, CandidateInfo],
    decisions: list[DecisionInfo],
    winner: DecisionInfo | None,
    new: VersionInfo,
    failed: dict[str, Any],
) -> None:
    from agent.decisions.same_edit import case_signature
    from agent.policies.learning import learn_from_merge, probe_case, probe_fields
    from skills.repository import record_result, use_of_candidate
    from store import repository
    from store.types import DecisionOutcome

    session_id = state["session_id"]
    domain = _domain(state)
    with ledger.db(ledger.store_url(ctx)) as db:
        for cand in mine.values():
            if cand["status"] != "refused" and repository.find_candidate(db, cand["id"]) is not None:
                repository.update_candidate_status(db, cand["id"], cand["status"])  # type: ignore[arg-type]
        for d in decisions:
            cand = mine[d["candidate_id"]]
            use = use_of_candidate(db, cand["id"])
            if use is not None and d["outcome"] != "insufficient":
                record_result(db, use.id, win=d["decision"] == "merge")
            if d["decision"] != "merge":
                ledger.ensure_case(
                    db,
                    session_id=session_id,
                    candidate_id=cand["id"],
                    kind="negative_evidence",
                    domain=domain,
                    summary=f"{candidate_name(session_id, cand['id'])}: {d['decision']} ({d['outcome']}): "
                    f"{d['rationale']}",
                    signature=case_signature(state["report"]["metrics"], cand),  # with the edit it tried
                    outcome=d["outcome"],
                    **probe_fields(cand),  # an exploration probe: not retried on the same symptoms
                )
        for cid, bt in failed.items():
            reasons = "; ".join(bt["reasons"]) or bt["outcome"]
            probe_case(db, state, mine[cid], f"{candidate_name(session_id, cid)}: backtest failed: {reasons}")
        if winner is not None and new["run_id"] != state["version"]["run_id"]:
            cand = mine[winner["candidate_id"]]
            learned = learn_from_merge(db, ctx, state, cand, winner, new["index"])
            if learned:
                cand["learned_skill"] = learned
        old = state["version"]
        if new["run_id"] != old["run_id"]:
            parent = repository.version_for_run(db, session_id, old["run_id"])
            rationale = (
                f"merged {candidate_name(session_id, winner['candidate_id'])}: {winner['rationale']}"
                if winner
                else "no candidate beat the control: the incumbent harness continues (control run adopted)"
                if decisions
                else "no candidate this iteration: the incumbent harness continues (control run adopted)"
            )
            row = ledger.ensure_version(
                db,
                session_id=session_id,
                run_id=new["run_id"],
                branch=new["branch"],
                commit_sha=new["commit"],
                parent_id=parent.id if parent else None,
                diff_stat=_diff_stat(state["harness_dir"], old["commit"], new["commit"]),
                rationale=rationale,
            )
            repository.record_decision(
                db,
                row.id,
                decision="merge" if winner else "keep",
                outcome=cast(DecisionOutcome, winner["outcome"]) if winner else "insufficient",
                rationale=rationale,
                strict_score=new["strict_acc"],
                train_score=new["train_reward"],
            )


def _store_budget(ctx: Context, state: State, steps_used: int) -> None:
    """Write the absolute budget use (idempotent, unlike an increment, when the node re-runs)."""
    from store.repository import set_session_progress

    wall_s = time.time() - state.get("started_at", time.time())
    with ledger.db(ledger.store_url(ctx)) as db:
        set_session_progress(db, state["session_id"], steps_used=steps_used, wall_time_s=wall_s)


def _diff_stat(repo_dir: str, a: str, b: str) -> tuple[int, int, int]:
    """(files changed, insertions, deletions) between two commits of the session repository (verified)."""
    from sandboxes import git_revisions as gr

    old, new = gr.verified_commit(repo_dir, a, "version.commit"), gr.verified_commit(repo_dir, b, "version.commit")
    return gr.diff_numstat(repo_dir, old, new)


def _domain(state: State) -> str:
    from harness.manifest import load_harness

    return load_harness(Path(state["harness_dir"])).manifest.domain


def _decline(ctx: Context, state: State, new: VersionInfo, steps_used: int) -> str:
    """A control-only iteration that made the incumbent significantly worse ends the session.

    Compares the continued version's final per-prompt strict scores with its continuation's (the same
    held-out prompts every decision uses); the final summary then recommends the better version as usual.
    """
    from agent.decisions.evidence import decline_stop, final_strict_scores
    from agent.nodes.common import run_table, session_answer

    answer = session_answer(state)
    old = state["version"]
    try:
        before = final_strict_scores(run_table(Path(old["run_dir"]), answer).val)
        after = final_strict_scores(run_table(Path(new["run_dir"]), answer).val)
    except (OSError, ValueError):  # a version without readable held-out scores gives no evidence of a decline
        return ""
    reason, _ = decline_stop(before, after, max(ctx.max_train_steps - steps_used, 0), ctx.max_train_steps)
    return reason


def _stop_reason(ctx: Context, state: State, it: int, steps_used: int, trained: bool) -> str:
    if state.get("llm_stop_reason"):
        return str(state["llm_stop_reason"])
    if it >= ctx.max_iterations:
        return f"iteration budget reached ({ctx.max_iterations})"
    if steps_used + 2 * ctx.pilot_steps > ctx.max_train_steps:
        return f"training-step budget reached ({steps_used}/{ctx.max_train_steps})"
    if time.time() - state.get("started_at", time.time()) > ctx.max_wall_s:
        return f"wall-time budget reached ({ctx.max_wall_s:.0f} s)"
    if not trained:
        return "no run finished this iteration (see the runs' outcomes): the incumbent cannot advance"
    return ""


def finish(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Diagnose and tag the final version, and mark the session finished in the store.

    The final version was trained by the last iteration and never diagnosed (the loop diagnoses the
    incumbent before proposing): its health report is what the end-of-run summary and the report show.
    """
    from store.repository import set_session_status

    trusted_session(runtime.context, state)  # the caller's own session; its paths and revisions checked
    update: dict[str, Any] = {"status": "finished"}
    version = state.get("version")
    if version:
        from git import Repo

        from agent.nodes.diagnose import diagnose
        from sandboxes import git_versions as gv

        gv.tag_version(Repo(state["harness_dir"]), state["session_id"], version["index"], version["commit"])
        update["report"] = diagnose(state, runtime)["report"]  # idempotent: stored once per run
    with ledger.db(ledger.store_url(runtime.context)) as db:
        set_session_status(db, state["session_id"], "finished")
    return update
