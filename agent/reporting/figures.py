"""The report's plotly figures: lineage, health, optimisation, agentic, per-source held-out and stop-reason
curves, and the cross-session overlay.

Pure functions from report records to `plotly.graph_objects.Figure`; `html.py` places them in the page.
Hover texts format numbers with a few significant digits (a learning rate of 1e-4 must not read 0.000).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from agent.reporting.artefacts import (
    AGENTIC_CURVES,
    CURVE_METRICS,
    OPTIM_METRICS,
    SOURCE_PREFIX,
    STOP_PREFIX,
    RunCurves,
)
from agent.reporting.records import SessionReport
from diagnostics.schema import STRICT_METRIC, TRAIN_REWARD_METRIC

STATUS_COLOURS = {
    "merged": "#2ca02c",
    "kept": "#1f77b4",
    "pruned": "#7f7f7f",
    "reverted": "#d62728",
    "refused": "#111111",
    "backtest_failed": "#ff7f0e",
}
STATUS_MEANING = {
    "merged": "merged: became the next version",
    "kept": "kept: improvement not promoted",
    "pruned": "pruned: no significant gain",
    "reverted": "reverted: made things worse",
    "refused": "refused: broke the surface or single-factor rule",
    "backtest_failed": "backtest failed: never trained",
}
OTHER_STATUS_COLOUR = "#aaaaaa"
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")


def status_colour(status: str) -> str:
    """The lineage colour of a candidate status (grey for statuses without a decision yet)."""
    return STATUS_COLOURS.get(status, OTHER_STATUS_COLOUR)


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def lineage_figure(report: SessionReport) -> go.Figure:
    """Versions on the main line (x = version index), candidates branching off their parent version.

    The legend names the decision colours (one entry per status that occurs).
    """
    fig = go.Figure()
    for v in report.versions:
        if v.parent_index is not None:
            fig.add_trace(_edge((v.parent_index, 0), (v.index, 0), "#444", "solid"))
    by_parent: dict[int, int] = {}
    points: dict[str, list[tuple[float, float, str, str]]] = {}
    for c in report.candidates:
        parent = c.parent_index if c.parent_index is not None else 0
        k = by_parent[parent] = by_parent.get(parent, 0) + 1
        x, y = parent + 0.5, ((k + 1) // 2) * (1 if k % 2 else -1) * 0.6  # alternate above/below the line
        fig.add_trace(_edge((parent, 0), (x, y), status_colour(c.status), "dash"))
        if c.became is not None:
            fig.add_trace(_edge((x, y), (c.became, 0), STATUS_COLOURS["merged"], "dot"))
        hover = f"{c.name}<br>from v{parent}; factor {c.factor}<br>{c.status} ({c.outcome or '—'})"
        points.setdefault(c.status, []).append((x, y, c.name.split("-", 1)[0], hover))
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
            name="version (main line)",
        )
    )
    for status, pts in points.items():
        fig.add_trace(
            go.Scatter(
                x=[p[0] for p in pts],
                y=[p[1] for p in pts],
                mode="markers+text",
                marker={"size": 14, "color": status_colour(status), "symbol": "diamond"},
                text=[p[2] for p in pts],
                textposition="top center",
                hovertext=[p[3] for p in pts],
                hoverinfo="text",
                name=STATUS_MEANING.get(status, status),
            )
        )
    fig.update_layout(
        title="Version lineage (main line) and candidate branches, coloured by decision",
        showlegend=True,
        legend={"title": {"text": "decision"}},
        xaxis={"title": "version", "dtick": 1},
        yaxis={"visible": False},
    )
    return fig


def _edge(a: tuple[float, float], b: tuple[float, float], colour: str, dash: str) -> go.Scatter:
    return go.Scatter(
        x=[a[0], b[0]],
        y=[a[1], b[1]],
        mode="lines",
        line={"color": colour, "dash": dash},
        hoverinfo="skip",
        showlegend=False,
    )


def _grid(
    runs: Sequence[RunCurves],
    panels: dict[str, tuple[int, int, str]],
    titles: Sequence[str],
    labels: dict[str, str],
    lineage_x: bool,
    rows: int,
    cols: int,
) -> go.Figure:
    """Draw every run's series of `panels` (metric -> (row, col, dash)); one legend entry per run."""
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=tuple(titles))
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
                    mode="lines+markers" if name == STRICT_METRIC or name.startswith(SOURCE_PREFIX) else "lines",
                    line={"color": colour, "dash": dash},
                    name=run.label,
                    legendgroup=run.label,
                    showlegend=first,
                    hovertemplate=f"{run.label} {labels[name]}: %{{y:.4g}} at step %{{x}}<extra></extra>",
                ),
                row=row,
                col=col,
            )
            first = False
    fig.update_xaxes(title_text="lineage step" if lineage_x else "pilot step")
    return fig


def curves_figure(runs: Sequence[RunCurves], title: str, lineage_x: bool) -> go.Figure:
    """A 2x2 grid: training reward (solid) vs strict accuracy (dashed), dead groups, truncation, length.

    With `lineage_x` the x axis is the step in the policy's lineage (each run shifted by the steps of
    its ancestors), so versions line up one after another.
    """
    panels = {
        TRAIN_REWARD_METRIC: (1, 1, "solid"),
        STRICT_METRIC: (1, 1, "dash"),
        "rollout/dead_group_ratio": (1, 2, "solid"),
        "rollout/truncation_rate": (2, 1, "solid"),
        "response_length/mean": (2, 2, "solid"),
    }
    titles = (
        "training reward (solid) vs strict held-out accuracy (dashed)",
        CURVE_METRICS["rollout/dead_group_ratio"],
        CURVE_METRICS["rollout/truncation_rate"],
        CURVE_METRICS["response_length/mean"],
    )
    fig = _grid(runs, panels, titles, CURVE_METRICS, lineage_x, 2, 2)
    fig.update_layout(title=title)
    return fig


