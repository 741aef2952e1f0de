"""The variables skill triggers read: a health report's metrics plus what the harness code says (skills/context.py)."""

from __future__ import annotations

from typing import Any

from harness.manifest import Harness


def trigger_metrics(report_metrics: dict[str, Any], harness: Harness) -> dict[str, Any]:
    """The health metrics plus the context variables skill triggers read (domain, filter present, ...)."""
    from skills.context import trigger_context

    metrics = {k: v for k, v in report_metrics.items() if v is not None}
    gf = harness.group_filter
    extra = trigger_context(
        harness.manifest.domain,
        harness.path(harness.reward.path).read_text(),
        harness.path(gf.path).read_text() if gf else None,
        filter_function=gf.function if gf else "filter_groups",
    )
    return {**metrics, **extra}
