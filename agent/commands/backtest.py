"""`evotrainer backtest`: replay a candidate harness's reward/filter on a run's cached rollouts, sandboxed."""

from __future__ import annotations

from pathlib import Path

import typer

from sandboxes.modes import SANDBOX_MODES


def backtest(
    harness: Path = typer.Option(..., "--harness", exists=True, file_okay=False, help="candidate harness folder"),
    rollouts: Path = typer.Option(..., "--rollouts", exists=True, file_okay=False, help="run folder with rollouts"),
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
    out: Path | None = typer.Option(None, "--out", help="artefact folder (default: <harness>/.evotrainer/backtest)"),
    sandbox: str = typer.Option("docker", "--sandbox", help="docker | process (weaker) | none (trusted code)"),
    split: str = typer.Option("train", "--split", help="which cached rollouts: train | val"),
) -> None:
    """Backtest a candidate; exits 0 on pass, 1 on fail, 2 on inconclusive or infrastructure error."""
    import orjson
    from rich.text import Text

    from agent.commands.output import console
    from diagnostics.backtest import Verdict
    from sandboxes.backtest import run_backtest

    if sandbox not in SANDBOX_MODES:
        raise typer.BadParameter("use docker, process or none", param_hint="--sandbox")
    if split not in ("train", "val"):
        raise typer.BadParameter("use train or val", param_hint="--split")
    out_dir = out if out is not None else harness / ".evotrainer" / "backtest"
    result = run_backtest(harness, rollouts, out_dir, mode=sandbox, split=split)  # type: ignore[arg-type]
    if as_json:
        typer.echo(orjson.dumps(result.to_json(), option=orjson.OPT_INDENT_2).decode())
    else:
        screen = console()
        colour = {Verdict.PASS: "green", Verdict.FAIL: "red", Verdict.INCONCLUSIVE: "yellow"}[result.verdict]
        screen.print(
            Text.assemble(
                (result.verdict.value.upper(), f"bold {colour}"),
                f" {result.candidate} (outcome {result.outcome.value}); report: {out_dir / 'report.json'}",
            )
        )
        for reason in result.reasons:
            screen.print(f"  - {reason}", markup=False)
    raise typer.Exit(code={Verdict.PASS: 0, Verdict.FAIL: 1, Verdict.INCONCLUSIVE: 2}[result.verdict])


def register(app: typer.Typer) -> None:
    """Add the `backtest` command to the CLI."""
    app.command("backtest")(backtest)
