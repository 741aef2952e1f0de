"""On a Ray cluster every run of a session is a Ray job, submitted together, and never twice.

A private Ray head on 127.0.0.1 (tests/ray_head.py: own ports and temp dir, stopped by its own process group,
never `ray stop`). The local backend's real trainer (`python -m trainer_backend.local.train`) is each job's
entry point; the run folders are on this machine's filesystem, which the head's "nodes" share.

1. A whole short session (`evotrainer run --ray-address ...`, demo harness, tiny trainer) is killed with
   kill -9 (its whole process group) while its iteration-1 pilots run on the cluster, then resumed: it
   finishes, every run folder has exactly one job on the cluster (the cluster's own job list), the
   iteration's pilots ran at the same time, and each trainer started once.
2. The crash windows of one submission, hit deterministically: a controller that dies after recording a job
   but before submitting it, and one that dies after submitting but before writing `handle.json`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llm_session import copy_demo
from ray_head import ray_head
from sqlalchemy import select

from agent.adapters.runs import HANDLE_FILE, ensure_run
from harness.failures import Outcome
from store import models
from store.engine import make_engine, session_scope
from trainer_backend import local, ray_jobs
from trainer_backend.base import RunSpec

pytestmark = [pytest.mark.verl, pytest.mark.slow]  # Ray comes with the verl extra
pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 900.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    with ray_head(num_cpus=4) as address:  # logical CPUs: one per local trainer job
        yield address


def _jobs(address: str) -> list[Any]:
    return list(ray_jobs.client(address).list_jobs())


def _settled(address: str) -> list[Any]:
    """The cluster's jobs once none runs any more (a trainer exits a moment after writing its summary)."""
    deadline = time.monotonic() + 120
    while True:
        jobs = _jobs(address)
        if all(str(j.status.value) in ray_jobs.TERMINAL for j in jobs):
            return jobs
        assert time.monotonic() < deadline, [(j.submission_id, j.status) for j in jobs]
        time.sleep(0.5)


def _run_dir(job: Any) -> str:
    return str((job.metadata or {}).get(ray_jobs.RUN_DIR_KEY, ""))


def _controller(cwd: Path, log: Path, *args: str) -> subprocess.Popen[bytes]:
    with open(log, "ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "agent.cli", *args],
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: kill -9 takes the controller, not the cluster's trainers
        )


def _wait(predicate: Any, proc: subprocess.Popen[bytes], log: Path, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert proc.poll() is None, f"the controller ended before {what}:\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"no {what} within {WAIT_S} s:\n{log.read_text()[-4000:]}"
        time.sleep(0.2)


def test_session_on_ray_killed_and_resumed_runs_each_job_once(cluster: str, tmp_path: Path) -> None:
    harness = copy_demo(tmp_path / "harness")
    work = tmp_path / "work"
    work.mkdir()
    log = work / "controller.log"
    args = ["--harness", str(harness), "--repo", str(work / "repo"), "--backend", "local"]
    args += ["--ray-address", cluster, "--sandbox", "process", "--base-steps", "4", "--pilot-steps", "8"]
    args += ["--iterations", "1", "--candidates", "2", "--replicates", "0", "--max-steps", "100"]
    proc = _controller(work, log, "run", *args, "--escalate-after", "0")
    try:
        running: list[str] = []

        def pilots_running() -> bool:
            running[:] = [_run_dir(j) for j in _jobs(cluster) if "-v1." in _run_dir(j) and j.status == "RUNNING"]
            return bool(running)

        _wait(pilots_running, proc, log, "iteration-1 pilot running as a Ray job")
        os.killpg(proc.pid, signal.SIGKILL)  # kill -9, mid-training
        proc.wait(timeout=60)
        at_kill = {_run_dir(j): j.status for j in _jobs(cluster)}
        before = log.read_text()
        assert " train " not in before and "finish" not in before, "the session got past its pilots before the kill"
        [session] = [p.name for p in (work / ".evotrainer" / "sessions").iterdir()]
        proc = _controller(work, log, "resume", session)
        assert proc.wait(timeout=WAIT_S) == 0, log.read_text()[-4000:]
        after = log.read_text()[len(before) :]
        assert " train " in after and "finish" in after, after  # the resumed controller collected the pilots
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)

    runs = sorted((work / ".evotrainer" / "sessions" / session / "runs").iterdir())
    jobs = _settled(cluster)
    assert any(s == "RUNNING" for d, s in at_kill.items() if "-v1." in d), "no pilot outlived the controller"
    assert len(runs) >= 3, [r.name for r in runs]  # v0, the control and at least one candidate
    assert sorted(_run_dir(j) for j in jobs) == sorted(str(r.resolve()) for r in runs), "a run had 0 or 2+ jobs"
    for run in runs:
        [job] = [j for j in jobs if _run_dir(j) == str(run.resolve())]
        record = ray_jobs.load_record(run)
        assert record is not None and record.job_id == job.submission_id == ray_jobs.submission_id(run.name, run, 1), (
            "the job id is not the run folder's deterministic id"
        )
        assert job.status == "SUCCEEDED", f"{run.name}: {job.status} {job.message}"
        summary = json.loads((run / "summary.json").read_text())
        assert summary["outcome"] == Outcome.OK.value, summary
        assert (run / "train.log").read_text().count("step 0 |") == 1, f"{run.name} trained more than once"
    pilots = [j for j in jobs if "-v1." in _run_dir(j)]
    assert len(pilots) >= 2 and max(j.start_time for j in pilots) < min(j.end_time for j in pilots), (
        "the iteration's pilots were not submitted together"
    )
    engine = make_engine(f"sqlite:///{work / '.evotrainer' / 'evotrainer.db'}")
    try:
        with session_scope(engine) as db:
            row = db.get(models.EvoSession, session)
            assert row is not None and row.status == "finished", row and row.status
            outcomes = {r.id: r.outcome for r in db.scalars(select(models.Run).where(models.Run.session_id == session))}
    finally:
        engine.dispose()
    assert outcomes == {r.name: "ok" for r in runs}


