"""`evotrainer train`: train one harness on a backend, with a live progress bar and a closing summary.

Dispatches through `trainer_backend.BACKENDS`; the local backend runs the trainer as a subprocess and this
command tails its `metrics.jsonl`. Heavy imports happen inside the command function.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Literal

import typer


def register(app: typer.Typer) -> None:
    """Add the `train` command to `app`."""
    app.command("train")(train)


def train(
    harness: Annotated[Path, typer.Option("--harness", metavar="DIR", help="harness folder holding evotrainer.yaml")],
    steps: Annotated[int, typer.Option(metavar="N", help="training steps (a pilot is <= 60)")] = 60,
    seed: Annotated[int, typer.Option(metavar="N", help="seed: same seed, same metrics")] = 0,
    out: Annotated[
        Path | None, typer.Option(metavar="DIR", help="artefact folder (default runs/<harness-name>-s<seed>)")
    ] = None,
    resume: Annotated[bool, typer.Option("--resume", help="continue from the run's last checkpoint")] = False,
    backend: Annotated[
        Literal["local", "verl"] | None, typer.Option(help="training backend (default: the manifest's trainer.backend)")
    ] = None,
    sandbox: Annotated[
        Literal["none", "docker", "process"],
        typer.Option(
            help="where reward/filter code runs; default none: `train` runs the harness you wrote, in the "
            "trainer (`run` and `backtest` default to docker: they run agent-written candidate code)"
        ),
    ] = "none",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="verl: compose and validate the config only")] = False,
    ray_address: Annotated[
        str | None,
        typer.Option(
            metavar="URL", help="run as a Ray job on this cluster (Jobs URL http://HEAD:8265), either backend"
        ),
    ] = None,
) -> None:
    """Train a harness (a pilot by default) and print strict accuracy before -> after."""
    from rich.console import Console
    from rich.text import Text

    import trainer_backend
    from agent.input_checks import SetupError, check_local_trainer_config
    from harness.manifest import BACKEND_NAMES, HarnessError, load_harness
    from trainer_backend.base import RunRefused, RunSpec, RunStatus

    console = Console()
    try:
        loaded = load_harness(harness)
        manifest = loaded.manifest
        if (backend or manifest.trainer.backend) == "local" and (settings := manifest.trainer.settings("local")):
            check_local_trainer_config(loaded.path(settings), harness / "evotrainer.yaml", loaded)
    except (HarnessError, SetupError) as exc:
        console.print(Text.assemble(("invalid harness: ", "red"), str(exc)))
        raise typer.Exit(2) from None
    backend = backend or manifest.trainer.backend
    if backend not in BACKEND_NAMES:
        raise typer.BadParameter(f"unknown backend {backend!r}; use {' or '.join(BACKEND_NAMES)}", param_hint="backend")
    out_dir = (out or Path("runs") / f"{manifest.name}-s{seed}").resolve()
    spec = RunSpec(
        run_id=f"{manifest.name}-s{seed}",
        harness_dir=harness.resolve(),
        out_dir=out_dir,
        steps=steps,
        seed=seed,
        resume=resume,
        sandbox=sandbox,
        ray_address=ray_address,
    )
    if backend not in trainer_backend.BACKENDS:
        console.print(f"[red]{backend} backend not installed[/red] (install the verl extra: pip install -e '.[verl]')")
        raise typer.Exit(2)
    module = trainer_backend.BACKENDS[backend]
    if dry_run:
        if backend != "verl":
            raise typer.BadParameter("--dry-run applies to --backend verl only", param_hint="--dry-run")
        dry_run_fn = getattr(module, "dry_run", None)  # the verl backend is built in parallel (issue #3 brief)
        if dry_run_fn is None:
            console.print("[red]verl backend not installed[/red]: trainer_backend.verl has no dry_run")
            raise typer.Exit(2)
        try:
            text = dry_run_fn(spec)
        except RunRefused as exc:
            console.print(Text.assemble(("config refused: ", "red"), str(exc)))
            raise typer.Exit(2) from None
        console.print(text, markup=False, highlight=False, soft_wrap=True)  # a command to copy as is
        return
    try:
        handle = module.submit(spec)
    except RunRefused as exc:
        console.print(Text.assemble(("config refused: ", "red"), str(exc)))
        raise typer.Exit(2) from None
    console.print(Text.assemble("run ", (spec.run_id, "bold"), f" on {backend} -> {out_dir}"))
    _follow(console, module, handle, out_dir / "metrics.jsonl", steps)
    result = module.collect(handle)
    if module.poll(handle) is RunStatus.LOST and result.outcome.value == "infra_error":
        console.print(Text.assemble(("run lost", "red"), f" (no summary): see {result.log_path}; rerun with --resume"))
        raise typer.Exit(1)
    _print_summary(console, result)
    if result.outcome.value != "ok":
        raise typer.Exit(1)


def _follow(console, module, handle, metrics_path: Path, steps: int) -> None:  # type: ignore[no-untyped-def]
    """Show a progress bar fed by the metrics file until the run stops running."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from diagnostics.schema import read_metrics
    from trainer_backend.base import RunStatus

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[info]}"),
        console=console,
    ) as progress:
        task = progress.add_task("training", total=steps, info="warm start / validation")
        while True:
            running = module.poll(handle) is RunStatus.RUNNING
            rows = read_metrics(metrics_path, [])
            if rows:
                last = rows[-1]
                score = last.data.get("critic/score/mean")
                val = next((r.data["val/strict_acc"] for r in reversed(rows) if "val/strict_acc" in r.data), None)
                info = " ".join(
                    part
                    for part in (
                        f"reward {score:.3f}" if score is not None else "",
                        f"val strict {val:.3f}" if val is not None else "",
                    )
                    if part
                )
                progress.update(task, completed=last.step, info=info)
            if not running:
                break
            time.sleep(0.5)


def _print_summary(console, result) -> None:  # type: ignore[no-untyped-def]
    """Print the closing summary table."""
    from rich.table import Table
    from rich.text import Text

    s = result.summary
    table = Table(title=f"run {result.run_id}: {result.outcome.value}", show_header=False)
    table.add_row("steps", str(result.steps_done))
    if "wall_time_s" in s:
        table.add_row("wall time", f"{s['wall_time_s']:.1f} s")
    if "train_reward_first" in s:
        table.add_row(
            "train reward", f"{s['train_reward_first']:.3f} -> {s.get('train_reward_last', float('nan')):.3f}"
        )
    if "strict_acc_before" in s:
        after = s.get("strict_acc_after", float("nan"))
        table.add_row(
            "strict accuracy (val)", f"{s['strict_acc_before']:.3f} -> {after:.3f} (n={int(s.get('val_n', 0))})"
        )
    if result.message:
        table.add_row("message", Text(result.message))  # candidate error text: never parsed as markup
    for warning in result.warnings:
        table.add_row(Text("warning", style="yellow"), Text(warning))
    table.add_row("artefacts", Text(str(result.out_dir)))
    console.print(table)
