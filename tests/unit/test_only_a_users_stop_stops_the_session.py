"""A trainer that stopped on a signal is STOPPED only when the user asked (`evotrainer stop`, Ctrl-C on
`train`); a signal from elsewhere (`ray job stop`, a preempted node) leaves it LOST, so the controller resumes it."""

from __future__ import annotations

import signal
from pathlib import Path

from trainer_backend.base import RunStatus
from trainer_backend.local import _gone, interrupt


def _stopped_on_a_signal(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    exc = interrupt.Interrupted(step=4, signum=signal.SIGTERM, checkpoint=out_dir / "checkpoints" / "last.pt")
    interrupt.write_marker(out_dir, exc)


def test_a_signal_nobody_asked_for_reads_as_lost_and_is_resumed(tmp_path: Path) -> None:
    _stopped_on_a_signal(tmp_path)
    assert _gone(tmp_path) is RunStatus.LOST


def test_a_stop_the_user_asked_for_reads_as_stopped(tmp_path: Path) -> None:
    interrupt.write_request(tmp_path, "stop")
    _stopped_on_a_signal(tmp_path)
    assert interrupt.stop_was_requested(tmp_path) and _gone(tmp_path) is RunStatus.STOPPED


def test_a_new_submission_forgets_both(tmp_path: Path) -> None:
    interrupt.write_request(tmp_path, "stop")
    _stopped_on_a_signal(tmp_path)
    interrupt.clear_marker(tmp_path)
    assert not interrupt.stop_was_requested(tmp_path) and interrupt.read_marker(tmp_path) is None
    assert _gone(tmp_path) is RunStatus.LOST
