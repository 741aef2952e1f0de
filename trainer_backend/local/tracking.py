"""Live views of a local run's metrics: TensorBoard event files beside ``metrics.jsonl``, and W&B when asked for.

``metrics.jsonl`` stays the record every decision and report reads; these sinks exist for people watching
runs as RL users do. Each step's metric dict is written under the names it already has (verl's, defined in
`diagnostics.schema` and `step.py`), so one dashboard reads local and verl runs alike. The event files go in
the run folder itself: ``tensorboard --logdir .evotrainer/sessions/S/runs`` shows every run of a session
(control and candidates) side by side, one run per folder.

A resumed run drops what it logged after its checkpoint, as it truncates ``metrics.jsonl``: the writer opens
with ``purge_step`` (the first step it will write again), so TensorBoard discards the stale tail instead of
drawing two curves over the same steps.

W&B is used when asked for (``EVOTRAINER_WANDB=1``, or ``WANDB_MODE`` set to ``online`` or ``offline``) and
installed: one W&B run per training run, named after the run, grouped by its session, its id stable across
resumes (a resumed run continues the same W&B run; W&B keeps the first value it got for a step). Asked for but
not installed, or failing to start, the run trains on and ``train.log`` says why.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

WANDB_ENV = "EVOTRAINER_WANDB"  # "1": send each run's metrics to W&B too
WANDB_PROJECT = "evotrainer"  # the W&B project unless WANDB_PROJECT names one


def wandb_asked(env: Mapping[str, str]) -> bool:
    """Whether the environment asks for W&B (`WANDB_ENV` true, or a live ``WANDB_MODE``)."""
    flag = env.get(WANDB_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    return flag or env.get("WANDB_MODE", "").strip().lower() in ("online", "offline")


def session_of(out_dir: Path) -> str | None:
    """The session a run folder belongs to (``sessions/<S>/runs/<run>``), or None for a standalone run."""
    return out_dir.parent.parent.name if out_dir.parent.name == "runs" else None


class Tracker:
    """Writes each step's metrics to TensorBoard (always) and to W&B (when asked for and installed)."""

    def __init__(self, out_dir: Path, run_id: str, first_step: int, log: Callable[[str], None]) -> None:
        """Open the sinks for the run in `out_dir`; `first_step` is the first step this process writes (a
        resume's checkpoint step + 1, or 0): anything logged earlier at or after it is discarded."""
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(out_dir), purge_step=first_step, flush_secs=10)
        self.wandb_run: Any = None
        if wandb_asked(os.environ):
            self.wandb_run = _open_wandb(out_dir, run_id, log)

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        """Record one step's metrics under their own names and flush, so a live dashboard sees the step."""
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, step)
        self.writer.flush()
        if self.wandb_run is not None and step >= self.wandb_run.step:  # W&B refuses steps it has passed
            self.wandb_run.log(dict(metrics), step=step)

    def close(self) -> None:
        """Flush and close the event file, and finish the W&B run."""
        self.writer.close()
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None


def _open_wandb(out_dir: Path, run_id: str, log: Callable[[str], None]) -> Any:
    try:
        import wandb
    except ImportError:
        log(f"W&B asked for ({WANDB_ENV} or WANDB_MODE) but wandb is not installed: pip install wandb; "
            "metrics go to metrics.jsonl and TensorBoard only")  # fmt: skip
        return None
    session = session_of(out_dir)
    try:
        return wandb.init(
            project=os.environ.get("WANDB_PROJECT", WANDB_PROJECT),
            id=hashlib.sha256(str(out_dir.resolve()).encode()).hexdigest()[:16],  # one run folder, one W&B run
            name=run_id,
            group=session,
            job_type="run",
            dir=str(out_dir),
            resume="allow",
            config={"run_id": run_id, "session": session, "run_dir": str(out_dir)},
        )
    except wandb.errors.Error as exc:
        log(f"W&B did not start ({type(exc).__name__}: {exc}); metrics go to metrics.jsonl and TensorBoard only")
        return None
