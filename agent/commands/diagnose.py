"""`evotrainer diagnose RUN_DIR`: the health report of a run folder (rich text, or JSON with --json)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from diagnostics.schema import CONFIG_FILE
from harness.answers import AnswerProtocol

if TYPE_CHECKING:
    from diagnostics.tool_roles import ToolRoles


def diagnose(
    run_dir: Path = typer.Argument(..., exists=True, file_okay=False, help="run artefact folder"),
    as_json: bool = typer.Option(False, "--json", help="print the report as JSON"),
    parent: Path | None = typer.Option(None, "--parent", exists=True, file_okay=False, help="parent run folder"),
    show_ok: bool = typer.Option(False, "--all", help="also list rules that did not fire"),
    harness: Path | None = typer.Option(
        None, "--harness", exists=True, file_okay=False, help="harness whose answer protocol the report reads"
    ),
) -> None:
    """Read a run's metrics and rollouts and print its health report (score/signal/behaviour/version).

    The report reads the answer protocol the harness declares: `--harness`'s, else the one the run recorded
    in its config.json, else that of the harness the run was trained from. An agentic harness's declared
    tools (from the same harness) give the tool roles the agentic metrics use (by tool name otherwise).
    """
    import orjson
    from rich.text import Text

    from agent.commands.output import console, fail
    from diagnostics.findings import render_text
    from diagnostics.report import build_report

    try:
        answer = run_answer_protocol(run_dir, harness)
        roles = run_tool_roles(run_dir, harness)
    except ValueError as exc:
        fail(str(exc))
    parent_report = build_report(parent, answer=answer, roles=roles) if parent is not None else None
    report = build_report(run_dir, parent=parent_report, answer=answer, roles=roles)
    err = console(stderr=True)
    for problem in report.problems[:20]:
        err.print(Text.assemble(("warning:", "yellow"), f" {problem}"))
    if len(report.problems) > 20:
        err.print(Text.assemble(("warning:", "yellow"), f" ... {len(report.problems) - 20} more read problems"))
    if as_json:
        typer.echo(orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2).decode())
        return
    out = console()
    for line in render_text(report, show_ok=show_ok).splitlines():
        head = line.lstrip()
        style = "red" if head.startswith("CRIT") else "yellow" if head.startswith("WARN") else None
        out.print(line, style=style, highlight=False, markup=False)
    for line in stops_lines(run_dir, answer):
        out.print(line, highlight=False, markup=False)


def stops_lines(run_dir: Path, answer: AnswerProtocol | None) -> list[str]:
    """The "stops per training step" section: how many responses, their mean length and how they stopped."""
    from diagnostics.behaviour import stops_by_step
    from diagnostics.table import read_run_table

    steps = stops_by_step(read_run_table(run_dir, answer, splits=("train",)).train)
    if not steps:
        return []
    lines = ["[stops per training step] (length: tokens where recorded, else words)"]
    for s in steps:
        shares = " · ".join(f"{reason} {share:.2f}" for reason, share in s.shares.items())
        lines.append(f"  step {s.step}: {s.n} responses · mean length {s.length_mean:.1f} · {shares}")
    return lines


def run_answer_protocol(run_dir: Path, harness: Path | None) -> AnswerProtocol | None:
    """The answer protocol for a run's report (see `diagnose`); None when nothing declares one.

    Raises:
        ValueError: `harness` is not a valid harness (the message names the manifest and field).
    """
    import json

    from harness.manifest import HarnessError, load_harness

    if harness is not None:
        try:
            return load_harness(harness).manifest.answer
        except HarnessError as exc:
            raise ValueError(str(exc)) from None
    try:
        config = json.loads((run_dir / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    if isinstance(config.get("answer"), dict):
        return AnswerProtocol.model_validate(config["answer"])
    spec = config.get("spec")
    trained_from = spec.get("harness_dir") if isinstance(spec, dict) else None
    if isinstance(trained_from, str):
        try:
            return load_harness(Path(trained_from)).manifest.answer
        except HarnessError:
            return None
    return None


def run_tool_roles(run_dir: Path, harness: Path | None) -> ToolRoles:
    """The tool roles of the run's agentic harness (`--harness`, else the one it was trained from), from the
    tools its manifest declares; classification by tool name when neither is found or the harness has no env.

    Raises:
        ValueError: `harness` is not a valid harness (the message names the manifest and field).
    """
    import json

    from diagnostics.tool_roles import DEFAULT_ROLES
    from diagnostics.tool_roles import ToolRoles as Roles
    from harness.manifest import HarnessError, load_harness

    folder = harness
    if folder is None:
        try:
            config = json.loads((run_dir / CONFIG_FILE).read_text())
        except (OSError, ValueError):
            config = None
        spec = config.get("spec") if isinstance(config, dict) else None
        trained_from = spec.get("harness_dir") if isinstance(spec, dict) else None
        folder = Path(trained_from) if isinstance(trained_from, str) else None
    if folder is None:
        return DEFAULT_ROLES
    try:
        env = load_harness(folder).manifest.env
    except HarnessError as exc:
        if harness is not None:
            raise ValueError(str(exc)) from None
        return DEFAULT_ROLES  # the harness the run came from is gone or changed: names still classify
    return DEFAULT_ROLES if env is None else Roles.from_env(env)


def register(app: typer.Typer) -> None:
    """Add the `diagnose` command to the CLI."""
    app.command("diagnose")(diagnose)
