"""`evotrainer stop SESSION` (or `--run DIR`): stop a session's training runs and leave them resumable.

Trainers run in their own process groups (local) or as Ray jobs, so they outlive the command that started
them: a controller that crashes or is interrupted does not take its runs down. This module finds a session's
runs by the `handle.json` each run folder holds (`agent.adapters.runs`), asks each backend whether the run
still runs, and stops it through the backend's `stop`: the local trainer finishes its current step, saves
its last checkpoint and exits without a summary (`trainer_backend.local.interrupt`), so `evotrainer resume`
continues the session's runs where they stopped. `run` and `status` use `live_runs` to say which runs are
still alive. Heavy imports happen inside the functions.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from agent.commands.db import DbOption

STOP_HINT = "stop it with `evotrainer stop {target}` (it finishes its current step and saves a checkpoint)"


@dataclass(frozen=True)
class LiveRun:
    """A run whose trainer still runs: its id, where it runs (pid or Ray job) and its folder."""

    run_id: str
    where: str
    out_dir: Path


def session_runs_dir(session_id: str) -> Path:
    """The session's run folders: under the workdir its saved settings name (default: the current folder)."""
    folder = Path(".").resolve() / ".evotrainer" / "sessions" / session_id
    try:
        workdir = str(json.loads((folder / "context.json").read_text()).get("workdir", "."))
    except (OSError, ValueError, AttributeError):
        workdir = "."
    return Path(workdir).resolve() / ".evotrainer" / "sessions" / session_id / "runs"


def _handle(run_dir: Path):  # type: ignore[no-untyped-def]
    from agent.adapters.runs import HANDLE_FILE
    from trainer_backend.base import Handle

    try:
        return Handle.model_validate_json((run_dir / HANDLE_FILE).read_text())
    except (OSError, ValueError):
        return None  # no run was submitted here (or its handle is damaged): nothing to stop


def live_runs(runs_dir: Path) -> list[LiveRun]:
    """The runs under `runs_dir` whose trainers still run, by their recorded handles."""
    import trainer_backend
    from trainer_backend.base import RunStatus

    alive = []
    for run_dir in sorted(p for p in runs_dir.glob("*") if p.is_dir()) if runs_dir.is_dir() else []:
        handle = _handle(run_dir)
        if handle is None or handle.backend not in trainer_backend.PLUGINS:
            continue
        if trainer_backend.plugin_of(handle.backend).runs.poll(handle) is RunStatus.RUNNING:
            where = f"pid {handle.pid}" if handle.pid is not None else f"Ray job {handle.job_id}"
            alive.append(LiveRun(handle.run_id, where, run_dir))
    return alive


def stop_run(run_dir: Path) -> str:
    """Stop the trainer of one run folder (waits for its step); return what happened, in one line."""
    import trainer_backend

    handle = _handle(run_dir)
    if handle is None:
        return f"{run_dir}: no run was started here (no handle.json)"
    runs = trainer_backend.plugin_of(handle.backend).runs
    runs.stop(handle)
    result = runs.collect(handle)
    return f"{handle.run_id}: {result.message or result.outcome.value}"


def stop_cmd(
    session: Annotated[str | None, typer.Argument(metavar="SESSION", help="the session whose runs to stop")] = None,
    run: Annotated[
        Path | None, typer.Option("--run", metavar="DIR", help="stop the trainer of this run folder (`train`)")
    ] = None,
    db: DbOption = None,
) -> None:
    """Stop a session's training runs after their current step, leaving the session resumable."""
    from agent.commands.db import open_store_url
    from agent.commands.output import console, fail, no_session

    if (session is None) == (run is None):
        fail("name a SESSION or a run folder with --run DIR (one of them)")
    out = console()
    if run is not None:
        if _handle(run) is None:
            fail(f"{run}: no run was started here (no handle.json); pass the folder `evotrainer train` printed")
        alive = [r for r in live_runs(run.parent) if r.out_dir == run.resolve()]
        if not alive:
            out.print(f"no trainer runs in {run}", markup=False)
            return
        out.print(f"stopping {alive[0].run_id} ({alive[0].where}) after its current step", markup=False)
        out.print(stop_run(run), markup=False)
        return
    assert session is not None
    runs_dir = session_runs_dir(session)
    if not runs_dir.parent.is_dir():
        fail(no_session(session, open_store_url(db), runs_dir.parent.parent))
    alive = live_runs(runs_dir)
    if not alive:
        out.print(f"no run of session {session} is running; `evotrainer resume {session}` continues it", markup=False)
        return
    for r in alive:
        out.print(f"stopping {r.run_id} ({r.where}) after its current step", markup=False)
    with ThreadPoolExecutor(max_workers=len(alive)) as pool:  # each waits for its own trainer's step
        for line in pool.map(stop_run, [r.out_dir for r in alive]):
            out.print(line, markup=False)
    out.print(f"session {session} stopped; `evotrainer resume {session}` continues it", markup=False)


def register(app: typer.Typer) -> None:
    """Add the `stop` command to the CLI."""
    app.command("stop")(stop_cmd)
