"""Ctrl-C on `train` stops its trainer (or, with --detach, says how to); on `run` it says which runs go on.

Each CLI starts as the leader of a new session (`start_new_session=True`) and gets Ctrl-C as a terminal sends
it: SIGINT to its whole foreground process group (`os.killpg`). The trainers run in their own process groups
and so never see that SIGINT; what happens to them is the CLI's doing. Checked: the exit code, what the CLI
said, whether the trainer's pid still lives (`/proc`), the stop record and checkpoint it left, and that
`evotrainer stop` leaves no trainer and a session that `evotrainer resume` finishes, continuing its run
from the checkpoint (one `step 0 |` per train.log).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from llm_session import copy_demo

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 300.0

pytestmark = [pytest.mark.slow]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVOTRAINER_CACHE": str(tmp_path / "cache")}
    env.pop("EVOTRAINER_DB", None)
    return env


def _cli(tmp_path: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def _start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "agent.cli", *args], cwd=tmp_path, env=_env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # fmt: skip


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, exited but not yet reaped, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return not stat[stat.rfind(")") + 2 :].startswith("Z")


def _wait_for(check, what: str, proc: subprocess.Popen[str]) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert proc.poll() is None, f"the CLI ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {WAIT_S:.0f}s"
        time.sleep(0.2)


def _trained(run_dir: Path, step: int) -> bool:
    log = run_dir / "train.log"
    return log.is_file() and f"step {step} |" in log.read_text()


def _ctrl_c(proc: subprocess.Popen[str]) -> tuple[int, str]:
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=WAIT_S)
    return proc.returncode, out


def _pid(run_dir: Path) -> int:
    pid = json.loads((run_dir / "handle.json").read_text())["pid"]
    assert isinstance(pid, int), pid
    return pid


@contextlib.contextmanager
def _reaping(pids: list[int]):  # type: ignore[no-untyped-def]
    """Kill (by id) any trainer a failed assertion leaves behind."""
    try:
        yield
    finally:
        for pid in pids:
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)


def test_ctrl_c_on_train_stops_its_trainer_after_a_step_resumably(tmp_path: Path) -> None:
    harness, run_dir = copy_demo(tmp_path / "mine"), tmp_path / "r"
    proc = _start(tmp_path, "train", "--harness", str(harness), "--steps", "2000", "--out", str(run_dir))
    pids: list[int] = []
    with _reaping(pids):
        _wait_for(lambda: _trained(run_dir, 2), "training step 2", proc)
        pids.append(_pid(run_dir))
        rc, out = _ctrl_c(proc)
        assert rc == 130, out[-3000:]
        assert not _alive(pids[0]), f"trainer {pids[0]} still runs after Ctrl-C"
    assert f"stopping the trainer (pid {pids[0]}) after its current step" in out, out[-2000:]
    stopped = json.loads((run_dir / "interrupted.json").read_text())
    assert stopped["signal"] == "SIGTERM" and stopped["step"] >= 2, stopped
    assert f"run stopped on SIGTERM after step {stopped['step']}" in out and "--resume" in out, out[-2000:]
    assert (run_dir / "checkpoints" / "last.pt").is_file() and not (run_dir / "summary.json").exists()
    last_logged = max(json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines())
    assert last_logged == stopped["step"], "the checkpoint is not the last step trained"


def test_ctrl_c_on_train_with_detach_says_how_to_stop_and_stop_does(tmp_path: Path) -> None:
    harness, run_dir = copy_demo(tmp_path / "mine"), tmp_path / "r"
    args = ("train", "--harness", str(harness), "--steps", "2000", "--out", str(run_dir), "--detach")
    proc = _start(tmp_path, *args)
    pids: list[int] = []
    with _reaping(pids):
        _wait_for(lambda: _trained(run_dir, 1), "training step 1", proc)
        pids.append(_pid(run_dir))
        rc, out = _ctrl_c(proc)
        assert rc == 130, out[-3000:]
        assert _alive(pids[0]), "--detach: the trainer should go on"
        assert f"the trainer continues (pid {pids[0]}, run folder {run_dir})" in out, out[-2000:]
        assert f"evotrainer stop --run {run_dir}" in out, out[-2000:]
        stop = _cli(tmp_path, "stop", "--run", str(run_dir))
        assert stop.returncode == 0, stop.stdout + stop.stderr
        assert not _alive(pids[0]), f"trainer {pids[0]} still runs after `evotrainer stop --run`"
    assert "run stopped on SIGTERM after step" in stop.stdout, stop.stdout
    assert (run_dir / "interrupted.json").is_file() and (run_dir / "checkpoints" / "last.pt").is_file()


def test_ctrl_c_on_run_names_the_runs_that_go_on_and_stop_then_resume_finishes(
    tmp_path: Path, git_available: None
) -> None:
    harness = copy_demo(tmp_path / "mine")
    args = ["--harness", str(harness), "--sandbox", "process", "--base-steps", "300", "--pilot-steps", "2",
            "--iterations", "1", "--candidates", "1", "--max-steps", "400"]  # fmt: skip
    proc = _start(tmp_path, "run", *args)
    sessions = tmp_path / ".evotrainer" / "sessions"
    runs = lambda: [p for p in sessions.glob("*/runs/*") if (p / "handle.json").is_file()]  # noqa: E731
    pids: list[int] = []
    with _reaping(pids):
        _wait_for(lambda: any(_trained(r, 2) for r in runs()), "a session run at training step 2", proc)
        [run_dir] = runs()
        session_id = run_dir.parents[1].name
        pids.append(_pid(run_dir))
        rc, out = _ctrl_c(proc)
        assert rc == 130, out[-3000:]
        assert _alive(pids[0]), "the session's trainer outlives the interrupted controller"
        assert "these runs continue in the background (1):" in out, out[-2000:]
        assert f"{run_dir.name} (pid {pids[0]})" in out and f"`evotrainer stop {session_id}`" in out, out[-2000:]
        status = _cli(tmp_path, "status", session_id)
        assert status.returncode == 0 and "runs still training" in status.stdout, status.stdout + status.stderr
        assert f"pid {pids[0]}" in status.stdout, status.stdout
        stop = _cli(tmp_path, "stop", session_id)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        assert not _alive(pids[0]), f"trainer {pids[0]} still runs after `evotrainer stop {session_id}`"
    assert f"evotrainer resume {session_id}" in stop.stdout, stop.stdout
    assert "runs still training" not in _cli(tmp_path, "status", session_id).stdout
    stopped_at = json.loads((run_dir / "interrupted.json").read_text())["step"]
    resumed = _cli(tmp_path, "resume", session_id, "--quiet", timeout=900)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    log = (run_dir / "train.log").read_text()
    assert log.count("step 0 |") == 1 and f"at step {stopped_at}" in log, log[-2000:]
    assert json.loads((run_dir / "summary.json").read_text())["steps_done"] == 300
