"""`evotrainer diagnose RUN_DIR`: the health report of a run folder (rich text, or JSON with --json)."""

from __future__ import annotations

from pathlib import Path

import typer


def diagnose(
    run_dir: Path = typer.Argument(..., exists=True, file_okay=False, help="run artefact folder"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
    parent: Path | None = typer.Option(None, "--parent", exists=True, file_okay=False, help="parent run folder"),
    show_ok: bool = typer.Option(False, "--all", help="also list rules that did not fire"),
    harness: Path | None = typer.Option(
        None, "--harness", exists=True, file_okay=False, help="harness folder: its declared answer protocol is read"
    ),
) -> None:
    """Read a run's metrics and rollouts and print its health report (score/signal/behaviour/version).

    The format and answer rules read the answer protocol the harness declares (`--harness`); without one they
    are not evaluated, and the report lists them under "not evaluated".
    """
    import orjson
    from rich.console import Console

    from diagnostics.findings import render_text
    from diagnostics.report import build_report
    from harness.manifest import HarnessError, load_harness

    try:
        answer = load_harness(harness).manifest.answer if harness is not None else None
    except HarnessError as exc:
        raise typer.BadParameter(str(exc), param_hint="--harness") from None
    parent_report = build_report(parent, answer=answer) if parent is not None else None
    report = build_report(run_dir, parent=parent_report, answer=answer)
    err = Console(stderr=True, soft_wrap=True)
    for problem in report.problems[:20]:
        err.print(f"[yellow]warning:[/yellow] {problem}", highlight=False, markup=True)
    if len(report.problems) > 20:
        err.print(f"[yellow]warning:[/yellow] ... {len(report.problems) - 20} more read problems")
    if as_json:
        typer.echo(orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2).decode())
        return
    out = Console(soft_wrap=True)
    for line in render_text(report, show_ok=show_ok).splitlines():
        head = line.lstrip()
        style = "red" if head.startswith("CRIT") else "yellow" if head.startswith("WARN") else None
        out.print(line, style=style, highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    """Add the `diagnose` command to the CLI."""
    app.command("diagnose")(diagnose)