def _tiny_spec(tmp_path: Path, name: str, address: str) -> RunSpec:
    harness = tmp_path / "harness"
    if not harness.exists():
        copy_demo(harness)
    return RunSpec(run_id=name, harness_dir=harness, out_dir=tmp_path / name, steps=2, ray_address=address)


def test_kill_between_recording_and_submitting_a_job_submits_it_once(
    cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _tiny_spec(tmp_path, "recorded", cluster)

    def killed(record: ray_jobs.JobRecord, out_dir: Path) -> bool:
        raise KeyboardInterrupt("controller killed after the write-ahead, before the submission")

    with monkeypatch.context() as m:
        m.setattr(ray_jobs, "submit", killed)
        with pytest.raises(KeyboardInterrupt):
            ensure_run(spec, "local")
    assert ray_jobs.load_record(spec.out_dir) is not None and not (spec.out_dir / HANDLE_FILE).exists()
    assert ray_jobs.jobs_for(cluster, spec.out_dir) == []
    result = ensure_run(spec, "local")  # the resumed controller
    assert result.outcome is Outcome.OK, result.message
    [job] = ray_jobs.jobs_for(cluster, spec.out_dir)
    assert job.submission_id == ray_jobs.submission_id("recorded", spec.out_dir, 1)


def test_kill_between_submitting_and_writing_the_handle_adopts_the_job(cluster: str, tmp_path: Path) -> None:
    spec = _tiny_spec(tmp_path, "submitted", cluster)
    local.submit(spec)  # the job is on the cluster; the controller died before `handle.json`
    assert not (spec.out_dir / HANDLE_FILE).exists()
    result = ensure_run(spec, "local")  # the resumed controller submits again: the job is adopted
    assert result.outcome is Outcome.OK, result.message
    assert ensure_run(spec, "local").outcome is Outcome.OK  # and a finished run is only collected
    _settled(cluster)
    [job] = ray_jobs.jobs_for(cluster, spec.out_dir)
    assert job.status == "SUCCEEDED"
    assert (spec.out_dir / "train.log").read_text().count("step 0 |") == 1


def test_a_job_stopped_mid_run_resumes_from_its_checkpoint_as_the_next_attempt(cluster: str, tmp_path: Path) -> None:
    """A job that ends without a summary (a node died, `ray job stop`) is the next attempt, with --resume."""
    spec = _tiny_spec(tmp_path, "stopped", cluster).model_copy(update={"steps": 30})
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(ensure_run(spec, "local", poll_s=0.2)))
    worker.start()
    log = spec.out_dir / "train.log"
    deadline = time.monotonic() + WAIT_S
    while not (spec.out_dir / local.FINAL_CHECKPOINT).is_file():  # saved every 2 steps (the tiny trainer)
        assert time.monotonic() < deadline and worker.is_alive(), log.read_text() if log.is_file() else "no log"
        time.sleep(0.05)
    ray_jobs.stop(cluster, ray_jobs.submission_id("stopped", spec.out_dir, 1))
    worker.join(timeout=WAIT_S)
    [result] = results
    assert result.outcome is Outcome.OK and result.steps_done == 30, result.message
    _settled(cluster)
    jobs = sorted(ray_jobs.jobs_for(cluster, spec.out_dir), key=lambda j: j.submission_id)
    assert [j.submission_id for j in jobs] == [ray_jobs.submission_id("stopped", spec.out_dir, a) for a in (1, 2)]
    assert [j.status for j in jobs] == ["STOPPED", "SUCCEEDED"]
    text = log.read_text()
    assert "resumed from" in text and text.count("step 0 |") == 1, text[-2000:]
