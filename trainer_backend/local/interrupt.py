"""A trainer asked to stop finishes its current step, saves its last checkpoint and exits resumable.

`install` makes SIGTERM and SIGINT only *ask* the trainer to stop: the loop checks `requested()` between steps,
saves ``checkpoints/last.pt`` and raises `Interrupted`; the trainer's entry point then writes
``interrupted.json`` (which signal, at which step, the checkpoint) and exits with `EXIT_INTERRUPTED` without
writing ``summary.json``. A second signal while the step finishes restores the default action and kills the
trainer at once.

Who sent the signal decides what the controller does next. A stop the user asked for (`evotrainer stop`,
Ctrl-C on `evotrainer train`) goes through the backend's `stop`, which first writes ``stop_requested.json``:
the run then reads as STOPPED and a watching controller stops its session (`evotrainer resume` continues
it). A signal from anywhere else (`ray job stop`, a preempted node, a service manager) leaves no request:
the run reads as LOST and the controller resubmits it with ``resume=True`` from that checkpoint, as it
continues a run that died.

Both files are removed when the run is submitted again (`clear_marker`), so they only ever describe the
trainer that last ran in the folder. This module imports no torch.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from harness.atomic import write_atomic

INTERRUPT_FILE = "interrupted.json"  # written by a trainer that stopped on a signal; no summary.json beside it
REQUEST_FILE = "stop_requested.json"  # written by the backend's `stop` before it signals: the user asked
EXIT_INTERRUPTED = 130  # the shell's code for "ended by a signal it was asked to honour"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_asked: list[int] = []  # the signals received so far, in order


class Interrupted(Exception):
    """The trainer was asked to stop and saved its state after `step`."""

    def __init__(self, step: int, signum: int, checkpoint: Path) -> None:
        self.step, self.signum, self.checkpoint = step, signum, checkpoint
        super().__init__(f"stopped on {signal.Signals(signum).name} after step {step}; checkpoint {checkpoint}")


@dataclass(frozen=True)
class Marker:
    """What ``interrupted.json`` says: the signal, the last step done and the checkpoint a resume reads."""

    signal: str
    step: int
    checkpoint: str


def _on_signal(signum: int, frame: FrameType | None) -> None:
    del frame
    _asked.append(signum)
    if len(_asked) > 1:  # asked twice: stop waiting for the step, die now
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)


def install() -> None:
    """Make SIGTERM and SIGINT request a stop after the current step (call once, in the trainer's main thread)."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _on_signal)


def requested() -> int | None:
    """The signal that asked this trainer to stop, or None while nobody has."""
    return _asked[0] if _asked else None


def write_marker(out_dir: Path, exc: Interrupted) -> None:
    """Record why the trainer stopped, so the caller and `evotrainer status` can say it."""
    data = {"signal": signal.Signals(exc.signum).name, "step": exc.step, "checkpoint": str(exc.checkpoint)}
    write_atomic(out_dir / INTERRUPT_FILE, json.dumps(data, indent=2))


def read_marker(out_dir: Path) -> Marker | None:
    """The folder's stop record, or None when its trainer was not stopped on request (or the file is damaged)."""
    try:
        data = json.loads((out_dir / INTERRUPT_FILE).read_text())
        return Marker(signal=str(data["signal"]), step=int(data["step"]), checkpoint=str(data["checkpoint"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_request(out_dir: Path, why: str) -> None:
    """Record that the user asked this folder's trainer to stop (before it is signalled)."""
    write_atomic(out_dir / REQUEST_FILE, json.dumps({"why": why}))


def stop_was_requested(out_dir: Path) -> bool:
    """Whether the last stop of this folder's trainer was one the user asked for (see the module docstring)."""
    return (out_dir / REQUEST_FILE).is_file()


def clear_marker(out_dir: Path) -> None:
    """Forget a previous stop: the folder is about to get a new trainer."""
    (out_dir / INTERRUPT_FILE).unlink(missing_ok=True)
    (out_dir / REQUEST_FILE).unlink(missing_ok=True)
