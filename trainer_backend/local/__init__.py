"""The embedded local backend: plain-torch GRPO on a tiny model, run as a subprocess.

Implements the backend protocol of `trainer_backend/base.py` with module-level functions. `submit`
writes ``<out_dir>/spec.json`` and launches ``python -m trainer_backend.local.train`` in its own process
group (stdout/stderr to ``train.log``); `poll` and `collect` read only the artefact folder and the pid, so
another process can pick up a handle. This module imports no torch: the trainer process does.

One trainer per folder: `submit` takes an exclusive lock on ``<out_dir>/trainer.lock`` *before* it launches
and hands the locked descriptor to the trainer, which holds it until it exits (a kill included). A second
`submit` on a folder whose lock is held adopts the running trainer instead of launching another one, so a
controller killed between the launch and writing its handle cannot start the run twice on resume; `poll`
reads the lock as the liveness test.

On a Ray cluster (`spec.ray_address`) the same trainer command is the entry point of one Ray job per attempt
(trainer_backend/ray_jobs.py: deterministic submission ids, the job recorded before it is submitted, an
existing job adopted). The trainer then takes the folder's lock itself (``--lock``) and appends its output to
``train.log`` in the run folder, which must be on storage the cluster's nodes share at the same path; `poll`
reads the job's status instead of a pid. The job reserves one CPU: a CPU cluster runs as many pilots at once
as it has CPUs and queues the rest.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from diagnostics.schema import LAST_CHECKPOINT, SPEC_FILE
from harness.failures import Outcome
from trainer_backend import ray_jobs
from trainer_backend.base import CONFIG_FILE, LOG_FILE, SUMMARY_FILE, Handle, RunResult, RunSpec, RunStatus
from trainer_backend.local import interrupt

NAME = "local"
STOP_GRACE_S = 120.0  # how long a stopped trainer may take to finish its step and save before it is killed
LOCK_FILE = "trainer.lock"  # flock-ed by the run's trainer for its whole life; holds its pid as text
FINAL_CHECKPOINT = LAST_CHECKPOINT  # written by the trainer (artifacts.CHECKPOINT)
CARRIED = {  # RunSpec.init_state -> what the trainer takes over from the parent checkpoint (artifacts.continue_from)
    "exact": "carried: weights, AdamW moments, the lineage's KL reference policy, the group filter's state (same "
    "filter code) and the random streams (an exact continuation); the run's own learning rate applies",
    "optimizer": "carried: weights, AdamW moments, the lineage's KL reference policy and the group filter's state "
    "(same filter code); not carried: the random streams (fresh from the run's seed)",
    "weights": "carried: weights (a new lineage: its KL reference is these weights); not carried: AdamW moments, "
    "group-filter state, random streams",
}


def submit(spec: RunSpec) -> Handle:
    """Launch the trainer for `spec` in its own process group and return its handle.

    When a trainer already holds the folder's lock, return a handle to that trainer instead (see above).
    With `spec.ray_address` the trainer becomes a Ray job on that cluster (`_submit_ray`).
    """
    if spec.ray_address:
        return _submit_ray(spec)
    spec.out_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(spec.out_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a live trainer owns this folder (launched by a controller that died)
            return Handle(backend=NAME, run_id=spec.run_id, out_dir=spec.out_dir, pid=_pid_in(fd))
        interrupt.clear_marker(spec.out_dir)
        spec_path = spec.out_dir / SPEC_FILE
        spec_path.write_text(spec.model_dump_json(indent=2))
        cmd = _trainer_command(spec_path, spec.resume)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        with open(spec.out_dir / LOG_FILE, "ab") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, process_group=0, pass_fds=(fd,))
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(proc.pid).encode(), 0)
    finally:
        os.close(fd)  # the trainer keeps its inherited copy, and with it the lock
    return Handle(backend=NAME, run_id=spec.run_id, out_dir=spec.out_dir, pid=proc.pid)


ROOT = Path(__file__).resolve().parents[2]  # the checkout holding trainer_backend/, for `-m`


def _trainer_command(spec_path: Path, resume: bool) -> list[str]:
    return [sys.executable, "-m", "trainer_backend.local.train", "--spec", str(spec_path), *(["--resume"] * resume)]


def command(spec: RunSpec) -> str:
    """The command `submit` runs for `spec`: the trainer, or with `spec.ray_address` the Ray job's entry point."""
    out = spec.out_dir.resolve()
    cmd = _trainer_command(out / SPEC_FILE, spec.resume)
    return _ray_entrypoint(cmd, out) if spec.ray_address else shlex.join(cmd)


def _ray_entrypoint(cmd: list[str], out: Path) -> str:
    """The trainer as a Ray job: it takes the folder lock itself and appends to train.log on the shared folder."""
    return f"exec {shlex.join([*cmd, '--lock'])} >> {shlex.quote(str(out / LOG_FILE))} 2>&1"


