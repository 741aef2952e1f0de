"""Launch, poll, stop and finalize verl runs (the I/O adapter: subprocess, Ray Jobs, files).

A run's folder holds, besides the shared layout of `trainer_backend/base.py`:

    verl_run.json                 launch state (attempt, pid or Ray job id, stall bookkeeping)
    verl_metrics.<attempt>.jsonl  verl's FileLogger output, one fresh file per attempt
    verl_exit.<attempt>.json      exit code of a local attempt (written by `_wrap`)
    verl_data/, verl_dumps/{train,val}/, .verl/  parquet inputs, verl dumps, tailer state

Local runs are `python -m trainer_backend.verl._wrap ... -- <argv>` in their own session/process group
(stop = signal that group, by id). Cluster runs are Ray jobs (trainer_backend/ray_jobs.py: deterministic
submission ids, recorded before they are submitted); outputs must land on storage the controller can read
at the same absolute path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import orjson
from pydantic import BaseModel, ConfigDict

import trainer_backend.verl.readers as readers
from diagnostics.schema import (
    STRICT_METRIC,
    TRAIN_REWARD_METRIC,
    ReadProblem,
    Rollout,
    iter_jsonl,
    rollout_file,
    write_rollouts,
)
from harness.atomic import write_atomic
from harness.calls import load_function
from harness.failures import CandidateCodeError, Outcome
from harness.manifest import EntryPoint
from trainer_backend import ray_jobs
from trainer_backend.base import LOG_FILE, METRICS_FILE, SUMMARY_FILE, Handle, RunResult, RunSpec, RunStatus
from trainer_backend.verl.agentic import TRAJECTORY_DIR
from trainer_backend.verl.classify import classify
from trainer_backend.verl.config import TRAIN_DUMP_DIR as TRAIN_DUMPS
from trainer_backend.verl.config import VAL_DUMP_DIR as VAL_DUMPS
from trainer_backend.verl.turns import MARKERS

STATE_FILE = "verl_run.json"
RAW_METRICS = ".verl/raw_metrics.jsonl"
STRICT_BY_STEP = ".verl/strict_by_step.json"  # protected evaluator's mean per validation step (convert_dumps)
SUMMARY_KEYS = (
    TRAIN_REWARD_METRIC,
    STRICT_METRIC,
    "rollout/truncation_rate",
    "rollout/dead_group_ratio",
    "response_length/mean",
    "actor/entropy",
    "actor/pg_loss",
)


class RunState(BaseModel):
    """What `poll`/`collect` need to find a launched attempt again, from any process."""

    model_config = ConfigDict(extra="forbid")
    run_id: str
    attempt: int
    harness_root: str
    model_path: str
    max_response_length: int
    stall_timeout_s: int
    started_at: float
    log_offset: int = 0
    pid: int | None = None
    job_id: str | None = None
    ray_address: str | None = None
    job_status: str | None = None
    stop_reason: str | None = None
    growth_mark: int = 0
    last_growth_at: float = 0.0
    start_step: int = 0  # the parent checkpoint's global step when the run continues one (steps count from it)
    strict_eval: str = ""  # the protected evaluator (`eval/strict.py:score`) that scores the converted dumps
    tool_format: str | None = None  # an agentic run: verl's multi_turn.format (how its dumps split into turns)


def load_state(out_dir: Path) -> RunState | None:
    """Return the launch state of the run in `out_dir`, or None if nothing was launched there."""
    path = out_dir / STATE_FILE
    return RunState.model_validate_json(path.read_bytes()) if path.exists() else None


def save_state(out_dir: Path, state: RunState) -> None:
    """Write the launch state atomically."""
    write_atomic(out_dir / STATE_FILE, state.model_dump_json(indent=1))


def _handle(state: RunState, out_dir: Path) -> Handle:
    return Handle(backend="verl", run_id=state.run_id, out_dir=out_dir, pid=state.pid, job_id=state.job_id)


def launch(spec: RunSpec, argv: list[str], env: dict[str, str], state: RunState) -> Handle:
    """Start one attempt (local subprocess, or a Ray job when `spec.ray_address` is set); record its state."""
    out = spec.out_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / LOG_FILE
    state.log_offset = log_path.stat().st_size if log_path.exists() else 0
    state.started_at = state.last_growth_at = time.time()
    if spec.ray_address:  # recorded before it is submitted (write-ahead): a crash in between never runs it twice
        record = ray_jobs.new_record(spec.ray_address, spec.run_id, out, state.attempt, shlex.join(argv), env, 0)
        state.ray_address, state.job_id = record.address, record.job_id
        ray_jobs.save_record(out, record)
        save_state(out, state)
        ray_jobs.submit(record, out)
    else:
        with open(log_path, "ab") as log:
            log.write(f"=== attempt {state.attempt}: {shlex.join(argv)}\n".encode())
            log.flush()
            rc_file = out / f"verl_exit.{state.attempt}.json"
            proc = subprocess.Popen(
                [sys.executable, "-m", "trainer_backend.verl._wrap", str(rc_file), "--", *argv],
                cwd=out,
                env={**os.environ, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        state.pid = proc.pid
    save_state(out, state)
    return _handle(state, out)


def _exit_code(out: Path, state: RunState) -> int | None:
    path = out / f"verl_exit.{state.attempt}.json"
    return int(orjson.loads(path.read_bytes())["rc"]) if path.exists() else None


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):  # reap it if it is our child; harmless otherwise
        os.waitpid(pid, os.WNOHANG)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie still answers kill(0)
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _ray_logs(state: RunState) -> str:
    assert state.ray_address and state.job_id
    return ray_jobs.logs(state.ray_address, state.job_id)


def poll(handle: Handle) -> RunStatus:
    """Map process / Ray job status (+ log and metrics growth) to RunStatus; finalize finished runs."""
    out = handle.out_dir.resolve()
    if (out / SUMMARY_FILE).exists():
        return RunStatus.FINISHED
    state = load_state(out)
    if state is None:
        return RunStatus.LOST
    if state.job_id is not None:
        assert state.ray_address
        job_status = ray_jobs.status(state.ray_address, state.job_id)
        if job_status is None:
            return RunStatus.LOST  # recorded but never submitted: `submit` sends the recorded job
        state.job_status = job_status
        _write_ray_log(out, state)
        done = state.job_status in ray_jobs.TERMINAL
    else:
        done = _exit_code(out, state) is not None
        if not done and (state.pid is None or not _alive(state.pid)):
            return RunStatus.LOST
    sync_metrics(out, state)
    if not done and _stalled(out, state):
        stop(handle, reason="timeout")
        done = True
    save_state(out, state)
    if done:
        finalize(out, state)
        return RunStatus.FINISHED
    return RunStatus.RUNNING


def _write_ray_log(out: Path, state: RunState) -> None:
    text = _ray_logs(state).encode()
    log = out / LOG_FILE
    prefix = log.read_bytes()[: state.log_offset] if log.exists() else b""
    write_atomic(log, prefix + text)


def _stalled(out: Path, state: RunState) -> bool:
    mark = sum(p.stat().st_size for p in (out / LOG_FILE, out / f"verl_metrics.{state.attempt}.jsonl") if p.exists())
    now = time.time()
    if mark != state.growth_mark:
        state.growth_mark, state.last_growth_at = mark, now
    return now - state.last_growth_at > state.stall_timeout_s


def stop(handle: Handle, reason: str = "stopped", grace_s: float = 30.0) -> None:
    """Stop a running attempt: SIGTERM its process group (SIGKILL after `grace_s`) or stop its Ray job."""
    out = handle.out_dir.resolve()
    state = load_state(out)
    if state is None:
        return
    state.stop_reason = reason
    save_state(out, state)
    if state.job_id is not None:
        assert state.ray_address
        ray_jobs.stop(state.ray_address, state.job_id)
        return
    if state.pid is None or not _alive(state.pid):
        return
    os.killpg(state.pid, signal.SIGTERM)  # the run's own group, by id
    deadline = time.time() + grace_s
    while time.time() < deadline and _alive(state.pid):
        time.sleep(0.2)
    if _alive(state.pid):
        os.killpg(state.pid, signal.SIGKILL)
    rc_file = out / f"verl_exit.{state.attempt}.json"
    if not rc_file.exists():
        rc_file.write_bytes(orjson.dumps({"rc": -int(signal.SIGKILL)}))


def sync_metrics(out: Path, state: RunState) -> int:
    """Tail every attempt's FileLogger output into `metrics.jsonl` (with our metrics); return steps done."""
    raw_path = out / RAW_METRICS
    raw_path.parent.mkdir(parents=True, exist_ok=True)
    with open(raw_path, "ab") as raw:
        for attempt in range(1, state.attempt + 1):
            tail = readers.MetricsTail(out / f"verl_metrics.{attempt}.jsonl", out / f".verl/tail.{attempt}.json")
            for row in tail.poll():
                raw.write(orjson.dumps(row, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n")
    by_step: dict[int, dict[str, float]] = {}
    for _, row in iter_jsonl(raw_path, []):
        data = row["data"]
        numeric = {k: float(v) for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        by_step.setdefault(row["step"], {}).update(numeric)  # a resumed attempt re-logs a step: later keys win
    counter = readers.load_token_counter(state.model_path)
    for step, path in readers.dump_files(out / TRAIN_DUMPS):
        if step in by_step:
            by_step[step].update(readers.derived_metrics(path, state.max_response_length, counter))
    for data in by_step.values():
        acc = readers.strict_acc(data)  # the reward's own `acc`: candidate code's number, shown, never decisive
        if acc is not None:
            data["val/reward_acc"] = acc
    strict_path = out / STRICT_BY_STEP
    if strict_path.is_file():
        for step, value in orjson.loads(strict_path.read_bytes()).items():
            by_step.setdefault(int(step), {})[STRICT_METRIC] = float(value)
    lines = (orjson.dumps({"step": step, "data": by_step[step]}) + b"\n" for step in sorted(by_step))
    write_atomic(out / METRICS_FILE, b"".join(lines))
    last = max((s for s, d in by_step.items() if any(not k.startswith("val") for k in d)), default=0)
    return max(0, last - state.start_step)  # a continued run counts its own steps, not its parent's


def _strict_scorer(state: RunState) -> Callable[[str, str], float] | None:
    """The harness's protected strict evaluator (trusted code, imported here as the local trainer does)."""
    if not state.strict_eval:
        return None
    scorer = load_function(Path(state.harness_root), EntryPoint.parse(state.strict_eval))
    return cast(Callable[[str, str], float], scorer)


def convert_dumps(out: Path, state: RunState) -> list[ReadProblem]:
    """Write `rollouts/{train,val}/step_<N>.jsonl` from verl's dumps, scored by the protected evaluator; return the
    lines that could not be read or scored.

    verl never runs the strict evaluator: each response is scored here, so a candidate's reward cannot decide
    its own held-out score. The validation means per step go to `.verl/strict_by_step.json` (`val/strict_acc`).
    An agentic run's rollouts carry their trajectories (the step's `verl_dumps/trajectories/<step>/` records,
    else the dump text split at the format's markers; readers.Agentic).
    """
    counter = readers.load_token_counter(state.model_path)
    problems: list[ReadProblem] = []
    try:
        strict = _strict_scorer(state)
    except CandidateCodeError as exc:
        strict = None
        problems.append(ReadProblem(state.strict_eval, 0, f"strict evaluator did not load: {exc.message}"))
    means: dict[int, float] = {}
    for split, folder in (("train", TRAIN_DUMPS), ("val", VAL_DUMPS)):
        for step, path in readers.dump_files(out / folder):
            agentic = None
            if state.tool_format is not None:
                records = readers.load_records(out / TRAJECTORY_DIR / str(step), problems)
                agentic = readers.Agentic(MARKERS.get(state.tool_format), records)
            rollouts, bad = readers.read_dump_file(
                path, split, state.run_id, state.max_response_length, counter, agentic
            )
            problems += bad
            if strict is not None:
                rollouts = [_scored(r, strict, path, problems) for r in rollouts]
            scores = [r.strict_score for r in rollouts if r.strict_score is not None]
            if split == "val" and scores:
                means[step] = sum(scores) / len(scores)
            write_rollouts(rollout_file(out, split, step), rollouts)
    (out / STRICT_BY_STEP).parent.mkdir(parents=True, exist_ok=True)
    (out / STRICT_BY_STEP).write_bytes(orjson.dumps({str(k): v for k, v in means.items()}))
    return problems


def _scored(r: Rollout, strict: Callable[[str, str], float], path: Path, problems: list[ReadProblem]) -> Rollout:
    if r.ground_truth is None:
        return r
    try:
        return dataclasses.replace(r, strict_score=float(strict(r.response, r.ground_truth)))
    except Exception as exc:  # the evaluator failing on one response leaves that response unscored, never 0 or 1
        problems.append(ReadProblem(str(path), 0, f"strict evaluator raised {type(exc).__name__}: {exc}"))
        return r


def finalize(out: Path, state: RunState) -> RunResult:
    """Classify the ended attempt, convert its artefacts and write summary.json (last)."""
    problems = convert_dumps(out, state)
    steps_done = sync_metrics(out, state)
    log_path = out / LOG_FILE
    log_tail = b""
    if log_path.exists():
        with open(log_path, "rb") as fh:
            fh.seek(state.log_offset)
            log_tail = fh.read()[-200_000:]
    outcome, message = classify(
        _exit_code(out, state),
        state.job_status,
        log_tail.decode(errors="replace"),
        state.harness_root,
        steps_done,
        state.stop_reason,
        str(log_path),
    )
    rows = [orjson.loads(line) for line in (out / METRICS_FILE).read_bytes().splitlines() if line.strip()]
    summary: dict[str, float] = {
        "steps_done": float(steps_done),
        "attempt": float(state.attempt),
        "wall_s": round(time.time() - state.started_at, 1),
    }
    for row in rows:
        summary.update({k: v for k, v in row["data"].items() if k in SUMMARY_KEYS})
    summary.update(_run_summary(rows, state.start_step))
    summary["wall_time_s"] = summary["wall_s"]
    notes = []
    if readers.load_token_counter(state.model_path) is None:
        notes.append(
            f"tokenizer for {state.model_path} not available locally: no rollout/truncation_rate, "
            "rollouts carry response_tokens=0"
        )
    if problems:
        notes.append(f"{len(problems)} unreadable dump line(s), first: {problems[0]}")
    result = RunResult(
        run_id=state.run_id,
        outcome=outcome,
        out_dir=out,
        steps_done=steps_done,
        summary=summary,
        message="; ".join([message, *notes]),
        log_path=log_path,
    )
    write_atomic(out / SUMMARY_FILE, result.model_dump_json(indent=1))
    return result


def _run_summary(rows: list[dict[str, Any]], start_step: int) -> dict[str, float]:
    """The run-level numbers every backend reports (trainer_backend/base.py): strict accuracy before -> after,
    training reward first -> last."""
    strict = [(r["step"], r["data"][STRICT_METRIC]) for r in rows if STRICT_METRIC in r["data"]]
    train = [r["data"] for r in rows if r["step"] > start_step]
    reward = [d[TRAIN_REWARD_METRIC] for d in train if TRAIN_REWARD_METRIC in d]
    out: dict[str, float] = {}
    if strict:
        out["strict_acc_before"], out["strict_acc_after"] = float(strict[0][1]), float(strict[-1][1])
    if reward:
        out["train_reward_first"], out["train_reward_last"] = float(reward[0]), float(reward[-1])
    return out


def collect(handle: Handle) -> RunResult:
    """Return the finished run's result (classified); raise if it is still running."""
    out = handle.out_dir.resolve()
    status = poll(handle)
    if status is RunStatus.RUNNING:
        raise ValueError(f"run {handle.run_id} in {out} is still running; poll until FINISHED before collect")
    if status is RunStatus.LOST:
        state = load_state(out)
        log = out / LOG_FILE
        return RunResult(
            run_id=handle.run_id,
            outcome=Outcome.INFRA_ERROR,
            out_dir=out,
            steps_done=sync_metrics(out, state) if state else 0,
            log_path=log,
            message=f"run process is gone without an exit record (killed?); resubmit with resume=True; see {log}",
        )
    return RunResult.model_validate_json((out / SUMMARY_FILE).read_bytes())
