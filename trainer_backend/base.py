"""The backend protocol: `submit(spec) -> Handle`, `poll(handle) -> RunStatus`, `collect(handle) -> RunResult`.

Backends are plain modules implementing these three functions, chosen from the `BACKENDS` dict in
`trainer_backend/__init__.py`. No factories, registries or `hasattr` probing.

Every run owns an artefact folder (`RunSpec.out_dir`), its layout defined once in `diagnostics/schema.py`::

    config.json             resolved run configuration
    metrics.jsonl           one line per step, verl FileLogger format {"step": N, "data": {...}}
    rollouts/{train,val}/step_<N>.jsonl   neutral rollout records (diagnostics/schema.py)
    checkpoints/            resumable state
    train.log               the trainer's stdout/stderr
    summary.json            written last; its presence marks a finished run (ok or classified failure)
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

# The run folder's file names (diagnostics/schema.py defines the layout), re-exported for the backends.
from diagnostics.schema import CONFIG_FILE as CONFIG_FILE
from diagnostics.schema import LOG_FILE as LOG_FILE
from diagnostics.schema import METRICS_FILE as METRICS_FILE
from diagnostics.schema import SUMMARY_FILE as SUMMARY_FILE
from harness.failures import BadInput, Outcome, recorded
from sandboxes.modes import SandboxMode


class RunSpec(BaseModel):
    """What to train: one harness folder, a step budget, a seed and where artefacts go."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    run_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    harness_dir: Path
    out_dir: Path
    steps: int = Field(gt=0)
    seed: int = 0
    kind: Literal["pilot", "full"] = "pilot"
    resume: bool = False
    init_checkpoint: Path | None = None  # start from this policy (a parent version's final checkpoint)
    # What a run that starts from `init_checkpoint` carries over besides the weights: "weights" only;
    # "optimizer" also the AdamW moments (local: and the group filter's state; random streams fresh from
    # `seed`); "exact" also the random streams, so a local run continued in segments trains bit-for-bit like
    # one uninterrupted run. verl carries what its resume machinery restores (verl/config.py,
    # `plan_continuation`); each backend's `continuation(run_dir)` says what a run carried.
    init_state: Literal["weights", "optimizer", "exact"] = "weights"
    sandbox: SandboxMode = "none"  # where candidate reward/filter code runs
    ray_address: str | None = None  # a Ray Jobs URL: the run is a Ray job on that cluster (trainer_backend/ray_jobs.py)


class RunStatus(enum.StrEnum):
    """Where a submitted run stands."""

    RUNNING = "running"
    FINISHED = "finished"  # summary.json exists (the run succeeded or failed in a classified way)
    LOST = "lost"  # the process is gone and left no summary (killed): resubmit with resume=True
    STOPPED = "stopped"  # stopped on request after a step, no summary, checkpoint saved: resubmit with resume=True


class Handle(BaseModel):
    """A submitted run: enough to poll and collect it, also from another process."""

    model_config = ConfigDict(frozen=True)
    backend: str
    run_id: str
    out_dir: Path
    pid: int | None = None
    job_id: str | None = None  # Ray job submission id (verl on a cluster)


class RunResult(BaseModel):
    """A finished run: outcome class, summary numbers and where the evidence lies."""

    model_config = ConfigDict(frozen=True)
    run_id: str
    outcome: Outcome
    out_dir: Path
    steps_done: int = 0
    summary: dict[str, float] = Field(default_factory=dict)
    message: str = ""
    log_path: Path | None = None
    warnings: tuple[str, ...] = ()  # what the trainer says the user must know (no signal, cut responses, ...)

    @field_validator("message")
    @classmethod
    def _recorded(cls, value: str) -> str:
        return recorded(value)  # capped once here: records, case memory, the report and the model read it


class RunRefused(BadInput):
    """`submit` refused a run before launching anything (its configuration is invalid); names the key and fix."""


class Backend(Protocol):
    """What a backend module provides (a module satisfies this structurally)."""

    def submit(self, spec: RunSpec) -> Handle: ...

    def poll(self, handle: Handle) -> RunStatus: ...

    def collect(self, handle: Handle) -> RunResult: ...

    def stop(self, handle: Handle) -> object:
        """Ask the run to stop after its current step, leaving it resumable; killed after a grace period."""
        ...

    def final_checkpoint(self, run_dir: Path) -> Path | None:
        """The checkpoint a later run continues (what `RunSpec.init_checkpoint` takes), None if none was saved."""
        ...

    def continuation(self, run_dir: Path) -> str:
        """What the run carried over from its `init_checkpoint`, in words ("" for a run from scratch)."""
        ...
