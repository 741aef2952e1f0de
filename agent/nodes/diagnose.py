"""diagnose: write the incumbent's health report (four layers), flag a diagnostic gap, and say whether the
incumbent's own run damaged its policy, so candidates restart from before it (agent/decisions/rollback.py).

An agentic run's report also carries the replay check of the episode contract (`sandboxes/env_replay.py`).
The report also carries the reward evidence of the last iteration's arms that trained the incumbent's reward
code (`diagnostics/shared_reward.py`): a reward exploit one of them learned is latent in the incumbent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from agent.adapters import ledger
from agent.context import Context
from agent.decisions.rollback import REWARD_HACKING, rollback_point
from agent.launch.session_guard import trusted_session
from agent.nodes.common import REPORT_FILE, cached_report, run_table, session_answer, session_roles
from agent.state import CandidateInfo, PilotInfo, State
from diagnostics.env_replay import with_replay_evidence
from diagnostics.findings import HealthReport, Severity
from diagnostics.shared_reward import with_shared_reward_evidence
from harness.manifest import load_harness
from sandboxes.env_replay import run_evidence


def diagnose(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Build (or re-read) the incumbent run's health report, store it, and flag a diagnostic gap."""
    trusted_session(runtime.context, state)  # the caller's own session; its paths and revisions checked
    version = state["version"]
    run_dir = Path(version["run_dir"])
    parent = HealthReport.from_json(state["report"]) if state.get("report") else None
    answer = session_answer(state)
    roles = session_roles(state)
    report = cached_report(run_dir, parent, answer, roles)
    arms = [cached_report(Path(p["run_dir"]), None, answer, roles) for p in shared_reward_arms(state)]
    report = with_shared_reward_evidence(report, arms)
    if runtime.context.mode == "evotrainer":  # the episode contract, replayed in the sandbox (agentic harnesses)
        replayed = run_evidence(load_harness(Path(state["harness_dir"])), run_dir, runtime.context.sandbox)
        report = with_replay_evidence(report, replayed)
    with ledger.db(ledger.store_url(runtime.context)) as db:
        ledger.ensure_health_report(
            db,
            session_id=state["session_id"],
            run_id=version["run_id"],
            path=str(run_dir / REPORT_FILE),
            findings=[_finding_row(f) for f in report.findings if f.fired],
        )
    gap = is_diagnostic_gap(report, state.get("failures_in_row", 0))
    ctx = runtime.context  # score-only decides on training reward alone, so it never reads held-out drops
    hacked = any(f.alert_id == REWARD_HACKING and f.severity is Severity.CRITICAL for f in report.findings)
    rollback = (
        rollback_point(version, ctx.min_effect, run_table(run_dir, answer).val, hacked=hacked)
        if ctx.mode == "evotrainer"
        else {}
    )
    return {"report": report.to_json(), "gap": gap, "rollback": rollback}


def shared_reward_arms(state: State) -> list[PilotInfo]:
    """The last iteration's trained candidate arms whose harness has the incumbent's reward code.

    None when that iteration merged a reward change (its other arms trained the old reward); a reward
    candidate's own arm never counts. The control is the incumbent's run itself, already reported.
    """
    last = state.get("iteration", 0) - 1
    candidates = {c["id"]: c for c in state.get("candidates", []) if c["iteration"] == last}

    def changes_reward(c: CandidateInfo) -> bool:
        return "reward" in {c["factor"], *c.get("factors", [])}

    if any(c["status"] == "merged" and changes_reward(c) for c in candidates.values()):
        return []
    return [
        p
        for p in state.get("pilots", [])
        if p["iteration"] == last
        and p["outcome"] == "ok"
        and p["candidate_id"] in candidates
        and not changes_reward(candidates[p["candidate_id"]])
        and Path(p["run_dir"]).is_dir()
    ]


def is_diagnostic_gap(report: HealthReport, failures_in_row: int) -> bool:
    """The evidence cannot explain the version: the last iteration failed yet no alert fires (paper §2.1)."""
    return failures_in_row > 0 and not report.alerts(Severity.WARNING)


def _finding_row(finding: Any) -> dict[str, Any]:
    row = finding.to_json()
    evidence = {"rollouts": row["evidence_rollout_ids"], "numbers": row["numbers"], "rule": row["rule"]}
    keys = ("alert_id", "layer", "severity", "message", "value", "threshold")
    return {**{k: row[k] for k in keys}, "evidence": evidence}
