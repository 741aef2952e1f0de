"""Run untrusted harness code in a locked-down Docker container; classify how it ended.

Covered (each has a property test in `tests/integration/test_sandbox_docker_*.py`):

- network: `network_mode="none"` — only a loopback interface; no route to the internet or the host.
- file system: the root fs is read-only; code and data are bind-mounted read-only; the only writable places
  are a size-capped tmpfs at `/scratch` and, only when the trusted side asks for one, `/results`. Files
  in `/results` are read back by the trusted side without following symlinks, with size caps.
- resources: memory capped (`mem_limit`, swap equal, so no swap), CPU capped (`nano_cpus`), process count
  capped (`pids_limit`, fork bombs hit it), wall-clock timeout that kills the container; the container is
  removed in `finally` on every path; a container whose creating process died without running its
  `finally` (kill -9) is removed by `reap_orphans`, which `agent.session.run_graph` calls on every start.
- privileges: non-root user `65534:65534`, `cap_drop=["ALL"]`, `no-new-privileges`.
- environment: empty apart from the variables the trusted side passes explicitly (never the host's env).
- output: stdout/stderr are capped (json-file log rotation + `output_cap_bytes` tail) and are only ever
  shown to humans; results come from exit codes and files, never from lines the candidate printed.

Not covered (the threat model stops here):

- kernel or container-runtime escapes: this is a namespace/cgroup sandbox on a shared kernel, not a VM
  (use gVisor/Kata via the engine's `runtime` if candidates may be hostile rather than careless).
- timing and resource side channels; CPU time beyond the wall-clock limit's share of `nano_cpus`.
- disk I/O bandwidth (no blkio limits: cgroups v1 cannot throttle buffered writes) and `/scratch`'s
  tmpfs counts against the memory limit.
- whatever the candidate reads from the read-only mounts it was given (it sees the harness and inputs).
- in the long-lived worker (`sandboxes/worker.py`) candidate code shares the worker's process: it could
  forge its own responses, which gains it nothing it could not get by returning that value; it cannot
  forge another session's responses (random per-session token) and its prints never reach the channel.
- a remote `DOCKER_HOST`: bind mounts then refer to the remote host's paths.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.failures import InfraError, Outcome
from sandboxes.owners import owner_gone, owner_token, scratch_dir

OUTPUT_CAP_BYTES = 64 * 1024
RESULTS_MAX_FILES = 64
RESULTS_MAX_BYTES = 16 * 1024 * 1024
SANDBOX_USER = "65534:65534"
LABEL = "evotrainer.sandbox"  # on every sandbox container, so leftovers can be found
OWNER_LABEL = "evotrainer.owner"  # "host/pid/start time" of the process that created the container
# Not host variables: fixed settings every sandboxed process gets (numpy's BLAS threads count against
# pids_limit; TMPDIR points temp files at the only writable place).
BASE_ENV: dict[str, str] = {
    "HOME": "/scratch",
    "TMPDIR": "/scratch",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}
_PIDS_MARKERS = ("Resource temporarily unavailable", "BlockingIOError", "fork: retry", "can't start new thread")


@dataclass(frozen=True, slots=True)
class SandboxConfig:
    """Limits for one sandboxed run (the same limits apply to the long-lived worker container)."""

    image: str | None = None  # None: `sandboxes.image.image_tag()`
    mem_limit_mb: int = 1024
    cpus: float = 1.0
    pids_limit: int = 128
    scratch_mb: int = 64
    timeout_s: float = 60.0
    output_cap_bytes: int = OUTPUT_CAP_BYTES

    def __post_init__(self) -> None:
        if self.mem_limit_mb < 32 or self.pids_limit < 8 or self.cpus <= 0 or self.timeout_s <= 0:
            raise ValueError(
                f"SandboxConfig too tight: mem_limit_mb={self.mem_limit_mb} (>= 32), pids_limit={self.pids_limit}"
                f" (>= 8), cpus={self.cpus} (> 0), timeout_s={self.timeout_s} (> 0)"
            )
        if self.scratch_mb >= self.mem_limit_mb:
            raise ValueError(
                f"scratch_mb={self.scratch_mb} must be below mem_limit_mb={self.mem_limit_mb} (tmpfs is RAM)"
            )


@dataclass(frozen=True, slots=True)
class SandboxResult:
    """How one sandboxed command ended. `files` are what it wrote to `/results`, read by the trusted side."""

    outcome: Outcome
    exit_code: int | None
    stdout_tail: str
    stderr_tail: str
    wall_s: float
    oom_killed: bool = False
    timed_out: bool = False
    files: dict[str, bytes] = field(default_factory=dict)
    reason: str = ""
    weaker_isolation: bool = False


def tail(data: bytes, cap: int) -> str:
    """Decode the last `cap` bytes of `data` (the end of a log is where the error is)."""
    return data[-cap:].decode("utf-8", errors="replace")


def container_options(
    config: SandboxConfig,
    ro_mounts: dict[Path, str],
    env: dict[str, str] | None = None,
    results_dir: Path | None = None,
) -> dict[str, Any]:
    """Return the `containers.create` keyword arguments that enforce the sandbox (one place for all limits).

    `ro_mounts` maps host paths to container paths (bind-mounted read-only); `results_dir` (host) is the
    only writable bind mount, at `/results`.
    """
    from sandboxes.image import image_tag

    volumes = {str(Path(h).resolve()): {"bind": c, "mode": "ro"} for h, c in ro_mounts.items()}
    if results_dir is not None:
        volumes[str(results_dir.resolve())] = {"bind": "/results", "mode": "rw"}
    mem = f"{config.mem_limit_mb}m"
    return {
        "image": config.image or image_tag(),
        "network_mode": "none",
        "mem_limit": mem,
        "memswap_limit": mem,
        "nano_cpus": int(config.cpus * 1e9),
        "pids_limit": config.pids_limit,
        "read_only": True,
        "volumes": volumes,
        "tmpfs": {"/scratch": f"rw,nosuid,nodev,noexec,size={config.scratch_mb}m,mode=1777"},
        "working_dir": "/scratch",
        "environment": {**BASE_ENV, **(env or {})},
        "user": SANDBOX_USER,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "labels": {LABEL: "1", OWNER_LABEL: owner_token()},
        "log_config": {"type": "json-file", "config": {"max-size": "1m", "max-file": "1"}},
    }


def readable_by_sandbox(path: Path) -> bool:
    """Say whether the sandbox user (65534, "others") can read `path` and, for a directory, all it holds."""
    for p in (path, *(path.rglob("*") if path.is_dir() else ())):
        st = os.lstat(p)
        need = 0o005 if stat.S_ISDIR(st.st_mode) else 0o004
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & need != need:
            return False
    return True


def stage_copy(src: Path, staging: Path, exclude: tuple[str, ...] = ()) -> Path:
    """Copy `src` into `staging` with world-readable modes (dirs 0755, files 0644); return the copy.

    Used for what is bind-mounted into a container but not readable by its user (e.g. under a 0700 temp
    dir), and to give the worker a frozen snapshot of the harness. `exclude` holds paths relative to `src`
    (and bare names such as `.git`) that are left out.
    """
    staging.chmod(0o755)
    dst = staging / src.name
    if src.is_file():
        shutil.copyfile(src, dst)
        dst.chmod(0o644)
        return dst
    skip = {Path(e).parts for e in exclude}

    def ignore(folder: str, names: list[str]) -> set[str]:
        rel = Path(folder).relative_to(src).parts
        return {n for n in names if (*rel, n) in skip or (n,) in skip}

    shutil.copytree(src, dst, symlinks=True, ignore=ignore)
    for p in (dst, *dst.rglob("*")):
        if not p.is_symlink():
            p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def read_results(results_dir: Path) -> tuple[dict[str, bytes], str]:
    """Read the regular files the candidate left in `results_dir` (no symlinks followed, size-capped).

    Returns the files and a note on anything skipped.
    """
    files: dict[str, bytes] = {}
    skipped: list[str] = []
    total = 0
    for name in sorted(os.listdir(results_dir)):
        st = os.lstat(results_dir / name)
        if not stat.S_ISREG(st.st_mode):
            skipped.append(f"{name} (not a regular file)")
            continue
        if len(files) >= RESULTS_MAX_FILES or total + st.st_size > RESULTS_MAX_BYTES:
            skipped.append(f"{name} (over the {RESULTS_MAX_FILES} files / {RESULTS_MAX_BYTES} bytes cap)")
            continue
        fd = os.open(results_dir / name, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            files[name] = fh.read(RESULTS_MAX_BYTES - total)
        total += len(files[name])
    return files, ("skipped in /results: " + ", ".join(skipped)) if skipped else ""


def failure_reason(exit_code: int | None, oom_killed: bool, stderr: str, config: SandboxConfig) -> str:
    """Name the resource behind a non-zero exit where it can be detected."""
    if oom_killed:
        return f"memory limit ({config.mem_limit_mb} MiB) exceeded: OOM-killed"
    if "MemoryError" in stderr:
        return f"memory limit ({config.mem_limit_mb} MiB) reached: MemoryError"
    if any(marker in stderr for marker in _PIDS_MARKERS):
        return f"process limit (pids_limit={config.pids_limit}) reached: fork/thread creation failed"
    if exit_code == 137:
        return "killed by SIGKILL (exit 137)"
    if exit_code is not None and exit_code < 0:
        return f"killed by signal {-exit_code}"
    return f"exited with code {exit_code}"


def run_in_container(
    client: Any,
    command: list[str],
    *,
    config: SandboxConfig | None = None,
    ro_mounts: dict[Path, str] | None = None,
    env: dict[str, str] | None = None,
    want_results: bool = False,
) -> SandboxResult:
    """Run `command` in a fresh sandbox container, wait at most `config.timeout_s`, classify the outcome.

    Docker/engine failures come back as `INFRA_ERROR` results (never raised); the container is killed and
    removed on every path.
    """
    import docker.errors
    import requests.exceptions

    config = config or SandboxConfig()
    t0 = time.monotonic()
    container = None
    with scratch_dir("results") as tmp:
        results_dir = Path(tmp) if want_results else None
        if results_dir is not None:
            results_dir.chmod(0o777)  # the sandbox user (65534) writes here
        try:
            opts = container_options(config, ro_mounts or {}, env, results_dir)
            container = client.containers.create(command=command, detach=True, **opts)
            container.start()
            timed_out = False
            try:
                status = container.wait(timeout=config.timeout_s)
                exit_code: int | None = int(status.get("StatusCode", -1))
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                timed_out = True
                exit_code = None
                container.kill()
            wall_s = time.monotonic() - t0
            container.reload()
            oom_killed = bool(container.attrs["State"].get("OOMKilled", False))
            stdout = tail(container.logs(stdout=True, stderr=False), config.output_cap_bytes)
            stderr = tail(container.logs(stdout=False, stderr=True), config.output_cap_bytes)
            files, note = read_results(results_dir) if results_dir is not None else ({}, "")
        except docker.errors.ImageNotFound as exc:
            return _infra(t0, f"sandbox image missing ({exc}); run `evotrainer sandbox build`")
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            return _infra(t0, f"docker engine error: {type(exc).__name__}: {exc}")
        finally:
            if container is not None:
                remove_container(container)
    if timed_out:
        outcome, reason = Outcome.TIMEOUT, f"wall-clock timeout after {config.timeout_s:g}s: container killed"
    elif exit_code == 0 and not oom_killed:
        outcome, reason = Outcome.OK, ""
    else:
        outcome, reason = Outcome.CANDIDATE_ERROR, failure_reason(exit_code, oom_killed, stderr, config)
    reason = "; ".join(r for r in (reason, note) if r)
    return SandboxResult(outcome, exit_code, stdout, stderr, wall_s, oom_killed, timed_out, files, reason)


def _infra(t0: float, reason: str) -> SandboxResult:
    return SandboxResult(Outcome.INFRA_ERROR, None, "", "", time.monotonic() - t0, reason=reason)


def remove_container(container: Any) -> None:
    """Kill and remove `container`; a container that is already gone is fine."""
    import docker.errors

    with contextlib.suppress(docker.errors.NotFound):
        container.remove(force=True)


def reap_orphans(client: Any) -> list[str]:
    """Kill and remove the sandbox containers whose creating process on this host is dead; return their ids.

    A controller killed with SIGKILL runs no `finally`: its worker container stays behind (exited once its
    stdin closes, or still running). Containers of live processes, such as a trainer that outlived the
    controller and still computes rewards, are left alone.
    """
    import docker.errors

    removed = []
    for summary in client.api.containers(all=True, filters={"label": LABEL}):
        token = (summary.get("Labels") or {}).get(OWNER_LABEL)
        if token is None or not owner_gone(token):
            continue
        try:
            client.api.remove_container(summary["Id"], force=True)
        except docker.errors.APIError:  # already gone, or its removal is in progress
            continue
        removed.append(summary["Id"])
    return removed


def engine_client() -> Any:
    """Return a connected docker client, or raise `InfraError` saying why there is none."""
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # any failure here means "no engine reachable"
        raise InfraError(f"no Docker engine reachable: {type(exc).__name__}: {exc}") from exc
    return client
