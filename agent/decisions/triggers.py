"""The variables skill triggers read: a health report's metrics plus what the harness code says (skills/context.py),
and the record of the triggers those variables could not decide (no silent blind spots)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from harness.manifest import Harness

if TYPE_CHECKING:
    from agent.context import Context
    from agent.state import State

log = logging.getLogger(__name__)


def trigger_metrics(report_metrics: dict[str, Any], harness: Harness) -> dict[str, Any]:
    """The health metrics plus the context variables skill triggers read (domain, filter present, ...)."""
    from diagnostics.shared_reward import reward_metrics_with_shared
    from skills.context import trigger_context

    # a reward disagreement seen on an arm that trains the same reward code counts as the incumbent's
    metrics = reward_metrics_with_shared({k: v for k, v in report_metrics.items() if v is not None})
    gf = harness.group_filter
    extra = trigger_context(
        harness.manifest.domain,
        harness.path(harness.reward.path).read_text(),
        harness.path(gf.path).read_text() if gf else None,
        filter_function=gf.function if gf else "filter_groups",
    )
    return {**metrics, **extra}


def record_unevaluated_triggers(ctx: Context, state: State, harness: Harness, metrics: dict[str, Any]) -> list[str]:
    """Record, in case memory, every stored skill whose trigger `metrics` leave unknown (so it is not matched).

    One `pattern` case per iteration (idempotent: a re-run node finds it), naming each skill and the metrics
    it read that had no value; the report's notes say why those have none. Returns the case's lines.
    """
    from agent.adapters import ledger
    from skills.patches import skill_fits
    from skills.repository import list_skills
    from skills.retrieval import unevaluated
    from store.repository import add_case, cases_for_domain

    domain = harness.manifest.domain
    with ledger.db(ledger.store_url(ctx)) as db:
        # a skill that cannot apply to this harness (an agentic one without an env, say) is no blind spot
        fitting = [r for r in list_skills(db, domain) if skill_fits(r.spec, harness) is None]
        gaps = unevaluated(fitting, metrics)
        if not gaps:
            return []
        lines = [f"{g.name} (no value for {', '.join(g.missing) or 'its inputs'})" for g in gaps]
        summary = (
            f"iteration {state['iteration']}: {len(gaps)} skill trigger(s) could not be evaluated, so were not "
            f"matched: {'; '.join(lines)}"
        )
        seen = any(c.session_id == state["session_id"] and c.summary == summary for c in cases_for_domain(db, domain))
        if not seen:
            missing = {g.name: list(g.missing) for g in gaps}
            signature = {"iteration": state["iteration"], "unevaluated_triggers": missing}
            add_case(db, session_id=state["session_id"], kind="pattern", domain=domain, summary=summary,
                     signature=signature)  # fmt: skip
    log.info("%s", summary)
    return lines
