"""Process fallback: run candidate code as a child process with rlimits. WEAKER ISOLATION than Docker.

Used only when asked for (`mode="process"`) or when no Docker engine is reachable (`mode="auto"`). Every
result it produces carries `weaker_isolation=True` and says "weaker isolation" in its reason.

What it still does: empty environment (only explicitly passed variables), a fresh temporary scratch dir as
cwd, rlimits (CPU seconds, address space, file size, no core dumps, process count when not root),
a wall-clock timeout that kills the whole process group, capped output, and a results folder whose size is
polled (over `RESULTS_MAX_BYTES` the group is killed and the run is a `candidate_error`).

What it does NOT do (the reasons it is weaker): no network isolation, no file-system isolation (the child
can read and write whatever the host user can), no pid/memory cgroup (RLIMIT_AS is per process, and
RLIMIT_NPROC is per user and ignored for root), same user and kernel as the controller.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from harness.failures import Outcome
from sandboxes.docker import (
    BASE_ENV,
    RESULTS_MAX_BYTES,
    SandboxConfig,
    SandboxResult,
    failure_reason,
    read_results,
    tail,
)
from sandboxes.owners import scratch_dir

WEAKER = "weaker isolation (process fallback: no network or file-system isolation)"
FILE_SIZE_LIMIT_BYTES = 64 * 1024 * 1024
RESULTS_POLL_S = 0.1


def _user_process_count(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                count += entry.stat().st_uid == uid
            except OSError:
                continue
    return count


def rlimits(config: SandboxConfig, cpu_s: int | None) -> Callable[[], None]:
    """Return a `preexec_fn` that applies the limits in the child before it runs anything.

    `cpu_s` caps CPU seconds over the child's whole life (None for a long-lived worker, whose per-call
    wall-clock timeout is the limit instead).
    """
    mem = config.mem_limit_mb * 1024 * 1024
    uid = os.getuid()
    nproc = _user_process_count(uid) + config.pids_limit if uid != 0 else None

    def apply() -> None:
        if cpu_s is not None:
            resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT_BYTES, FILE_SIZE_LIMIT_BYTES))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    return apply


def sandbox_env(scratch: Path, env: dict[str, str] | None) -> dict[str, str]:
    """Return the child's whole environment: the fixed sandbox settings, scratch paths, explicit variables."""
    return {**BASE_ENV, "HOME": str(scratch), "TMPDIR": str(scratch), "PATH": "/usr/bin:/bin", **(env or {})}


def spawn(
    argv: list[str],
    config: SandboxConfig,
    scratch: Path,
    env: dict[str, str] | None,
    cpu_s: int | None,
    **kw: Any,
) -> subprocess.Popen[bytes]:
    """Start `argv` in its own session (so a timeout can kill the whole group) with the limits applied."""
    return subprocess.Popen(
        argv,
        cwd=scratch,
        env=sandbox_env(scratch, env),
        preexec_fn=rlimits(config, cpu_s),
        start_new_session=True,
        close_fds=True,
        **kw,
    )


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's process group (its forks too) and reap the child."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run_process(
    argv: list[str],
    *,
    config: SandboxConfig | None = None,
    env: dict[str, str] | None = None,
    want_results: bool = False,
) -> SandboxResult:
    """Run `argv` under rlimits in a scratch dir; `EVOTRAINER_RESULTS_DIR` names the results dir if wanted."""
    config = config or SandboxConfig()
    t0 = time.monotonic()
    with scratch_dir("proc") as tmp:
        scratch, results = Path(tmp) / "scratch", Path(tmp) / "results"
        scratch.mkdir()
        extra = dict(env or {})
        if want_results:
            results.mkdir()
            extra["EVOTRAINER_RESULTS_DIR"] = str(results)
        with open(Path(tmp) / "stdout", "w+b") as out, open(Path(tmp) / "stderr", "w+b") as err:
            cpu_s = int(config.timeout_s) + 1
            proc = spawn(argv, config, scratch, extra, cpu_s, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
            exit_code, timed_out, over = _wait(proc, t0 + config.timeout_s, results if want_results else None)
            # The group may outlive its leader (orphaned forks): kill it on every path.
            kill_group(proc)
            wall_s = time.monotonic() - t0
            stdout, stderr = (_read_tail(f, config.output_cap_bytes) for f in (out, err))
        size = results_size(results) if want_results else 0
        files, note = read_results(results) if want_results and size <= RESULTS_MAX_BYTES else ({}, "")
    if timed_out:
        outcome, reason = Outcome.TIMEOUT, f"wall-clock timeout after {config.timeout_s:g}s: process group killed"
    elif over or size > RESULTS_MAX_BYTES:
        outcome, reason = Outcome.CANDIDATE_ERROR, f"wrote over {RESULTS_MAX_BYTES} bytes to its results folder (cap)"
    elif exit_code == 0:
        outcome, reason = Outcome.OK, ""
    else:
        outcome, reason = Outcome.CANDIDATE_ERROR, failure_reason(exit_code, False, stderr, config)
    reason = "; ".join(r for r in (reason, note, WEAKER) if r)
    return SandboxResult(
        outcome, exit_code, stdout, stderr, wall_s, False, timed_out, files, reason, weaker_isolation=True
    )


def _wait(proc: subprocess.Popen[bytes], deadline: float, results: Path | None) -> tuple[int | None, bool, bool]:
    """Wait for `proc` until `deadline`: (exit code, timed out, results over the cap: killed for it).

    The results folder is on the host's disk here (no tmpfs without privileges), so its size is polled
    and the group is killed once it passes `RESULTS_MAX_BYTES`; a fast writer can overshoot by what it
    writes in one poll interval (weaker isolation, like the rest of this fallback).
    """
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None, True, False
        try:
            return proc.wait(timeout=min(RESULTS_POLL_S, remaining)), False, False
        except subprocess.TimeoutExpired:
            if results is not None and results_size(results) > RESULTS_MAX_BYTES:
                return None, False, True


def results_size(folder: Path) -> int:
    """Bytes of everything under `folder` (lstat: links are not followed)."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in (*dirnames, *filenames):
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def _read_tail(fh: BinaryIO, cap: int) -> str:
    size = fh.seek(0, os.SEEK_END)
    fh.seek(max(0, size - cap))
    return tail(fh.read(), cap)
