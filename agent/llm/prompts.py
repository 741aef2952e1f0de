"""Prompts of the meta LLM (the `llm` policy): constants and one pure function that renders the briefing.

The briefing is a bounded summary (alerts, key metrics, budgets, the editable surface), never raw logs:
the model pulls details through its tools (agent/llm/tools.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SYSTEM_PROMPT = """\
You are the meta-controller of EvoTrainer. You improve an RL training harness (reward code, group
filters, data selection, trainer settings, diagnostics) by proposing single-factor interventions.

Work like an RL engineer:
1. Read the health report (read_health_report) and look at the evidence rollouts behind the alerts
   (sample_rollouts). Search stored skills and past cases (search_skills, search_cases) before inventing.
2. For each intervention: create_candidate (a git branch + worktree) with a written hypothesis, the ONE
   factor it changes (reward | filter | data | trainer | diagnostic | env) and a falsifiable success criterion.
   Then edit files in that worktree (read_file, write_file, apply_patch, propose_diagnostic), check it
   with request_backtest on the cached rollouts, and submit_candidate. A refused submission is recorded;
   read the reason and, if you still believe in the idea, create a new candidate that respects the rules.
3. Call finish when you have submitted what you want to try (or decided nothing is worth trying).

Rules the tools enforce (a violation comes back as an error message; the session goes on):
- Only files on the editable surface may be read or changed. The strict evaluator, the held-out data and
  the manifest are protected: you never see or change them.
- One factor per candidate. A bundle of factors needs every factor declared and a justification.
- A higher training reward alone never promotes anything: the held-out strict score decides.
- Budgets: a fixed number of candidates, backtests and analysis runs per iteration.
Keep tool calls purposeful: each result is truncated and old results are summarised."""

BRIEFING_TEMPLATE = """\
Session {session_id}, iteration {iteration}. Incumbent v{version} (run {run_id}): strict held-out
accuracy {strict_acc:.3f}, training reward {train_reward:.3f}, {steps} training steps.
Harness '{harness_name}' (domain {domain}). Editable surface: {editable}. Protected: {protected}.
Reward entry point: {reward}. Group filter: {group_filter}. Trainer config: {trainer_config}.
Diagnostics folder: {diagnostics}.

Alerts in the health report:
{alerts}

Earlier candidates in this session:
{history}

Budgets this iteration: {max_candidates} candidate(s), {max_backtests} backtest(s), {max_analyses}
analysis run(s), {max_turns} model turns. Propose at most {max_candidates} candidate(s), then call finish."""


def render_briefing(
    *,
    session_id: str,
    iteration: int,
    version: Mapping[str, Any],
    harness: Mapping[str, Any],
    alerts: Sequence[Mapping[str, Any]],
    earlier: Sequence[Mapping[str, Any]],
    budgets: Mapping[str, int],
) -> str:
    """Return the first user message: the incumbent, the surface, the alerts and the budgets, in brief."""
    alert_lines = [
        f"- [{a['severity']}] {a['alert_id']} ({a['layer']}): {a['message']}"
        f" ({len(a.get('evidence_rollout_ids') or [])} evidence rollouts)"
        for a in alerts
    ]
    history = [f"- {c['id']} [{c['status']}] {c['factor']}: {c['hypothesis'][:160]}" for c in earlier[-10:]]
    return BRIEFING_TEMPLATE.format(
        session_id=session_id,
        iteration=iteration,
        version=version["index"],
        run_id=version["run_id"],
        strict_acc=version["strict_acc"],
        train_reward=version["train_reward"],
        steps=version["steps"],
        alerts="\n".join(alert_lines) or "- none (no warning or critical finding)",
        history="\n".join(history) or "- none",
        max_turns=budgets["max_turns"],
        max_candidates=budgets["max_candidates"],
        max_backtests=budgets["max_backtests"],
        max_analyses=budgets["max_analyses"],
        **harness,
    )


ELIDED = "[older tool result elided to bound the context; call the tool again if you need it]"
TURNS_EXHAUSTED = (
    "turn budget of this iteration spent ({turns} model calls); an open candidate is refused, not submitted"
)
