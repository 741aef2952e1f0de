"""Render a `SessionReport` as one self-contained HTML page.

plotly.js is inlined once in the page head (no CDN, no server: the file opens from disk offline);
each figure is a `div.plotly-graph-div` drawn by that script. Tables are plain HTML with stable ids
(`lineage-table`, `candidates-table`, `alerts-table`, `decisions-table`, `skills-table`,
`llm-usage-table`) so tests and readers can find the sections. Every text from the store, git or the
artefacts is HTML-escaped.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import cast

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from agent.reporting.gather import CURVE_METRICS, CandidateEntry, RunCurves, SessionReport

STATUS_COLOURS = {
    "merged": "#2ca02c",
    "kept": "#1f77b4",
    "pruned": "#7f7f7f",
    "reverted": "#d62728",
    "refused": "#111111",
    "backtest_failed": "#ff7f0e",
}
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
NO_LLM = "heuristic policy: no LLM"
CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1400px; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
.note { background: #fff4ce; border-left: 4px solid #e0b000; padding: 0.4em 0.8em; margin: 0.4em 0; }
.critical { color: #b00020; font-weight: bold; } .warning { color: #a36200; }
.badge { padding: 1px 6px; border-radius: 3px; color: #fff; font-size: 0.85em; }
"""


def esc(value: object) -> str:
    """HTML-escape any value (None becomes an em dash)."""
    return "—" if value is None else html.escape(str(value))


