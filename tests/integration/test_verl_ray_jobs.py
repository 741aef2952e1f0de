"""Ray Jobs submission to a local Ray head (CPU), polled to completion, logs collected, failures classified;
A job is recorded before it is submitted and adopted, never submitted again, by a returning controller.

A trivial Python entry point stands in for `verl.trainer.main_ppo` (no GPU training on CPU); it writes a
FileLogger-format metrics line where the real trainer would (`VERL_FILE_LOGGER_PATH`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ray_head import ray_head as private_ray_head

from diagnostics.schema import read_metrics
from harness.failures import Outcome
from trainer_backend import ray_jobs
from trainer_backend.base import Handle, RunSpec, RunStatus
from trainer_backend.verl import collect, poll, submit
from trainer_backend.verl.run import RunState, launch

pytestmark = [pytest.mark.verl, pytest.mark.slow]
pytest.importorskip("verl")
pytest.importorskip("ray")

TRAINER_STANDIN = """
import json, os
print("stand-in trainer starting")
with open(os.environ["VERL_FILE_LOGGER_PATH"], "ab") as fh:
    fh.write(json.dumps({"step": 1, "data": {"critic/score/mean": 0.5}}).encode() + b"\\n")
print("step:1 - critic/score/mean:0.5")
"""

FAILING_STANDIN = """
import sys
print("Traceback (most recent call last):")
print("ValueError: Total available GPUs 0 is less than total desired GPUs 1", flush=True)
sys.exit(1)
"""


@pytest.fixture(scope="module")
def ray_head() -> Iterator[str]:
    """A private head on 127.0.0.1 (its own ports and temp dir; stopped by its process group, not `ray stop`)."""
    with private_ray_head(num_cpus=2) as address:
        yield address


def _launch(address: str, tmp_path: Path, name: str, code: str):
    out = tmp_path / name
    spec = RunSpec(run_id=name, harness_dir=tmp_path, out_dir=out, steps=1, ray_address=address)
    state = RunState(
        run_id=name,
        attempt=1,
        harness_root=str(tmp_path / "harness"),
        model_path=str(tmp_path / "m"),
        max_response_length=8,
        stall_timeout_s=300,
        started_at=time.time(),
    )
    env = {"VERL_FILE_LOGGER_PATH": str(out.resolve() / "verl_metrics.1.jsonl")}
    return spec, launch(spec, [sys.executable, "-c", code], env, state)


def _wait(handle: Handle) -> RunStatus:
    deadline = time.time() + 120
    while (status := poll(handle)) is RunStatus.RUNNING:
        assert time.time() < deadline, "Ray job did not finish in 120 s"
        time.sleep(1)
    return status


def _run(address: str, tmp_path: Path, name: str, code: str):
    spec, handle = _launch(address, tmp_path, name, code)
    assert handle.job_id is not None
    assert _wait(handle) is RunStatus.FINISHED
    return spec.out_dir, collect(handle)


def test_ray_job_polled_to_completion_with_logs_and_metrics(ray_head: str, tmp_path: Path) -> None:
    out, result = _run(ray_head, tmp_path, "ok-job", TRAINER_STANDIN)
    assert result.outcome is Outcome.OK, result.message
    assert result.steps_done == 1
    assert "stand-in trainer starting" in (out / "train.log").read_text()
    assert read_metrics(out / "metrics.jsonl")[0].data == {"critic/score/mean": 0.5}
    assert (out / "summary.json").exists()


def test_failing_ray_job_is_classified_with_its_log_path(ray_head: str, tmp_path: Path) -> None:
    out, result = _run(ray_head, tmp_path, "gpu-job", FAILING_STANDIN)
    assert result.outcome is Outcome.INFRA_ERROR
    assert result.message.startswith("job FAILED") and "GPUs" in result.message
    assert str(out.resolve() / "train.log") in result.message
    assert "Total available GPUs 0" in (out / "train.log").read_text()


def test_a_resubmitted_run_adopts_its_running_job(ray_head: str, tmp_path: Path) -> None:
    """A controller that comes back (no handle.json) calls `submit` again: the recorded job is adopted."""
    spec, first = _launch(ray_head, tmp_path, "slow-job", "import time; time.sleep(6)\n" + TRAINER_STANDIN)
    assert first.job_id == ray_jobs.submission_id("slow-job", spec.out_dir, 1)
    again = submit(spec)  # while the job runs: nothing is validated, converted or launched
    assert again.job_id == first.job_id
    assert _wait(again) is RunStatus.FINISHED and collect(again).outcome is Outcome.OK
    assert [j.submission_id for j in ray_jobs.jobs_for(ray_head, spec.out_dir)] == [first.job_id]


def test_a_job_recorded_but_never_submitted_is_submitted_once(
    ray_head: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after the write-ahead, before the submission: `submit` sends exactly the recorded job."""

    def killed(record: ray_jobs.JobRecord, out_dir: Path) -> bool:
        raise KeyboardInterrupt("controller killed between recording and submitting")

    with monkeypatch.context() as m:
        m.setattr(ray_jobs, "submit", killed)
        with pytest.raises(KeyboardInterrupt):
            _launch(ray_head, tmp_path, "recorded-job", TRAINER_STANDIN)
    spec = RunSpec(run_id="recorded-job", harness_dir=tmp_path, out_dir=tmp_path / "recorded-job", steps=1)
    assert ray_jobs.jobs_for(ray_head, spec.out_dir) == []
    handle = submit(spec)
    assert _wait(handle) is RunStatus.FINISHED and collect(handle).outcome is Outcome.OK
    [job] = ray_jobs.jobs_for(ray_head, spec.out_dir)
    assert job.submission_id == ray_jobs.submission_id("recorded-job", spec.out_dir, 1)
