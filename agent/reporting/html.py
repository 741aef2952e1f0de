"""Render a `SessionReport` (or several, compared) as one self-contained HTML page.

plotly.js is inlined once in the page head (no CDN, no server: the file opens from disk offline);
each figure is a `div.plotly-graph-div` drawn by that script. Tables are plain HTML with stable ids
(`lineage-table`, `candidates-table`, `health-table`, `alerts-table`, `decisions-table`, `skills-table`,
`llm-usage-table`, `rollout-table-<n>`, `compare-table`) so tests and readers can find the sections. Every
text from the store, git or the artefacts (model output included) is HTML-escaped; numbers are rounded.
The rollout viewer (`rollouts_html.py`) is a `<select>` over per-run panels, switched by a few lines of inline
script; a chat model's special-token texts show as marked chips.

The page fits its width (checked in headless Chromium at 1400 and 1920 px): tables break long ids,
paths and model output anywhere rather than overflow, preformatted text wraps, and the agentic table lists
its metrics as rows, one column per version.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import cast

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from agent.reporting.artefacts import AGENTIC_PREFIX, RunCurves
from agent.reporting.cells import badge, esc, html_table, note_divs, num
from agent.reporting.figures import (
    STATUS_MEANING,
    agentic_figure,
    comparison_figure,
    curves_figure,
    lineage_figure,
    optim_figure,
    sources,
    sources_figure,
    stop_reasons,
    stops_figure,
)
from agent.reporting.records import CandidateEntry, SessionReport
from agent.reporting.rollouts_html import VIEWER_JS, rollouts_section
from agent.reporting.summary import summary_lines

NO_LLM = "heuristic policy: no LLM"
CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1400px; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; overflow-wrap: anywhere; }
th { background: #f2f2f2; }
pre { background: #f7f7f7; padding: 0.8em; font-size: 0.85em; white-space: pre-wrap; overflow-wrap: anywhere; }
summary, .note, .verdict { overflow-wrap: anywhere; }
.note { background: #fff4ce; border-left: 4px solid #e0b000; padding: 0.4em 0.8em; margin: 0.4em 0; }
.critical { color: #b00020; font-weight: bold; } .warning { color: #a36200; }
.badge { padding: 1px 6px; border-radius: 3px; color: #fff; font-size: 0.85em; }
.verdict { background: #eef6ee; border-left: 4px solid #2ca02c; padding: 0.4em 0.8em; }
.rollout-table .text { white-space: pre-wrap; font-family: monospace; }
.rollout-panel { display: none; } .rollout-panel.shown { display: block; }
.special { background: #e8eaf6; color: #303f9f; border-radius: 3px; padding: 0 2px; font-size: 0.85em; }
"""


def _figure_html(fig: go.Figure, div_id: str, height_px: int) -> str:
    fig.update_layout(height=height_px, margin={"l": 60, "r": 20, "t": 60, "b": 40})
    return cast(
        str, fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, default_height=f"{height_px}px")
    )


# --- sections ---------------------------------------------------------------------------------------------


def _summary_section(r: SessionReport) -> str:
    llm = r.llm_model if r.policy == "llm" else NO_LLM
    rows = [
        ("session", r.session_id),
        ("created (UTC)", r.created_at.strftime("%Y-%m-%d %H:%M:%S")),
        ("mode / policy", f"{r.mode} / {r.policy}"),
        ("controller model", llm),
        ("status", r.status),
        ("harness", r.harness_path),
        ("session repository", r.repo_path),
        ("budget", f"{r.steps_used}/{r.max_train_steps} training steps; {r.max_iterations} iterations"),
        ("final checkpoint", r.final_checkpoint or "—"),
        *_model_rows(r),
    ]
    table = html_table("summary-table", ("field", "value"), ((esc(k), esc(v)) for k, v in rows))
    verdict = ""
    if r.summary is not None:
        lines = "<br>".join(esc(x) for x in summary_lines(r.summary, report_hint=False))
        verdict = f'<div class="verdict" id="verdict">{lines}</div>'
    body = f"<h1>EvoTrainer session {esc(r.session_id)}</h1>{table}{verdict}{note_divs(r.notes)}"
    return f'<section id="summary">{body}</section>'


