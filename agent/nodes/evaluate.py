"""evaluate: compare each candidate pilot with the control on per-prompt strict scores; write health reports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from agent.context import Context
from agent.decisions.evidence import Evaluation, classify_outcome, classify_restoration, final_strict_scores, paired
from agent.launch.session_guard import trusted_session
from agent.nodes.common import cached_report, run_table, session_answer, session_roles
from agent.routing import CONTROL_ID, current
from agent.state import PilotInfo, State
from diagnostics.findings import HealthReport, Severity, new_alerts
from diagnostics.stats import paired_bootstrap
from diagnostics.tool_roles import ToolRoles
from harness.answers import AnswerProtocol


def evaluate(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Evaluate the current iteration's pilots against the control run (pure reads of their artefacts)."""
    trusted_session(runtime.context, state)  # the caller's own session; its paths and revisions checked
    pilots = [p for p in current(state.get("pilots"), state["iteration"]) if not p.get("replicate")]
    control = next((p for p in pilots if p["candidate_id"] == CONTROL_ID), None)
    assert control is not None, "every pilot fan-out includes the control run"
    answer, roles = session_answer(state), session_roles(state)
    ok = control["outcome"] == "ok"
    control_report = cached_report(Path(control["run_dir"]), None, answer, roles) if ok else None
    control_scores = _scores(control, answer) if control_report else {}
    restoring = {c["id"] for c in state.get("candidates", []) if c.get("restores_range")}
    evaluations = [
        _contained(
            p, control, control_report, control_scores, runtime.context.min_effect, answer, roles,
            restoration=p["candidate_id"] in restoring,
        )
        for p in pilots
        if p["candidate_id"] != CONTROL_ID
    ]  # fmt: skip
    return {"evaluations": [e.to_state(state["iteration"]) for e in evaluations]}


def _contained(
    pilot: PilotInfo,
    control: PilotInfo,
    control_report: HealthReport | None,
    control_scores: dict[str, float],
    min_effect: float,
    answer: AnswerProtocol | None,
    roles: ToolRoles | None = None,
    restoration: bool = False,
) -> Evaluation:
    """`_evaluate_one`, with a failure to read one pilot's artefacts recorded as that candidate's evaluation."""
    try:
        return _evaluate_one(pilot, control, control_report, control_scores, min_effect, answer, roles, restoration)
    except Exception as exc:  # one candidate's unreadable evidence must not end the session
        why = f"its run's artefacts could not be evaluated ({type(exc).__name__}: {exc})"
        return Evaluation.failed(pilot["candidate_id"], why, pilot["train_reward"], control["train_reward"])


def _evaluate_one(
    pilot: PilotInfo,
    control: PilotInfo,
    control_report: HealthReport | None,
    control_scores: dict[str, float],
    min_effect: float,
    answer: AnswerProtocol | None,
    roles: ToolRoles | None = None,
    restoration: bool = False,
) -> Evaluation:
    """Compare one pilot with the control: superiority (`classify_outcome`), or non-inferiority for a candidate
    that only moves settings back into their documented range (`classify_restoration`)."""
    if pilot["outcome"] != "ok" or control_report is None:
        why = pilot["message"] if pilot["outcome"] != "ok" else f"control run failed: {control['message']}"
        return Evaluation.failed(
            pilot["candidate_id"], f"{pilot['outcome']}: {why}", pilot["train_reward"], control["train_reward"]
        )
    report = cached_report(Path(pilot["run_dir"]), control_report, answer, roles)
    a, b = paired(control_scores, _scores(pilot, answer))
    if not a:
        why = "no strict validation scores to compare"
        return Evaluation.failed(pilot["candidate_id"], why, pilot["train_reward"], control["train_reward"])
    comparison = paired_bootstrap(a, b)
    fresh = new_alerts(report.alerts(Severity.WARNING), control_report.alerts(Severity.WARNING), Severity.WARNING)
    classify = classify_restoration if restoration else classify_outcome
    outcome = classify(comparison, report.alerts(Severity.WARNING), control_report.alerts(Severity.WARNING), min_effect)
    return Evaluation(
        candidate_id=pilot["candidate_id"],
        run_ok=True,
        message="",
        comparison=comparison,
        outcome_class=outcome,
        train_reward=pilot["train_reward"],
        control_train_reward=control["train_reward"],
        new_alerts=tuple(f.alert_id for f in fresh),
        restoration=restoration,
    )


def _scores(pilot: PilotInfo, answer: AnswerProtocol | None) -> dict[str, float]:
    """Per-prompt strict scores from the same table the pilot's health report was built from."""
    return final_strict_scores(run_table(Path(pilot["run_dir"]), answer).val)