# What a Ray job's trainer inherits besides EVOTRAINER_*: the Docker engine, and how W&B is asked for (never
# WANDB_API_KEY: a job's environment shows in the cluster's dashboard; log the cluster in to W&B instead).
FORWARDED_ENV = ("DOCKER_HOST", "WANDB_MODE", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_SILENT")


def _submit_ray(spec: RunSpec) -> Handle:
    """Submit the trainer as a Ray job, or adopt the job the folder's record names (see ray_jobs.py)."""
    assert spec.ray_address
    out = spec.out_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    record = ray_jobs.load_record(out)
    if record is not None:
        state = ray_jobs.status(record.address, record.job_id)
        if state is None:  # recorded, then the controller died before the submission went out
            ray_jobs.submit(record, out)
        if state is None or state not in ray_jobs.TERMINAL or not spec.resume or (out / SUMMARY_FILE).is_file():
            return Handle(backend=NAME, run_id=spec.run_id, out_dir=out, job_id=record.job_id)
    interrupt.clear_marker(out)
    spec_path = out / SPEC_FILE
    spec_path.write_text(spec.model_copy(update={"out_dir": out}).model_dump_json(indent=2))
    env = {k: v for k, v in os.environ.items() if k.startswith("EVOTRAINER_") or k in FORWARDED_ENV}
    env.update(PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
    # a stopped job's trainer finishes its step and saves before exiting (interrupt.py): Ray waits this long
    # between its SIGTERM and SIGKILL (the job supervisor reads it from the job's environment; default 3 s)
    env.setdefault("RAY_JOB_STOP_WAIT_TIME_S", str(int(STOP_GRACE_S)))
    record = ray_jobs.new_record(
        spec.ray_address,
        spec.run_id,
        out,
        record.attempt + 1 if record else 1,
        _ray_entrypoint(_trainer_command(spec_path, spec.resume), out),
        env,
        num_cpus=1,
    )
    ray_jobs.save_record(out, record)
    ray_jobs.submit(record, out)
    return Handle(backend=NAME, run_id=spec.run_id, out_dir=out, job_id=record.job_id)


def _pid_in(fd: int) -> int | None:
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return int(text) if text.isdigit() else None


_LOCK_FDS: list[int] = []  # the folder lock this process holds until it exits


def hold_folder_lock(out_dir: Path) -> bool:
    """Take the run folder's trainer lock for this process's lifetime (see the module docstring).

    A trainer the backend launched inherits the lock; one started by a Ray job takes it here. False when
    another live trainer holds it."""
    fd = os.open(out_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    _LOCK_FDS.append(fd)
    return True


def _lock_held(out_dir: Path) -> bool | None:
    """True while a trainer holds the folder's lock; None for a folder without one (launched before locks)."""
    try:
        fd = os.open(out_dir / LOCK_FILE, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        finished, _ = os.waitpid(pid, os.WNOHANG)  # reap our own child so it does not linger as a zombie
    except ChildProcessError:  # not our child (another process submitted it): probe instead
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return not _zombie(pid)
    return finished == 0


def _zombie(pid: int) -> bool:
    """True when `pid` is a zombie (exited, not yet reaped by its parent): the trainer is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False  # no /proc (not Linux) or the process just went: the next probe sees it
    return stat[stat.rfind(")") + 2 :].startswith("Z")


def poll(handle: Handle) -> RunStatus:
    """FINISHED when summary.json exists; RUNNING while a trainer holds the folder's lock (a folder from before
    the lock: while its process lives); STOPPED when its trainer stopped on request; LOST otherwise."""
    if (handle.out_dir / SUMMARY_FILE).is_file():
        return RunStatus.FINISHED
    record = ray_jobs.load_record(handle.out_dir)
    if record is not None:  # a Ray job: the cluster says whether it still runs
        state = ray_jobs.status(record.address, record.job_id)
        if state is not None and state not in ray_jobs.TERMINAL:
            return RunStatus.RUNNING
        return RunStatus.FINISHED if (handle.out_dir / SUMMARY_FILE).is_file() else _gone(handle.out_dir)
    alive = handle.pid is not None and _alive(handle.pid)  # also reaps our own exited child
    held = _lock_held(handle.out_dir)
    if held or (held is None and alive):
        return RunStatus.RUNNING
    return RunStatus.FINISHED if (handle.out_dir / SUMMARY_FILE).is_file() else _gone(handle.out_dir)


def _gone(out_dir: Path) -> RunStatus:
    """A trainer that left no summary: STOPPED when the user asked it to stop (`interrupt.py`), else LOST (the
    controller resumes it: a signal from `ray job stop`, a preempted node or a crash is not the user's stop)."""
    stopped = interrupt.read_marker(out_dir) is not None and interrupt.stop_was_requested(out_dir)
    return RunStatus.STOPPED if stopped else RunStatus.LOST


def collect(handle: Handle) -> RunResult:
    """Read summary.json into a `RunResult`; a run that left none is an infra error naming its log."""
    log_path = handle.out_dir / LOG_FILE
    path = handle.out_dir / SUMMARY_FILE
    if not path.is_file():
        marker = interrupt.read_marker(handle.out_dir)
        why = (
            f"run stopped on {marker.signal} after step {marker.step}, resumable from {marker.checkpoint} "
            f"(log {log_path})"
            if marker is not None
            else f"run ended without {SUMMARY_FILE}; check {log_path}{_ray_note(handle.out_dir)}"
        )
        return RunResult(
            run_id=handle.run_id, outcome=Outcome.INFRA_ERROR, out_dir=handle.out_dir, message=why, log_path=log_path
        )
    raw = json.loads(path.read_text())
    numbers = {k: float(v) for k, v in raw.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    message = str(raw.get("message", ""))
    if raw.get("path"):
        message = f"{message} (file: {raw['path']})" if raw["path"] not in message else message
    return RunResult(
        run_id=handle.run_id,
        outcome=Outcome(raw["outcome"]),
        out_dir=handle.out_dir,
        steps_done=int(raw.get("steps_done", 0)),
        summary=numbers,
        message=message,
        log_path=log_path,
        warnings=tuple(str(w) for w in raw.get("warnings", ()) if isinstance(w, str)),
    )


def _ray_note(out_dir: Path) -> str:
    """For a Ray run: the job's status and the end of its driver log (where a job that never started says why)."""
    record = ray_jobs.load_record(out_dir)
    if record is None:
        return ""
    try:
        state, tail = ray_jobs.status(record.address, record.job_id), ray_jobs.logs(record.address, record.job_id)
    except ray_jobs.RayJobsError as exc:
        return f"; Ray job {record.job_id} on {record.address}: cannot be read ({exc})"
    tail = tail.strip()[-1500:] or "(empty driver log)"
    return (
        f"; Ray job {record.job_id} on {record.address}: {state or 'not on the cluster'}; its log ends: {tail} "
        "(the run folder must be on storage the cluster's nodes share at the same path)"
    )


def final_checkpoint(run_dir: Path) -> Path | None:
    """The run's last checkpoint (`checkpoints/last.pt`), None when it saved none."""
    path = run_dir / FINAL_CHECKPOINT
    return path if path.is_file() else None


def continuation(run_dir: Path) -> str:
    """What the run carried over from its `init_checkpoint`, in words ("" for a run from the warm start)."""
    try:
        spec = json.loads((run_dir / CONFIG_FILE).read_text())["spec"]
    except (OSError, ValueError, KeyError):
        return ""
    if not spec.get("init_checkpoint"):
        return ""
    return CARRIED[spec.get("init_state", "weights")]


def stop(handle: Handle, grace_s: float = STOP_GRACE_S) -> bool:
    """Ask the run's trainer to stop after its current step; SIGKILL its process group after `grace_s`.

    The trainer (`interrupt.py`) saves its last checkpoint and exits without a summary, so the run resumes
    from there. Only the trainer's own pid gets SIGTERM (its sandbox workers finish the step's calls); the
    group is killed by id, never by name, and only while the folder's lock says a trainer still runs there,
    so a recycled pid is never signalled. A Ray run's job is stopped through the cluster (which sends the
    trainer the same SIGTERM). Returns True when a trainer was running and was asked to stop.
    """
    record = ray_jobs.load_record(handle.out_dir)
    if record is not None:
        state = ray_jobs.status(record.address, record.job_id)
        if state is None or state in ray_jobs.TERMINAL:
            return False
        interrupt.write_request(handle.out_dir, "stop")
        ray_jobs.stop(record.address, record.job_id)
        return True
    pid = trainer_pid(handle)
    if pid is None:
        return False
    interrupt.write_request(handle.out_dir, "stop")
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.time() + grace_s
    while _running(handle.out_dir, pid):
        if time.time() >= deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            _alive(pid)
            break
        time.sleep(0.1)
    return True


def trainer_pid(handle: Handle) -> int | None:
    """The pid of the trainer running in the handle's folder, None when none runs there now."""
    held = _lock_held(handle.out_dir)
    if held is False:
        return None
    if held is None:  # a folder from before the lock: the handle's pid, while it lives
        return handle.pid if handle.pid is not None and _alive(handle.pid) else None
    fd = os.open(handle.out_dir / LOCK_FILE, os.O_RDONLY)
    try:
        return _pid_in(fd) or handle.pid
    finally:
        os.close(fd)


def _running(out_dir: Path, pid: int) -> bool:
    alive = _alive(pid)  # also reaps our own exited child
    held = _lock_held(out_dir)
    return bool(held) or (held is None and alive)


def wait(handle: Handle, poll_s: float = 0.5, timeout_s: float | None = None) -> RunStatus:
    """Block until the run is no longer RUNNING (or `timeout_s` passes) and return its status."""
    deadline = None if timeout_s is None else time.time() + timeout_s
    while (status := poll(handle)) is RunStatus.RUNNING:
        if deadline is not None and time.time() > deadline:
            return status
        time.sleep(poll_s)
    return status


def run(spec: RunSpec) -> RunResult:
    """Submit `spec`, wait for it, and collect the result (convenience for tests and scripts)."""
    handle = submit(spec)
    wait(handle)
    return collect(handle)
