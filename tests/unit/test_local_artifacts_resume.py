"""Resume bookkeeping of the local backend: artefacts after the checkpoint step are dropped."""

from __future__ import annotations

from pathlib import Path

from diagnostics.schema import append_metrics, read_metrics
from trainer_backend.base import Handle, RunStatus
from trainer_backend.local import collect, poll
from trainer_backend.local.artifacts import reset_after, write_summary


def test_reset_after_keeps_steps_up_to_checkpoint_and_drops_half_lines(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    for step in range(6):
        append_metrics(metrics, step, {"critic/score/mean": step / 10})
    with open(metrics, "ab") as fh:
        fh.write(b'{"step": 6, "data": {"critic/sc')
    for step in (3, 4, 5):
        path = tmp_path / "rollouts" / "train" / f"step_{step}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    (tmp_path / "summary.json").write_text("{}")
    reset_after(tmp_path, 4)
    assert [r.step for r in read_metrics(metrics)] == [0, 1, 2, 3, 4]
    assert sorted(p.name for p in (tmp_path / "rollouts" / "train").iterdir()) == ["step_3.jsonl", "step_4.jsonl"]
    assert not (tmp_path / "summary.json").exists()
    reset_after(tmp_path, -1)
    assert metrics.read_text() == ""


def test_poll_and_collect_read_only_the_artefact_folder(tmp_path: Path) -> None:
    handle = Handle(backend="local", run_id="r", out_dir=tmp_path, pid=None)
    assert poll(handle) is RunStatus.LOST
    assert collect(handle).outcome.value == "infra_error" and "train.log" in collect(handle).message
    write_summary(
        tmp_path,
        {
            "outcome": "candidate_error",
            "message": "harness/reward.py:compute_score raised",
            "path": "harness/reward.py",
            "steps_done": 2,
            "strict_acc_before": 0.4,
        },
    )
    assert poll(handle) is RunStatus.FINISHED
    result = collect(handle)
    assert result.outcome.value == "candidate_error" and result.steps_done == 2
    assert result.summary["strict_acc_before"] == 0.4 and "harness/reward.py" in result.message


def test_an_exited_unreaped_trainer_counts_as_gone() -> None:
    """A zombie answers kill(pid, 0); resume must not wait on it forever (kill -9 of a controller)."""
    import os
    import subprocess
    import time

    from trainer_backend.local import _zombie

    child = subprocess.Popen(["true"])
    deadline = time.time() + 10
    while not _zombie(child.pid) and time.time() < deadline:
        time.sleep(0.05)
    assert _zombie(child.pid), "an exited child that nobody reaped is a zombie"
    child.wait()
    assert not _zombie(os.getpid())