def _num(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _table(table_id: str, header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A table whose cells are already-escaped HTML."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _badge(status: str) -> str:
    colour = STATUS_COLOURS.get(status, "#aaaaaa")
    return f'<span class="badge" style="background:{colour}">{esc(status)}</span>'


def _figure_html(fig: go.Figure, div_id: str, height_px: int) -> str:
    fig.update_layout(height=height_px, margin={"l": 50, "r": 20, "t": 50, "b": 40})
    return cast(
        str, fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, default_height=f"{height_px}px")
    )


# --- figures --------------------------------------------------------------------------------------------


def lineage_figure(report: SessionReport) -> go.Figure:
    """Versions on the main line (x = version index), candidates branching off their parent version."""
    fig = go.Figure()
    merged_into = {
        v.rationale.split(":", 1)[0].removeprefix("merged "): v.index
        for v in report.versions
        if v.rationale.startswith("merged ")
    }
    for v in report.versions:
        if v.parent_index is not None:
            fig.add_trace(_edge((v.parent_index, 0), (v.index, 0), "#444", "solid"))
    by_iteration: dict[int, int] = {}
    cand_x, cand_y, cand_text, cand_colour, cand_label = [], [], [], [], []
    for c in report.candidates:
        k = by_iteration[c.iteration] = by_iteration.get(c.iteration, 0) + 1
        parent = c.parent_index if c.parent_index is not None else 0
        x, y = parent + 0.5, ((k + 1) // 2) * (1 if k % 2 else -1) * 0.6  # alternate above/below the line
        fig.add_trace(_edge((parent, 0), (x, y), STATUS_COLOURS.get(c.status, "#aaa"), "dash"))
        if c.id in merged_into:
            fig.add_trace(_edge((x, y), (merged_into[c.id], 0), STATUS_COLOURS["merged"], "dot"))
        cand_x.append(x)
        cand_y.append(y)
        cand_colour.append(STATUS_COLOURS.get(c.status, "#aaaaaa"))
        cand_label.append(f"v{parent}.{c.id.rsplit('.', 1)[-1]}")
        cand_text.append(f"{c.branch}<br>factor {c.factor}; {c.status} ({c.outcome or '—'})")
    fig.add_trace(
        go.Scatter(
            x=[v.index for v in report.versions],
            y=[0] * len(report.versions),
            mode="markers+text",
            marker={"size": 22, "color": "#333"},
            text=[f"v{v.index}" for v in report.versions],
            textposition="bottom center",
            hovertext=[f"v{v.index} {v.commit[:10]}<br>strict {_num(v.strict_score)}" for v in report.versions],
            hoverinfo="text",
            name="versions",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=cand_x,
            y=cand_y,
            mode="markers+text",
            marker={"size": 14, "color": cand_colour, "symbol": "diamond"},
            text=cand_label,
            textposition="top center",
            hovertext=cand_text,
            hoverinfo="text",
            name="candidates",
        )
    )
    fig.update_layout(
        title="Version lineage (main line) and candidate branches, coloured by decision",
        showlegend=False,
        xaxis={"title": "version", "dtick": 1},
        yaxis={"visible": False},
    )
    return fig


def _edge(a: tuple[float, float], b: tuple[float, float], colour: str, dash: str) -> go.Scatter:
    return go.Scatter(
        x=[a[0], b[0]], y=[a[1], b[1]], mode="lines", line={"color": colour, "dash": dash}, hoverinfo="skip"
    )


def curves_figure(runs: Sequence[RunCurves], title: str, lineage_x: bool) -> go.Figure:
    """A 2x2 grid: training reward (solid) vs strict accuracy (dashed), dead groups, truncation, length.

    With `lineage_x` the x axis is the step in the policy's lineage (each run shifted by the steps of
    its ancestors), so versions line up one after another.
    """
    fig = make_subplots(
        rows=2,
        cols=2,
        subplot_titles=(
            "training reward (solid) vs strict held-out accuracy (dashed)",
            CURVE_METRICS["rollout/dead_group_ratio"],
            CURVE_METRICS["rollout/truncation_rate"],
            CURVE_METRICS["response_length/mean"],
        ),
    )
    panels = {
        "critic/score/mean": (1, 1, "solid"),
        "val/strict_acc": (1, 1, "dash"),
        "rollout/dead_group_ratio": (1, 2, "solid"),
        "rollout/truncation_rate": (2, 1, "solid"),
        "response_length/mean": (2, 2, "solid"),
    }
    for i, run in enumerate(runs):
        colour = PALETTE[i % len(PALETTE)]
        shift = run.step_offset if lineage_x else 0
        first = True
        for name, (row, col, dash) in panels.items():
            points = run.series.get(name)
            if not points:
                continue
            fig.add_trace(
                go.Scatter(
                    x=[s + shift for s, _ in points],
                    y=[v for _, v in points],
                    mode="lines+markers" if name == "val/strict_acc" else "lines",
                    line={"color": colour, "dash": dash},
                    name=run.label,
                    legendgroup=run.label,
                    showlegend=first,
                    hovertemplate=f"{run.label} {CURVE_METRICS[name]}: %{{y:.3f}} at step %{{x}}<extra></extra>",
                ),
                row=row,
                col=col,
            )
            first = False
    fig.update_layout(title=title)
    fig.update_xaxes(title_text="lineage step" if lineage_x else "pilot step")
    return fig


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
        ("wall time recorded", f"{r.wall_time_s:.0f} s"),
    ]
    table = _table("summary-table", ("field", "value"), ((esc(k), esc(v)) for k, v in rows))
    notes = "".join(f'<div class="note">{esc(n)}</div>' for n in r.notes)
    return f'<section id="summary"><h1>EvoTrainer session {esc(r.session_id)}</h1>{table}{notes}</section>'


def _lineage_section(r: SessionReport) -> str:
    versions = _table(
        "lineage-table",
        (
            "version",
            "parent",
            "commit",
            "decision",
            "outcome",
            "strict",
            "train reward",
            "lineage steps",
            "diff",
            "rationale",
        ),
        (
            (
                f"v{v.index}",
                "—" if v.parent_index is None else f"v{v.parent_index}",
                f"<code>{esc(v.commit[:10])}</code>",
                esc(v.decision),
                esc(v.outcome),
                _num(v.strict_score),
                _num(v.train_score),
                str(v.lineage_steps),
                f"{v.diff_stat[0]} files, +{v.diff_stat[1]} −{v.diff_stat[2]}",
                esc(v.rationale),
            )
            for v in r.versions
        ),
    )
    candidates = _table(
        "candidates-table",
        ("candidate branch", "iteration", "parent", "factor", "skill", "decision", "hypothesis"),
        (
            (
                f"<code>{esc(c.branch)}</code>",
                str(c.iteration),
                "—" if c.parent_index is None else f"v{c.parent_index}",
                esc(c.factor),
                esc(c.skill),
                _badge(c.status),
                esc(c.hypothesis),
            )
            for c in r.candidates
        ),
    )
    graph = _figure_html(lineage_figure(r), "lineage-graph", 420)
    body = f"{graph}<h3>Version ledger</h3>{versions}<h3>Candidates</h3>{candidates}"
    return f'<section id="lineage"><h2>Lineage</h2>{body}</section>'


def _run_notes(runs: Sequence[RunCurves]) -> str:
    return "".join(
        f'<div class="note">{esc(run.label)} ({esc(run.run_id)}): {esc(run.note)}</div>' for run in runs if run.note
    )


def _run_table(table_id: str, runs: Sequence[RunCurves]) -> str:
    return _table(
        table_id,
        ("run", "label", "kind", "steps", "outcome", "strict", "train reward", "wall time (s)"),
        (
            (
                f"<code>{esc(x.run_id)}</code>",
                esc(x.label),
                esc(x.kind),
                str(x.steps),
                esc(x.outcome),
                _num(x.strict_acc),
                _num(x.train_reward),
                _num(x.wall_time_s, 1),
            )
            for x in runs
        ),
    )


def _curves_section(r: SessionReport) -> str:
    parts = ['<section id="curves"><h2>Training curves</h2><h3>Versions (x = step in the policy lineage)</h3>']
    if r.version_runs:
        parts.append(_figure_html(curves_figure(r.version_runs, "Versions", True), "curves-versions", 620))
    parts.append(_run_notes(r.version_runs))
    parts.append(_run_table("version-runs-table", r.version_runs))
    for iteration, runs in r.pilot_runs.items():
        parts.append(f"<h3>Iteration {iteration}: pilots against the control</h3>")
        title = f"Iteration {iteration} pilots (same seed and steps as the control)"
        parts.append(_figure_html(curves_figure(runs, title, False), f"curves-iteration-{iteration}", 620))
        parts.append(_run_notes(runs))
        parts.append(_run_table(f"pilot-runs-table-{iteration}", runs))
    parts.append("</section>")
    return "".join(parts)


def _alerts_section(r: SessionReport) -> str:
    if not r.alerts:
        body = f"<p>No warning or critical findings ({r.n_ok_findings} checks ok).</p>"
    else:
        rows = sorted(r.alerts, key=lambda a: (a.version_index is None, a.version_index or 0, a.run_label))
        body = (
            _table(
                "alerts-table",
                ("version", "run", "alert", "layer", "severity", "value", "threshold", "message"),
                (
                    (
                        "—" if a.version_index is None else f"v{a.version_index}",
                        esc(a.run_label),
                        f"<code>{esc(a.alert_id)}</code>",
                        esc(a.layer),
                        f'<span class="{esc(a.severity)}">{esc(a.severity)}</span>',
                        _num(a.value),
                        _num(a.threshold),
                        esc(a.message),
                    )
                    for a in rows
                ),
            )
            + f"<p>{r.n_ok_findings} further checks were ok.</p>"
        )
    return f'<section id="alerts"><h2>Health alerts</h2>{body}</section>'


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
        parts.append(f"DGR {_num(b.dead_group_ratio_before, 2)} → {_num(b.dead_group_ratio_after, 2)}")
    if b.rank_violations_before is not None or b.rank_violations_after is not None:
        parts.append(f"rank violations {esc(b.rank_violations_before)} → {esc(b.rank_violations_after)}")
    if b.hack_max_score is not None:
        parts.append(f"hack max {b.hack_max_score:.2f}")
    parts += [esc(reason) for reason in b.reasons]
    return "<br>".join(parts)


def _decisions_section(r: SessionReport) -> str:
    table = _table(
        "decisions-table",
        ("candidate", "decision", "outcome", "strict vs control (95% CI, recomputed)", "backtest", "rationale"),
        (
            (
                f"<code>{esc(c.id)}</code>",
                _badge(c.status),
                esc(c.outcome),
                _ci(c),
                _backtest(c),
                esc(c.rationale),
            )
            for c in r.candidates
        ),
    )
    details = []
    for c in r.candidates:
        note = f'<div class="note">{esc(c.diff_note)}</div>' if c.diff_note else ""
        decision = f"<pre>{esc(c.decision_note)}</pre>" if c.decision_note else ""
        details.append(
            f'<details class="candidate-diff" id="diff-{esc(c.id)}"><summary><code>{esc(c.branch)}</code> '
            f"{_badge(c.status)} — success criterion: {esc(c.success_criterion)}</summary>{decision}{note}"
            f'<pre class="diff">{esc(c.diff)}</pre></details>'
        )
    body = table + "".join(details) if r.candidates else "<p>No candidates were proposed.</p>"
    return f'<section id="decisions"><h2>Decisions, evidence and diffs</h2>{body}</section>'


def _skills_section(r: SessionReport) -> str:
    uses = (
        _table(
            "skills-table",
            ("skill", "candidate", "result", "matched metrics"),
            (
                (
                    esc(u.skill),
                    f"<code>{esc(u.candidate_id)}</code>",
                    esc(u.result),
                    esc(", ".join(f"{k}={v}" for k, v in u.matched_metrics.items())),
                )
                for u in r.skill_uses
            ),
        )
        if r.skill_uses
        else "<p>No skill was used in this session.</p>"
    )
    created = (
        _table(
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
    table = _table(
        "llm-usage-table",
        ("node", "model", "calls", "prompt tokens", "completion tokens", "cost (USD)"),
        (
            (
                esc(u.node),
                esc(u.model),
                str(u.calls),
                str(u.prompt_tokens),
                str(u.completion_tokens),
                _num(u.cost_usd, 4),
            )
            for u in r.llm_usage
        ),
    )
    tokens = sum(u.prompt_tokens + u.completion_tokens for u in r.llm_usage)
    total = f"total: {sum(u.calls for u in r.llm_usage)} calls, {tokens} tokens, " + (
        f"${sum(costs):.4f}" if costs else "cost not reported"
    )
    return f'<section id="llm-usage"><h2>LLM usage and cost</h2>{table}<p>{esc(total)}</p></section>'


def render_html(report: SessionReport) -> str:
    """Return the whole report page (self-contained: plotly.js inlined, no network access needed)."""
    sections = (
        _summary_section(report),
        _lineage_section(report),
        _curves_section(report),
        _alerts_section(report),
        _decisions_section(report),
        _skills_section(report),
        _llm_section(report),
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>EvoTrainer report {esc(report.session_id)}</title><style>{CSS}</style>"
        f'<script type="text/javascript">{get_plotlyjs()}</script></head><body>'
        + "".join(sections)
        + "</body></html>\n"
    )
