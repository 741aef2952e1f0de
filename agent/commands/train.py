"""`evotrainer train`: train one harness on a backend, with live progress and a closing summary.

The harness gets the checks `run` gives it (`agent.launch.input_checks.check_harness`,
`agent.launch.preflight.check_backend`: a trainer-key typo with the closest valid key, every data row), each
one line and exit 2. Dispatches through `trainer_backend.plugin_of`; the local backend runs the trainer as a
subprocess and this command follows its run folder: a progress bar on a terminal, plain progress lines
elsewhere (`agent.commands.progress.PlainLines`, as `run` prints them). Heavy imports happen inside the
command function.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from agent.commands.run import ProgressEvery
from diagnostics.schema import METRICS_FILE, PEAK_GPU_MEMORY_GB, PEAK_RSS_GB, STRICT_METRIC, TRAIN_REWARD_METRIC
from harness.atomic import write_atomic
from harness.manifest import BackendName
from sandboxes.modes import SandboxMode


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
        BackendName | None, typer.Option(help="training backend (default: the manifest's trainer.backend)")
    ] = None,
    sandbox: Annotated[
        SandboxMode,
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
    progress_every: ProgressEvery = 10.0,
    detach: Annotated[
        bool,
        typer.Option(
            "--detach",
            help="on Ctrl-C leave the trainer running (it says its pid and how to stop it); default: Ctrl-C "
            "stops the trainer after its current step, resumable with --resume",
        ),
    ] = False,
) -> None:
    """Train a harness (a pilot by default) and print strict accuracy before -> after."""
    from rich.text import Text

    import trainer_backend
    from agent.adapters.runs import HANDLE_FILE
    from agent.commands.cost import print_cost_line
    from agent.commands.output import EXIT_FAILED, console, fail
    from agent.launch import preflight
    from agent.launch.input_checks import check_harness
    from trainer_backend.base import RunSpec, RunStatus

    screen = console()
    checked = check_harness(harness)  # bad input: one line, exit 2 (agent/cli.py)
    manifest = checked.manifest
    backend = backend or manifest.trainer.backend
    try:
        preflight.check_backend(backend, harness)
    except ValueError as exc:
        fail(str(exc))
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
    plugin = trainer_backend.plugin_of(backend)
    module = plugin.runs
    if dry_run:
        if plugin.dry_run is None:
            with_it = [name for name, p in trainer_backend.PLUGINS.items() if p.dry_run is not None]
            fail(f"--dry-run applies to --backend {' | '.join(with_it)} only")
        # a refused config raises RunRefused: one line, exit 2 (agent/cli.py)
        screen.print(plugin.dry_run(spec), markup=False, highlight=False, soft_wrap=True)  # a command to copy as is
        return
    print_cost_line(screen, checked, backend, steps)  # before any work: a GPU-sized run on a CPU takes hours
    handle = module.submit(spec)  # a refused config raises RunRefused: one line, exit 2
    write_atomic(out_dir / HANDLE_FILE, handle.model_dump_json())  # `evotrainer stop --run DIR` reads it
    screen.print(Text.assemble("run ", (spec.run_id, "bold"), f" on {backend} -> {out_dir}"), soft_wrap=True)
    try:
        if screen.is_terminal:
            _follow(screen, module, handle, out_dir / METRICS_FILE, steps)
        else:
            _follow_plain(screen, module, handle, out_dir, progress_every)
    except KeyboardInterrupt:
        interrupted(module, handle, detach)
    result = module.collect(handle)
    status = module.poll(handle)
    if status is RunStatus.STOPPED:
        fail(f"{result.message}; the same `evotrainer train` with --resume continues it", EXIT_FAILED)
    if status is RunStatus.LOST and result.outcome.value == "infra_error":
        fail(f"run lost (no summary): see {result.log_path}; rerun with --resume", EXIT_FAILED)
    _print_summary(screen, result)
    if result.outcome.value != "ok":
        raise typer.Exit(EXIT_FAILED)


def interrupted(module: Any, handle: Any, detach: bool) -> NoReturn:
    """Ctrl-C: stop the trainer after its current step (a second Ctrl-C kills it now), or leave it and say so."""
    from agent.commands.stop import STOP_HINT
    from trainer_backend.local.interrupt import EXIT_INTERRUPTED

    where = f"pid {handle.pid}" if handle.pid is not None else f"Ray job {handle.job_id}"
    if detach:
        _say(
            f"interrupted; the trainer continues ({where}, run folder {handle.out_dir}); "
            f"{STOP_HINT.format(target=f'--run {handle.out_dir}')}"
        )
        raise typer.Exit(EXIT_INTERRUPTED)
    _say(f"interrupted; stopping the trainer ({where}) after its current step (Ctrl-C again: kill it now)")
    try:
        module.stop(handle)
    except KeyboardInterrupt:
        module.stop(handle, grace_s=0.0)
        _say(f"trainer killed; {handle.out_dir} resumes from its last saved checkpoint with --resume")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    result = module.collect(handle)
    resume = "the same `evotrainer train` with --resume continues it"
    _say(f"{result.message}; {resume}" if result.message else "trainer stopped")
    raise typer.Exit(EXIT_INTERRUPTED)


def _say(text: str) -> None:
    print(f"evotrainer: {text}", file=sys.stderr, flush=True)


def _follow_plain(out: Any, module: Any, handle: Any, out_dir: Path, every_s: float) -> None:
    """Print a plain progress line every `every_s` seconds while the run advances (no terminal: logs, CI)."""
    from agent.commands.progress import PlainLines, StepClock, observe, read_run
    from trainer_backend.base import RunStatus

    clock, started = StepClock(), time.monotonic()
    lines = PlainLines(clock, started)
    last = started - every_s
    while module.poll(handle) is RunStatus.RUNNING:
        run = read_run(out_dir)
        observe(run, clock, time.monotonic())
        if time.monotonic() - last >= every_s:
            last = time.monotonic()
            for line in lines.lines([run]):
                out.print(line)
        time.sleep(0.5)


def _follow(console, module, handle, metrics_path: Path, steps: int) -> None:  # type: ignore[no-untyped-def]
    """Show a progress bar fed by the metrics file until the run stops running (a terminal)."""
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
                score = last.data.get(TRAIN_REWARD_METRIC)
                val = next((r.data[STRICT_METRIC] for r in reversed(rows) if STRICT_METRIC in r.data), None)
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
    if PEAK_RSS_GB in s:
        gpu = f", GPU {s[PEAK_GPU_MEMORY_GB]:.2f} GB" if PEAK_GPU_MEMORY_GB in s else ""
        table.add_row("peak memory", f"{s[PEAK_RSS_GB]:.2f} GB resident{gpu}")
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
