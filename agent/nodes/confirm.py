"""confirm: pool the merge candidate's replicate pilots with its first pilot; merge only if it replicates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from agent.context import Context
from agent.decisions.evidence import Replication, apply_replication, final_strict_scores, replicate_check
from agent.launch.session_guard import trusted_session
from agent.nodes.common import cached_report, run_table, session_answer, session_roles
from agent.routing import CONTROL_ID, current
from agent.state import PilotInfo, State
from diagnostics.findings import Finding, Severity
from harness.answers import AnswerProtocol


def confirm(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Turn the merge into a prune unless the improvement holds on the fresh seeds (agent/decisions/evidence.py)."""
    trusted_session(runtime.context, state)  # the caller's own session; its paths and revisions checked
    rep = state["replication"]
    cid = rep["candidate_id"]
    pilots = current(state.get("pilots"), state["iteration"])
    by_key = {(p["candidate_id"], p.get("replicate", 0)): p for p in pilots}
    rounds = range(1, int(rep["replicates"]) + 1)
    runs = [(by_key.get((CONTROL_ID, r)), by_key.get((cid, r))) for r in rounds]
    failed = [p for pair in runs for p in pair if p is None or p["outcome"] != "ok"]
    if failed:
        why = "; ".join(f"{p['run_id']}: {p['outcome']} {p['message']}" if p else "missing run" for p in failed)
        result = Replication(confirmed=False, pooled=None, replicate_deltas=(), outcome_class="insufficient",
                             evidence=f"replicate run failed: {why}")  # fmt: skip
    else:
        answer, roles = session_answer(state), session_roles(state)
        first = (_scores(by_key[(CONTROL_ID, 0)], answer), _scores(by_key[(cid, 0)], answer))
        pairs = [(_scores(c, answer), _scores(k, answer)) for c, k in runs]  # type: ignore[arg-type]
        alerts_new: list[Finding] = []
        alerts_control: list[Finding] = []
        for control, cand in runs:
            control_report = cached_report(Path(control["run_dir"]), None, answer, roles)  # type: ignore[index]
            alerts_control += control_report.alerts(Severity.WARNING)
            cand_report = cached_report(Path(cand["run_dir"]), control_report, answer, roles)  # type: ignore[index]
            alerts_new += cand_report.alerts(Severity.WARNING)
        restoration = any(c["id"] == cid and c.get("restores_range") for c in state.get("candidates", []))
        result = replicate_check(first, pairs, alerts_new, alerts_control, runtime.context.min_effect, restoration)
    return {"decisions": apply_replication(state.get("decisions", []), cid, result)}


def _scores(pilot: PilotInfo, answer: AnswerProtocol | None) -> dict[str, float]:
    return final_strict_scores(run_table(Path(pilot["run_dir"]), answer).val)
