"""Idempotent training runs for the controller: one artefact folder per run id, never launched twice.

A node that re-runs after a crash calls `ensure_run` again with the same spec:
- `summary.json` exists → the run finished: collect it (an empty or torn one, left by a full disk, is set
  aside as `summary.json.corrupt` and the run is resumed to write it again; a torn `handle.json` likewise);
- `handle.json` exists and the run is still alive (a trainer in its own process group, or a Ray job on the
  cluster, both outlive the controller) → wait for it;
- the run is gone without a summary → resubmit with `resume=True` (continues from its checkpoint);
- the run was stopped on request (`evotrainer stop`) → while this call watched it run, `RunStopped` ends the
  session (the user asked for that; `evotrainer resume` continues); found stopped on entry (that resume),
  it is resubmitted with `resume=True`;
- otherwise submit it. The backend's `submit` is itself idempotent for its folder (a live trainer's lock, a
  recorded Ray job), which covers a kill between `submit` and writing `handle.json`.

A run the backend refuses before launching anything (an invalid harness or trainer configuration) ends as a
`candidate_error` result naming the problem; nothing is launched. A Ray cluster that stops answering is
retried for `UNREACHABLE_S`, then the error propagates: the session stops and `evotrainer resume` adopts
every job once the cluster answers again.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

from agent.adapters.memory import GATE
from diagnostics.schema import PEAK_RSS_GB
from harness.atomic import read_json, write_atomic
from harness.failures import Outcome
from harness.manifest import HarnessError
from trainer_backend.base import LOG_FILE, SUMMARY_FILE, Backend, Handle, RunRefused, RunResult, RunSpec, RunStatus
from trainer_backend.ray_jobs import RayJobsError

HANDLE_FILE = "handle.json"
MAX_RESUMES = 3
UNREACHABLE_S = 600.0  # how long a Ray cluster may not answer before the session stops (resume adopts the jobs)

log = logging.getLogger(__name__)


class RunStopped(RuntimeError):
    """A run this controller was waiting for was stopped on request; the session stops and resumes later."""

    def __init__(self, spec: RunSpec) -> None:
        self.run_id, self.out_dir = spec.run_id, spec.out_dir
        super().__init__(
            f"run {spec.run_id} was stopped on request ({spec.out_dir}); resuming the session continues it"
        )


def ensure_run(
    spec: RunSpec, backend_name: str, on_poll: Callable[[Path], None] | None = None, poll_s: float = 0.5
) -> RunResult:
    """Run `spec` to completion exactly once across controller crashes and return its result.

    A local run first takes a slot of the memory gate (`agent.adapters.memory`): it waits while the runs
    already running leave too little memory for it; a run adopted from an earlier controller is running
    already and takes its slot without waiting.
    """
    backend = _backend(backend_name)
    summary = spec.out_dir / SUMMARY_FILE
    if summary.exists() and not isinstance(read_json(summary), dict):
        # empty or torn (a full disk): set aside, and the run is resumed to write it again
        log.warning("%s is empty or malformed; moved to %s.corrupt and the run is read again", summary, summary.name)
        summary.replace(summary.with_name(summary.name + ".corrupt"))
    if summary.exists():
        result = backend.collect(Handle(backend=backend_name, run_id=spec.run_id, out_dir=spec.out_dir))
    else:
        adopted = (spec.out_dir / HANDLE_FILE).exists()
        slot = contextlib.nullcontext() if spec.ray_address else GATE.slot(spec.run_id, wait=not adopted)
        with slot:
            result = _run_to_end(spec, backend, on_poll, poll_s)
    GATE.measured(result.summary.get(PEAK_RSS_GB))
    return result


def _run_to_end(spec: RunSpec, backend: Backend, on_poll: Callable[[Path], None] | None, poll_s: float) -> RunResult:
    """Submit `spec` (or adopt its recorded handle), poll it to the end and collect it; resubmit a lost run."""
    handle_path = spec.out_dir / HANDLE_FILE
    try:
        handle = _read_handle(handle_path)  # a torn handle is submitted again, as a resume
        handle = handle or _submit(backend, spec.model_copy(update={"resume": handle_path.exists()}), handle_path)
    except (RunRefused, HarnessError) as exc:
        return _refused(spec, str(exc))
    resumes = 0
    seen_running = False
    failing_since: float | None = None
    while True:
        try:
            status = backend.poll(handle)
            failing_since = None
        except RayJobsError as exc:
            failing_since = failing_since or time.time()
            if time.time() - failing_since > UNREACHABLE_S:
                raise
            log.warning("%s: %s; retrying", spec.run_id, exc)
            time.sleep(max(poll_s, 5.0))
            continue
        if on_poll is not None:
            on_poll(spec.out_dir)
        if status is RunStatus.FINISHED:
            return backend.collect(handle)
        if status is RunStatus.STOPPED and seen_running:
            raise RunStopped(spec)
        if status is RunStatus.STOPPED:  # stopped before this controller started: continue it
            seen_running = True
            try:
                handle = _submit(backend, spec.model_copy(update={"resume": True}), handle_path)
            except (RunRefused, HarnessError) as exc:
                return _refused(spec, str(exc))
            continue
        if status is RunStatus.LOST:
            if resumes >= MAX_RESUMES:
                return RunResult(
                    run_id=spec.run_id,
                    outcome=Outcome.INFRA_ERROR,
                    out_dir=spec.out_dir,
                    message=f"run died {resumes + 1} times without a summary; see {spec.out_dir}",
                    log_path=spec.out_dir / LOG_FILE,
                )
            resumes += 1
            try:
                handle = _submit(backend, spec.model_copy(update={"resume": True}), handle_path)
            except (RunRefused, HarnessError) as exc:
                return _refused(spec, str(exc))
            continue
        seen_running = True
        time.sleep(poll_s)


def final_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint later runs continue from: the one the backend that trained `run_dir` saved last.

    A run folder without a handle (copied, or trained outside a session) is asked of every backend in turn.
    """
    from trainer_backend import BACKENDS

    handle_path = run_dir / HANDLE_FILE
    if handle_path.is_file():
        return _backend(Handle.model_validate_json(handle_path.read_text()).backend).final_checkpoint(run_dir)
    for name in BACKENDS:
        found = _backend(name).final_checkpoint(run_dir)
        if found is not None:
            return found
    return None


def continuation(run_dir: Path) -> str:
    """What the run in `run_dir` carried over from the checkpoint it started from, in words ("" if nothing)."""
    handle_path = run_dir / HANDLE_FILE
    if not handle_path.is_file():
        return ""
    return _backend(Handle.model_validate_json(handle_path.read_text()).backend).continuation(run_dir)


def _backend(name: str) -> Backend:
    from trainer_backend import BACKENDS

    return cast(Backend, BACKENDS[name])  # a backend module satisfies the protocol structurally


def _read_handle(path: Path) -> Handle | None:
    raw = read_json(path)
    try:
        return Handle.model_validate(raw) if isinstance(raw, dict) else None
    except ValueError:  # pydantic's ValidationError
        return None


def _refused(spec: RunSpec, message: str) -> RunResult:
    return RunResult(
        run_id=spec.run_id,
        outcome=Outcome.CANDIDATE_ERROR,
        out_dir=spec.out_dir,
        message=f"refused before launch: {message}",
    )


def _submit(backend: Backend, spec: RunSpec, handle_path: Path) -> Handle:
    spec.out_dir.mkdir(parents=True, exist_ok=True)
    handle = backend.submit(spec)
    write_atomic(handle_path, handle.model_dump_json())
    return handle
