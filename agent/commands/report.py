"""`evotrainer report SESSION [SESSION ...] --out report.html`: one static HTML file with a session's story.

One session: the whole report (lineage, curves, rollouts, health, decisions, skills, LLM cost). Several:
a comparison page (outcomes side by side, version curves overlaid, each ledger and verdict).
Read-only: opens an existing, migrated store (never creates one), reads run artefacts and the sessions'
git repositories, and writes one self-contained page (plotly.js inlined; opens offline from disk).
Missing artefacts become notes in the page, not errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agent.commands.db import DbOption, open_store_url
from agent.commands.output import fail, no_session
from harness.failures import shown


def report_cmd(
    sessions: Annotated[
        list[str],
        typer.Argument(help="session id(s) (`evotrainer status` lists them); two or more: compare them"),
    ],
    out: Annotated[Path, typer.Option("--out", metavar="FILE", help="HTML file to write")] = Path("report.html"),
    db: DbOption = None,
) -> None:
    """Write a session report (lineage, curves, rollouts, health, decisions, skills, LLM cost), or compare sessions."""
    from agent.commands.db import migrated_store, store_file
    from agent.reporting.gather import gather_session
    from agent.reporting.html import render_comparison_html, render_html
    from store.repository import NotFoundError

    url = open_store_url(db)
    path = store_file(url)
    if path is not None and not path.exists():
        fail(no_session(sessions[0], url))
    if len(set(sessions)) != len(sessions):
        fail(f"a session is named twice in {shown(sessions)}; name each once")
    reports = []
    with migrated_store(url) as dbs:
        for session in sessions:
            try:
                reports.append(gather_session(dbs, session))
            except NotFoundError:
                fail(no_session(session, url))
    out.parent.mkdir(parents=True, exist_ok=True)
    page = render_html(reports[0]) if len(reports) == 1 else render_comparison_html(reports)
    out.write_text(page, encoding="utf-8")
    size = f"{out.stat().st_size / 1e6:.1f} MB"
    if len(reports) > 1:
        print(f"wrote {out} ({size}): {len(reports)} sessions compared")
        return
    report = reports[0]
    print(
        f"wrote {out} ({size}): {len(report.versions)} versions, {len(report.candidates)} candidates, "
        f"{len(report.alerts)} alerts, {len(report.notes)} notes"
    )


def register(app: typer.Typer) -> None:
    """Add the `report` command to the CLI."""
    app.command("report")(report_cmd)