def optim_figure(runs: Sequence[RunCurves], title: str, lineage_x: bool) -> go.Figure:
    """A 2x3 grid of the optimiser's view: KL (to the reference solid, new vs old dashed), entropy, policy
    loss, learning rate, gradient norm, clip fraction (verl's `actor/*` metric names)."""
    panels = {
        "actor/kl_loss": (1, 1, "solid"),
        "actor/ppo_kl": (1, 1, "dash"),
        "actor/entropy": (1, 2, "solid"),
        "actor/pg_loss": (1, 3, "solid"),
        "actor/lr": (2, 1, "solid"),
        "actor/grad_norm": (2, 2, "solid"),
        "actor/pg_clipfrac": (2, 3, "solid"),
    }
    titles = (
        "KL to reference (solid), new vs old policy (dashed)",
        OPTIM_METRICS["actor/entropy"],
        OPTIM_METRICS["actor/pg_loss"],
        OPTIM_METRICS["actor/lr"],
        OPTIM_METRICS["actor/grad_norm"],
        OPTIM_METRICS["actor/pg_clipfrac"],
    )
    fig = _grid(runs, panels, titles, OPTIM_METRICS, lineage_x, 2, 3)
    fig.update_yaxes(type="log", exponentformat="e", row=2, col=1)  # a constant 1e-4 must not read 0
    fig.update_layout(title=title)
    return fig


def agentic_figure(runs: Sequence[RunCurves], title: str, lineage_x: bool) -> go.Figure:
    """A 2x2 grid of an agentic run's episodes per training step: turns, tool calls, tool failures, abandonment."""
    panels = {name: (1 + i // 2, 1 + i % 2, "solid") for i, name in enumerate(AGENTIC_CURVES)}
    fig = _grid(runs, panels, tuple(AGENTIC_CURVES.values()), AGENTIC_CURVES, lineage_x, 2, 2)
    fig.update_layout(title=title)
    return fig


def _names(runs: Sequence[RunCurves], prefix: str) -> list[str]:
    """The names of the `prefix/<name>` series in any of `runs`, in the order the runs list them."""
    found = dict.fromkeys(k for run in runs for k in run.series if k.startswith(prefix))
    return [k.removeprefix(prefix) for k in found]


def _share_panels(
    runs: Sequence[RunCurves], prefix: str, panel: dict[str, tuple[str, str]], title: str, lineage_x: bool, cols: int
) -> go.Figure:
    """One panel per name (`panel`: name -> (panel title, hover label)), each run's `prefix/<name>` series on [0, 1]."""
    width = min(cols, len(panel))
    panels = {prefix + s: (1 + i // width, 1 + i % width, "solid") for i, s in enumerate(panel)}
    labels = {prefix + s: label for s, (_, label) in panel.items()}
    titles = tuple(t for t, _ in panel.values())
    fig = _grid(runs, panels, titles, labels, lineage_x, math.ceil(len(panel) / width), width)
    fig.update_yaxes(range=[-0.02, 1.02])
    fig.update_layout(title=title)
    return fig


def sources(runs: Sequence[RunCurves]) -> list[str]:
    """The data sources with held-out curves in any of `runs`, in the order the runs list them."""
    return _names(runs, SOURCE_PREFIX)


def sources_figure(runs: Sequence[RunCurves], title: str, lineage_x: bool, cols: int = 3) -> go.Figure:
    """One panel per data source: each run's strict held-out accuracy on that source's prompts over steps."""
    # data-source names come from the harness data: escaped
    panel = {s: (html.escape(s), f"held-out strict accuracy on {html.escape(s)}") for s in sources(runs)}
    return _share_panels(runs, SOURCE_PREFIX, panel, title, lineage_x, cols)


def stop_reasons(runs: Sequence[RunCurves]) -> list[str]:
    """The stop reasons with curves in any of `runs` (`diagnostics.behaviour.stop_shares_per_step`)."""
    return _names(runs, STOP_PREFIX)


def stops_figure(runs: Sequence[RunCurves], title: str, lineage_x: bool, cols: int = 3) -> go.Figure:
    """One panel per stop reason: the share of each run's training rollouts that stopped that way, per step."""
    panel = {s: (f"stopped by {s}", f"share stopped by {s}") for s in stop_reasons(runs)}
    return _share_panels(runs, STOP_PREFIX, panel, title, lineage_x, cols)


def comparison_figure(reports: Sequence[SessionReport]) -> go.Figure:
    """Sessions side by side: each version's strict held-out score and training reward over lineage steps."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("strict held-out accuracy per version", "training reward"))
    for i, r in enumerate(reports):
        colour = PALETTE[i % len(PALETTE)]
        for col, values in ((1, [v.strict_score for v in r.versions]), (2, [v.train_score for v in r.versions])):
            fig.add_trace(
                go.Scatter(
                    x=[v.lineage_steps for v in r.versions],
                    y=values,
                    mode="lines+markers",
                    line={"color": colour},
                    text=[f"v{v.index}" for v in r.versions],
                    name=f"{r.session_id} ({r.mode})",
                    legendgroup=r.session_id,
                    showlegend=col == 1,
                    hovertemplate=f"{r.session_id} %{{text}}: %{{y:.3f}} at lineage step %{{x}}<extra></extra>",
                ),
                row=1,
                col=col,
            )
    fig.update_xaxes(title_text="lineage step")
    fig.update_layout(title="Sessions compared (x = training steps in the version's lineage)")
    return fig
