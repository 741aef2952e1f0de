"""Idempotent training runs for the controller: one artefact folder per run id, never launched twice.

A node that re-runs after a crash calls `ensure_run` again with the same spec:
- `summary.json` exists → the run finished: collect it;
- `handle.json` exists and the trainer process is still alive (it lives in its own process group and
  survives the controller's death) → wait for it;
- the process is gone without a summary → resubmit with `resume=True` (continues from its checkpoint);
- otherwise submit it for the first time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

from harness.failures import Outcome
from trainer_backend.base import SUMMARY_FILE, Backend, Handle, RunResult, RunSpec, RunStatus

HANDLE_FILE = "handle.json"
MAX_RESUMES = 3


def ensure_run(
    spec: RunSpec, backend_name: str, on_poll: Callable[[Path], None] | None = None, poll_s: float = 0.5
) -> RunResult:
    """Run `spec` to completion exactly once across controller crashes and return its result."""
    from trainer_backend import BACKENDS

    backend = cast(Backend, BACKENDS[backend_name])  # a backend module satisfies the protocol structurally
    handle_path = spec.out_dir / HANDLE_FILE
    if (spec.out_dir / SUMMARY_FILE).exists():
        return backend.collect(Handle(backend=backend_name, run_id=spec.run_id, out_dir=spec.out_dir))
    if handle_path.exists():
        handle = Handle.model_validate_json(handle_path.read_text())
    else:
        handle = _submit(backend, spec, handle_path)
    resumes = 0
    while True:
        status = backend.poll(handle)
        if on_poll is not None:
            on_poll(spec.out_dir)
        if status is RunStatus.FINISHED:
            return backend.collect(handle)
        if status is RunStatus.LOST:
            if resumes >= MAX_RESUMES:
                return RunResult(
                    run_id=spec.run_id,
                    outcome=Outcome.INFRA_ERROR,
                    out_dir=spec.out_dir,
                    message=f"run died {resumes + 1} times without a summary; see {spec.out_dir}",
                    log_path=spec.out_dir / "train.log",
                )
            resumes += 1
            handle = _submit(backend, spec.model_copy(update={"resume": True}), handle_path)
            continue
        time.sleep(poll_s)


def _submit(backend: object, spec: RunSpec, handle_path: Path) -> Handle:
    spec.out_dir.mkdir(parents=True, exist_ok=True)
    handle: Handle = backend.submit(spec)  # type: ignore[attr-defined]
    tmp = handle_path.with_suffix(".tmp")
    tmp.write_text(handle.model_dump_json())
    tmp.replace(handle_path)
    return handle
