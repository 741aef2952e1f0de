"""The session's HTML report lists the headline agentic metrics per version, and only for agentic runs."""

from __future__ import annotations

import datetime as dt

from agent.reporting.html import render_html
from agent.reporting.records import SessionReport, VersionHealth
from diagnostics.agentic_docs import HEADLINE_METRICS


def _report(health: list[VersionHealth]) -> SessionReport:
    return SessionReport(
        session_id="s", created_at=dt.datetime(2026, 1, 1), mode="evotrainer", policy="heuristic", llm_model=None,
        status="done", harness_path="h", repo_path="r", max_iterations=1, max_train_steps=1, steps_used=1,
        wall_time_s=1.0, versions=[], candidates=[], version_runs=[], pilot_runs={}, alerts=[], health=health,
        rollouts=[], skill_uses=[], skills_created=[], llm_usage=[], notes=[],
    )  # fmt: skip


def test_agentic_versions_get_a_table_of_their_turn_and_tool_metrics() -> None:
    metrics = {"turns_mean": 4.5, "abandon_rate": 0.625, "act_then_verify_rate": float("nan")}
    rows = [
        VersionHealth(0, "run-v0", "file", 20, 18, [], "", metrics),
        VersionHealth(1, "run-v1", "file", 20, 20, [], "", {"turns_mean": 6.0, "abandon_rate": 0.0}),
    ]
    page = render_html(_report(rows))
    assert '<table id="agentic-table">' in page
    table = page.split('<table id="agentic-table">', 1)[1].split("</table>", 1)[0]
    assert "<th>turns_mean</th>" in table and "<th>abandon_rate</th>" in table
    assert "<td>4.500</td>" in table and "<td>0.625</td>" in table and "<td>—</td>" in table  # NaN shows as a dash
    assert set(metrics) <= set(HEADLINE_METRICS)


def test_single_turn_versions_get_no_agentic_table() -> None:
    page = render_html(_report([VersionHealth(0, "run-v0", "file", 20, 18, [], "")]))
    assert "agentic-table" not in page and "Agentic behaviour" not in page
