"""`evotrainer report SESSION --out report.html`: one static HTML file with a session's whole story.

Read-only: opens an existing, migrated store (never creates one), reads run artefacts and the session's
git repository, and writes one self-contained page (plotly.js inlined; opens offline from disk).
Missing artefacts become notes in the page, not errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agent.commands.db import DbOption, fail, open_store_url


def report_cmd(
    session: Annotated[str, typer.Argument(metavar="SESSION", help="session id (`evotrainer status` lists them)")],
    out: Annotated[Path, typer.Option("--out", metavar="FILE", help="HTML file to write")] = Path("report.html"),
    db: DbOption = None,
) -> None:
    """Write the session report: lineage, curves, health alerts, decisions with evidence and diffs, skills, LLM cost."""
    from agent.commands.db import open_migrated
    from agent.reporting.gather import gather_session
    from agent.reporting.html import render_html
    from store.engine import session_scope, sqlite_path
    from store.repository import NotFoundError

    url = open_store_url(db)
    path = sqlite_path(url)
    if path is not None and not path.exists():
        fail(f"no session {session!r}: the store {path} does not exist yet")
    engine = open_migrated(url)
    try:
        with session_scope(engine) as dbs:
            try:
                report = gather_session(dbs, session)
            except NotFoundError:
                fail(f"no session {session!r} in the store; `evotrainer status` lists them")
    finally:
        engine.dispose()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(report), encoding="utf-8")
    print(
        f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB): {len(report.versions)} versions, "
        f"{len(report.candidates)} candidates, {len(report.alerts)} alerts, {len(report.notes)} notes"
    )


def register(app: typer.Typer) -> None:
    """Add the `report` command to the CLI."""
    app.command("report")(report_cmd)
