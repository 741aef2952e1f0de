"""Issue #7: Ray Jobs submission to a local Ray head (CPU), polled to completion, logs collected, failures classified.

A trivial Python entry point stands in for `verl.trainer.main_ppo` (no GPU training on CPU); it writes a
FileLogger-format metrics line where the real trainer would (`VERL_FILE_LOGGER_PATH`).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diagnostics.schema import read_metrics
from harness.failures import Outcome
from trainer_backend.base import RunSpec, RunStatus
from trainer_backend.verl import collect, poll
from trainer_backend.verl.run import RunState, launch, ray_client

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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory: pytest.TempPathFactory):
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent))
    if ray_bin is None:
        pytest.skip("ray CLI not installed beside this interpreter")
    port, dash = _free_port(), _free_port()
    temp_dir = tmp_path_factory.mktemp("ray")
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    subprocess.run(
        [
            ray_bin,
            "start",
            "--head",
            f"--port={port}",
            "--num-cpus=2",
            "--disable-usage-stats",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dash}",
            f"--temp-dir={temp_dir}",
        ],
        check=True,
        capture_output=True,
        env=env,
        timeout=120,
    )
    try:
        address = f"http://127.0.0.1:{dash}"
        deadline = time.time() + 60
        while True:  # the job API comes up a little after `ray start` returns
            try:
                ray_client(address).list_jobs()
                break
            except Exception:
                if time.time() > deadline:
                    raise
                time.sleep(1)
        yield address
    finally:
        subprocess.run([ray_bin, "stop", "--force"], capture_output=True, env=env, timeout=120)


def _run(address: str, tmp_path: Path, name: str, code: str):
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
    handle = launch(spec, [sys.executable, "-c", code], env, state)
    assert handle.job_id is not None
    deadline = time.time() + 120
    while (status := poll(handle)) is RunStatus.RUNNING:
        assert time.time() < deadline, "Ray job did not finish in 120 s"
        time.sleep(1)
    assert status is RunStatus.FINISHED
    return out, collect(handle)


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