def _model_rows(r: SessionReport) -> list[tuple[str, str]]:
    """The model the runs trained (one row; one per model, naming its runs, if the folder changed under them)."""
    if len(r.models) == 1:
        return [("model trained", r.models[0].card.line())]
    return [("model trained", f"{m.card.line()} — runs {', '.join(m.run_ids)}") for m in r.models]


def _legend(r: SessionReport) -> str:
    statuses = sorted({c.status for c in r.candidates})
    items = "".join(f"<li>{badge(s)} {esc(STATUS_MEANING.get(s, s))}</li>" for s in statuses)
    return f'<ul id="lineage-legend">{items}</ul>' if items else ""


def _lineage_section(r: SessionReport) -> str:
    header = ("version", "parent", "commit", "decision", "outcome", "strict", "train reward", "lineage steps")
    versions = html_table(
        "lineage-table",
        (*header, "diff", "rationale"),
        (
            (
                f"v{v.index}",
                "—" if v.parent_index is None else f"v{v.parent_index}",
                f"<code>{esc(v.commit[:10])}</code>",
                esc(v.decision),
                esc(v.outcome),
                num(v.strict_score),
                num(v.train_score),
                str(v.lineage_steps),
                f"{v.diff_stat[0]} files, +{v.diff_stat[1]} −{v.diff_stat[2]}",
                esc(v.rationale),
            )
            for v in r.versions
        ),
    )
    candidates = html_table(
        "candidates-table",
        ("candidate", "iteration", "from", "factor", "skill", "decision", "hypothesis"),
        (
            (
                f"<code>{esc(c.name)}</code>",
                str(c.iteration),
                "—" if c.parent_index is None else f"v{c.parent_index}",
                esc(c.factor),
                esc(", ".join(c.skills)) if c.skills else "— (none)",
                badge(c.status) + (f" → v{c.became}" if c.became is not None else ""),
                esc(c.hypothesis),
            )
            for c in r.candidates
        ),
    )
    graph = _figure_html(lineage_figure(r), "lineage-graph", 440)
    body = f"{graph}{_legend(r)}<h3>Version ledger</h3>{versions}<h3>Candidates</h3>{candidates}"
    return f'<section id="lineage"><h2>Lineage</h2>{body}</section>'


def _runnotes(runs: Sequence[RunCurves]) -> str:
    return note_divs(f"{run.label} ({run.run_id}): {run.note}" for run in runs if run.note)


def _runtable(table_id: str, runs: Sequence[RunCurves]) -> str:
    return html_table(
        table_id,
        ("run", "label", "kind", "steps", "outcome", "strict", "train reward", "wall time (s)", "peak memory (GB)"),
        (
            (
                f"<code>{esc(x.run_id)}</code>",
                esc(x.label),
                esc(x.kind),
                str(x.steps),
                esc(x.outcome),
                num(x.strict_acc),
                num(x.train_reward),
                num(x.wall_time_s, 1),
                num(x.peak_rss_gb, 2),
            )
            for x in runs
        ),
    )


def _curves_section(r: SessionReport) -> str:
    parts = ['<section id="curves"><h2>Training curves</h2><h3>Versions (x = step in the policy lineage)</h3>']
    if r.version_runs:
        parts.append(_figure_html(curves_figure(r.version_runs, "Versions: health", True), "curves-versions", 620))
        optim = optim_figure(r.version_runs, "Versions: optimisation (KL, entropy, loss, lr, grad norm)", True)
        parts.append(_figure_html(optim, "optim-versions", 620))
        parts.append(_rollout_curves(r.version_runs, "Versions", "versions", True))
    parts.append(_runnotes(r.version_runs))
    parts.append(_runtable("version-runs-table", r.version_runs))
    for iteration, runs in r.pilot_runs.items():
        parts.append(f"<h3>Iteration {iteration}: pilots against the control</h3>")
        title = f"Iteration {iteration} pilots (same start and steps as the control)"
        parts.append(_figure_html(curves_figure(runs, title + ": health", False), f"curves-iteration-{iteration}", 620))
        optim = optim_figure(runs, title + ": optimisation", False)
        parts.append(_figure_html(optim, f"optim-iteration-{iteration}", 620))
        parts.append(_rollout_curves(runs, title, f"iteration-{iteration}", False))
        parts.append(_runnotes(runs))
        parts.append(_runtable(f"pilot-runs-table-{iteration}", runs))
    parts.append("</section>")
    return "".join(parts)


def _rollout_curves(runs: Sequence[RunCurves], title: str, suffix: str, lineage_x: bool) -> str:
    """The curves read from the runs' rollouts: agentic episodes per step, held-out accuracy per data source, and
    the share of each stop reason (end of turn, token cap, ...) per training step."""
    parts = []
    if any(k.startswith(AGENTIC_PREFIX) for run in runs for k in run.series):
        fig = agentic_figure(runs, f"{title}: agentic episodes per training step", lineage_x)
        parts.append(_figure_html(fig, f"agentic-{suffix}", 620))
    names = sources(runs)
    if names:
        fig = sources_figure(runs, f"{title}: strict held-out accuracy per data source", lineage_x)
        parts.append(_figure_html(fig, f"sources-{suffix}", 160 + 260 * ((len(names) + 2) // 3)))
    reasons = stop_reasons(runs)
    if reasons:
        fig = stops_figure(runs, f"{title}: how training responses stopped, share per step", lineage_x)
        parts.append(_figure_html(fig, f"stops-{suffix}", 160 + 260 * ((len(reasons) + 2) // 3)))
    return "".join(parts)


def _health_section(r: SessionReport) -> str:
    rows = []
    for h in r.health:
        critical = sum(a.severity == "critical" for a in h.alerts)
        passed = "not recorded" if h.n_ok is None else f"{h.n_ok} of {h.n_checks}"
        alerts = ", ".join(f"{a.alert_id} ({a.severity})" for a in h.alerts) or "none"
        rows.append(
            (
                f"v{h.index}",
                f"<code>{esc(h.run_id)}</code>",
                esc(passed),
                str(len(h.alerts) - critical),
                str(critical),
                esc(alerts if h.source != "missing" else "—"),
                esc(h.source) + (f": {esc(h.note)}" if h.note else ""),
            )
        )
    header = ("version", "run", "checks passed", "warnings", "critical", "alerts", "source")
    health = html_table("health-table", header, rows)
    if r.alerts:
        alerts = html_table(
            "alerts-table",
            ("version", "run", "alert", "layer", "severity", "value", "threshold", "message"),
            (
                (
                    "—" if a.version_index is None else f"v{a.version_index}",
                    esc(a.run_label),
                    f"<code>{esc(a.alert_id)}</code>",
                    esc(a.layer),
                    f'<span class="{esc(a.severity)}">{esc(a.severity)}</span>',
                    esc(a.value),
                    esc(a.threshold),
                    esc(a.message),
                )
                for a in r.alerts
            ),
        )
    else:
        alerts = "<p>No warning or critical finding on any version.</p>"
    agentic = _agentictable(r)
    return f'<section id="alerts"><h2>Health</h2><h3>Per version</h3>{health}{agentic}<h3>Alerts</h3>{alerts}</section>'


def _agentictable(r: SessionReport) -> str:
    """The headline agentic metrics per version (`diagnostics.agentic.HEADLINE_METRICS`); none for single-turn runs.

    One row per metric and one column per version: the metrics are many and their names long, the versions
    few, so the table stays narrow (a column per metric overflowed the page).
    """
    names = list(dict.fromkeys(k for h in r.health for k in h.agentic))
    if not names:
        return ""
    shown = [h for h in r.health if h.agentic]
    head = "".join(f"<th>v{h.index}</th>" for h in shown)
    runs = "".join(f"<td><code>{esc(h.run_id)}</code></td>" for h in shown)
    rows = "".join(
        f"<tr><th>{esc(k)}</th>" + "".join(f"<td>{num(_finite(h.agentic.get(k)))}</td>" for h in shown) + "</tr>"
        for k in names
    )
    intro = "<p>Agentic episodes: turns, tool use and trajectory alerts (metric docs: diagnostics/agentic.py).</p>"
    table = (
        f'<table id="agentic-table"><thead><tr><th>metric</th>{head}</tr></thead>'
        f"<tbody><tr><th>run</th>{runs}</tr>{rows}</tbody></table>"
    )
    return f"<h3>Agentic behaviour</h3>{intro}{table}"


def _finite(value: float | None) -> float | None:
    return None if value is None or value != value else value


def _ci(c: CandidateEntry) -> str:
    cmp = c.comparison
    if cmp is None:
        return esc(c.comparison_note)
    return (
        f"{cmp.mean_a:.3f} → {cmp.mean_b:.3f}, Δ {cmp.delta:+.3f} [{cmp.ci_low:+.3f}, {cmp.ci_high:+.3f}], "
        f"n={cmp.n}, p={cmp.p_wilcoxon:.3g}"
    )


def _backtest(c: CandidateEntry) -> str:
    b = c.backtest
    if b is None:
        return "—"
    parts = [f"{esc(b.verdict)} ({esc(b.outcome)})"]
    if b.dead_group_ratio_before is not None or b.dead_group_ratio_after is not None:
        parts.append(f"DGR {num(b.dead_group_ratio_before, 2)} → {num(b.dead_group_ratio_after, 2)}")
    if b.rank_violations_before is not None or b.rank_violations_after is not None:
        parts.append(f"rank violations {esc(b.rank_violations_before)} → {esc(b.rank_violations_after)}")
    if b.kept_ratio is not None:
        parts.append(f"kept {b.kept_ratio:.2f}")
    if b.hack_max_score is not None:
        parts.append(f"hack max {b.hack_max_score:.2f}")
    parts += [esc(reason) for reason in b.reasons]
    return "<br>".join(parts)


def _decisions_section(r: SessionReport) -> str:
    table = html_table(
        "decisions-table",
        ("candidate", "decision", "outcome", "strict vs control (95% CI, recomputed)", "backtest", "rationale"),
        (
            (f"<code>{esc(c.name)}</code>", badge(c.status), esc(c.outcome), _ci(c), _backtest(c), esc(c.rationale))
            for c in r.candidates
        ),
    )
    details = []
    for c in r.candidates:
        note = note_divs([c.diff_note] if c.diff_note else [])
        decision = f"<pre>{esc(c.decision_note)}</pre>" if c.decision_note else ""
        details.append(
            f'<details class="candidate-diff" id="diff-{esc(c.name)}"><summary><code>{esc(c.branch)}</code> '
            f"{badge(c.status)} — success criterion: {esc(c.success_criterion)}</summary>{decision}{note}"
            f'<pre class="diff">{esc(c.diff)}</pre></details>'
        )
    body = table + "".join(details) if r.candidates else "<p>No candidates were proposed.</p>"
    return f'<section id="decisions"><h2>Decisions, evidence and diffs</h2>{_alert_answers(r)}{body}</section>'


def _alert_answers(r: SessionReport) -> str:
    """Each iteration's critical alerts and what answered them: candidates, or why none."""
    if not r.alert_answers:
        return ""
    rows = (
        (str(a.iteration), f"<code>{esc(a.alert_id)}</code>",
         ", ".join(f"<code>{esc(n)}</code>" for n in a.candidates) or f"no candidate: {esc(a.reason)}")
        for a in r.alert_answers
    )  # fmt: skip
    table = html_table("alert-answers-table", ("iteration", "critical alert", "answered by"), rows)
    return f"<h3>Critical alerts and what answers them</h3>{table}"


def _metrics_text(metrics: dict[str, object]) -> str:
    return ", ".join(f"{k}={esc(v)}" for k, v in metrics.items())


def _skills_section(r: SessionReport) -> str:
    uses = (
        html_table(
            "skills-table",
            ("skill", "candidate", "result", "matched metrics"),
            (
                (esc(u.skill), f"<code>{esc(u.candidate_name)}</code>", esc(u.result), _metrics_text(u.matched_metrics))
                for u in r.skill_uses
            ),
        )
        if r.skill_uses
        else "<p>No skill was used in this session.</p>"
    )
    created = (
        html_table(
            "skills-created-table",
            ("skill", "factor", "trigger", "expected outcome", "wins/losses", "provenance"),
            (
                (
                    esc(s.name),
                    esc(s.factor),
                    esc(s.trigger),
                    esc(s.expected_outcome),
                    f"{s.wins}/{s.losses}",
                    esc(s.provenance),
                )
                for s in r.skills_created
            ),
        )
        if r.skills_created
        else "<p>No skill was created in this session.</p>"
    )
    return f'<section id="skills"><h2>Skills</h2><h3>Used</h3>{uses}<h3>Created</h3>{created}</section>'


def _llm_section(r: SessionReport) -> str:
    if not r.llm_usage:
        return f'<section id="llm-usage"><h2>LLM usage and cost</h2><p id="llm-usage-none">{NO_LLM}.</p></section>'
    costs = [u.cost_usd for u in r.llm_usage if u.cost_usd is not None]
    table = html_table(
        "llm-usage-table",
        ("node", "model", "calls", "prompt tokens", "completion tokens", "cost (USD)"),
        (
            (
                esc(u.node),
                esc(u.model),
                str(u.calls),
                str(u.prompt_tokens),
                str(u.completion_tokens),
                num(u.cost_usd, 4),
            )
            for u in r.llm_usage
        ),
    )
    tokens = sum(u.prompt_tokens + u.completion_tokens for u in r.llm_usage)
    total = f"total: {sum(u.calls for u in r.llm_usage)} calls, {tokens} tokens, " + (
        f"${sum(costs):.4f}" if costs else "cost not reported"
    )
    return f'<section id="llm-usage"><h2>LLM usage and cost</h2>{table}<p>{esc(total)}</p></section>'


def _page(title: str, sections: Iterable[str]) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{CSS}</style>"
        f'<script type="text/javascript">{get_plotlyjs()}</script></head><body>'
        + "".join(sections)
        + f'<script type="text/javascript">{VIEWER_JS}</script></body></html>\n'
    )


def render_html(report: SessionReport) -> str:
    """Return the whole report page (self-contained: plotly.js inlined, no network access needed)."""
    sections = (
        _summary_section(report),
        _lineage_section(report),
        _curves_section(report),
        rollouts_section(report),
        _health_section(report),
        _decisions_section(report),
        _skills_section(report),
        _llm_section(report),
    )
    return _page(f"EvoTrainer report {report.session_id}", sections)


def render_comparison_html(sessions: Sequence[SessionReport]) -> str:
    """Return one page comparing sessions: a table of their outcomes, the overlaid version curves, each ledger."""
    rows = []
    for r in sessions:
        final = r.versions[-1] if r.versions else None
        best = max(r.versions, key=lambda v: (v.strict_score or -1.0, v.index)) if r.versions else None
        use = f"v{r.summary.choice.use}" if r.summary and r.summary.choice else "—"
        merged = sum(c.status == "merged" for c in r.candidates)
        rows.append(
            (
                f"<code>{esc(r.session_id)}</code>",
                esc(f"{r.mode} / {r.policy}"),
                esc(r.harness_path),
                str(len(r.versions)),
                f"{merged} of {len(r.candidates)}",
                num(r.versions[0].strict_score) if r.versions else "—",
                f"v{final.index} {num(final.strict_score)}" if final else "—",
                f"v{best.index} {num(best.strict_score)}" if best else "—",
                esc(use),
                f"{r.steps_used}/{r.max_train_steps}",
                str(len(r.alerts)),
            )
        )
    header = ("session", "mode / policy", "harness", "versions", "merged", "v0 strict", "final", "best", "use")
    table = html_table("compare-table", (*header, "steps", "alerts"), rows)
    figure = _figure_html(comparison_figure(sessions), "compare-curves", 480)
    parts = [f'<section id="compare"><h1>EvoTrainer sessions compared</h1>{table}{figure}</section>']
    for r in sessions:
        lines = "<br>".join(esc(x) for x in summary_lines(r.summary, report_hint=False)) if r.summary else ""
        ledger = html_table(
            f"lineage-table-{esc(r.session_id)}",
            ("version", "decision", "outcome", "strict", "lineage steps", "rationale"),
            (
                (f"v{v.index}", esc(v.decision), esc(v.outcome), num(v.strict_score), str(v.lineage_steps),
                 esc(v.rationale))
                for v in r.versions
            ),
        )  # fmt: skip
        parts.append(
            f'<section id="session-{esc(r.session_id)}"><h2>{esc(r.session_id)}</h2>'
            f'<div class="verdict">{lines}</div>{ledger}</section>'
        )
    return _page("EvoTrainer sessions " + ", ".join(r.session_id for r in sessions), parts)
