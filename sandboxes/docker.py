"""Run untrusted harness code in a locked-down Docker container; classify how it ended.

Covered (each has a property test in `tests/integration/test_sandbox_docker_*.py`):

- network: `network_mode="none"` — only a loopback interface; no route to the internet or the host.
- file system: the root fs is read-only; code and data are bind-mounted read-only; the only writable places
  are a size-capped tmpfs at `/scratch` and, only when the trusted side asks for one, a tmpfs at `/results`
  capped in bytes and inodes (nothing the candidate writes lands on the host's disk). Its regular files
  are read back through `tar` run by the trusted side in the container, size-capped; more than
  `RESULTS_MAX_BYTES` written there is a `candidate_error`.
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
import select
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.failures import InfraError, Outcome
from sandboxes.owners import owner_gone, owner_token

OUTPUT_CAP_BYTES = 64 * 1024
RESULTS_MAX_FILES = 64
RESULTS_MAX_BYTES = 16 * 1024 * 1024
# The /results tmpfs holds a little more than the cap, so "over the cap" is seen rather than only ENOSPC.
RESULTS_TMPFS_BYTES = RESULTS_MAX_BYTES + 1024 * 1024
RESULTS_TMPFS_INODES = 4 * RESULTS_MAX_FILES
RESULTS_READ_TIMEOUT_S = 30.0
_EXEC_GRACE_S = 0.5  # output still in flight when the exec has already ended
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
    results: bool = False,
) -> dict[str, Any]:
    """Return the `containers.create` keyword arguments that enforce the sandbox (one place for all limits).

    `ro_mounts` maps host paths to container paths (bind-mounted read-only); with `results`, a capped
    tmpfs is mounted at `/results` (never a host folder: what a candidate writes cannot fill the host).
    """
    from sandboxes.image import image_tag

    volumes = {str(Path(h).resolve()): {"bind": c, "mode": "ro"} for h, c in ro_mounts.items()}
    tmpfs = {"/scratch": f"rw,nosuid,nodev,noexec,size={config.scratch_mb}m,mode=1777"}
    if results:  # uid/gid, not mode: the engine gives a tmpfs the mode of the folder it covers
        user, _, group = SANDBOX_USER.partition(":")
        tmpfs["/results"] = (
            f"rw,nosuid,nodev,noexec,size={RESULTS_TMPFS_BYTES // 1024}k,"
            f"nr_inodes={RESULTS_TMPFS_INODES},uid={user},gid={group}"
        )
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
        "tmpfs": tmpfs,
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

    With `want_results`, the command runs as an exec in a container that idles (`sleep`), so the capped
    `/results` tmpfs is still there to be read when it ends; its exit code comes from the engine.
    Docker/engine failures come back as `INFRA_ERROR` results (never raised); the container is killed and
    removed on every path.
    """
    import docker.errors
    import requests.exceptions

    config = config or SandboxConfig()
    t0 = time.monotonic()
    container = None
    try:
        opts = container_options(config, ro_mounts or {}, env, results=want_results)
        if want_results:
            container = client.containers.create(command=["sleep", "infinity"], detach=True, **opts)
            container.start()
            return _run_exec(client, container, command, config, t0)
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
    except docker.errors.ImageNotFound as exc:
        return _infra(t0, f"sandbox image missing ({exc}); run `evotrainer sandbox build`")
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        return _infra(t0, f"docker engine error: {type(exc).__name__}: {exc}")
    finally:
        if container is not None:
            remove_container(container)
    return _classified(config, exit_code, oom_killed, timed_out, stdout, stderr, wall_s, {}, "")


def _classified(
    config: SandboxConfig,
    exit_code: int | None,
    oom_killed: bool,
    timed_out: bool,
    stdout: str,
    stderr: str,
    wall_s: float,
    files: dict[str, bytes],
    note: str,
    over_cap: str = "",
) -> SandboxResult:
    if timed_out:
        outcome, reason = Outcome.TIMEOUT, f"wall-clock timeout after {config.timeout_s:g}s: container killed"
    elif over_cap:
        outcome, reason = Outcome.CANDIDATE_ERROR, over_cap
    elif exit_code == 0 and not oom_killed:
        outcome, reason = Outcome.OK, ""
    else:
        outcome, reason = Outcome.CANDIDATE_ERROR, failure_reason(exit_code, oom_killed, stderr, config)
    reason = "; ".join(r for r in (reason, note) if r)
    return SandboxResult(outcome, exit_code, stdout, stderr, wall_s, oom_killed, timed_out, files, reason)


def _run_exec(client: Any, container: Any, command: list[str], config: SandboxConfig, t0: float) -> SandboxResult:
    """Run `command` as an exec of the idle `container`, then read back its `/results` (see `run_in_container`)."""
    api = client.api
    exec_id = api.exec_create(container.id, command)["Id"]
    run = _exec_output(api, exec_id, time.monotonic() + config.timeout_s, config.output_cap_bytes, keep="tail")
    wall_s = time.monotonic() - t0
    exit_code: int | None = None
    files: dict[str, bytes] = {}
    note = over_cap = ""
    if run.finished:
        code = api.exec_inspect(exec_id).get("ExitCode")
        exit_code = None if code is None else int(code)
        files, note, over_cap = _collect_results(api, container.id)
    container.reload()
    oom_killed = bool(container.attrs["State"].get("OOMKilled", False))
    stdout, stderr = tail(run.stdout, config.output_cap_bytes), tail(run.stderr, config.output_cap_bytes)
    return _classified(config, exit_code, oom_killed, not run.finished, stdout, stderr, wall_s, files, note, over_cap)


@dataclass
class _ExecRun:
    stdout: bytes
    stderr: bytes
    finished: bool  # the exec ended before the deadline
    overflow: bool = False  # `keep="head"`: stdout went past the limit


def _exec_output(api: Any, exec_id: str, deadline: float, limit: int, keep: str) -> _ExecRun:
    """Start an exec and read its demultiplexed output until it ends (plus a short grace) or `deadline`.

    `keep="tail"` keeps the last `limit` bytes of stdout (candidate output, for humans); `keep="head"`
    keeps the first `limit` and flags anything beyond (a tar stream that must fit). A background process
    still holding the exec's stdout cannot stretch the wait: the exec's own end is polled.
    """
    sock = api.exec_start(exec_id, socket=True)
    raw = getattr(sock, "_sock", sock)
    buf, out, err = bytearray(), bytearray(), bytearray()
    overflow, ended_at, next_poll = False, None, 0.0
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                return _ExecRun(bytes(out), bytes(err), False, overflow)
            if ended_at is None and now >= next_poll:
                next_poll = now + 0.25
                if not api.exec_inspect(exec_id).get("Running", False):
                    ended_at = now
            if ended_at is not None and now >= ended_at + _EXEC_GRACE_S:
                break
            wait = min(0.25, deadline - now) if ended_at is None else max(0.0, ended_at + _EXEC_GRACE_S - now)
            if not select.select([raw], [], [], wait)[0]:
                continue
            chunk = raw.recv(1 << 20)
            if not chunk:
                break
            buf += chunk
            while len(buf) >= 8 and len(buf) >= 8 + int.from_bytes(buf[4:8], "big"):
                stream, size = buf[0], int.from_bytes(buf[4:8], "big")
                payload = bytes(buf[8 : 8 + size])
                del buf[: 8 + size]
                if stream == 2:
                    err = (err + payload)[-limit:]
                elif keep == "tail":
                    out = (out + payload)[-limit:]
                elif len(out) + len(payload) > limit:
                    overflow = True
                else:
                    out += payload
    finally:
        sock.close()
    return _ExecRun(bytes(out), bytes(err), True, overflow)


def _collect_results(api: Any, container_id: str) -> tuple[dict[str, bytes], str, str]:
    """Read `/results` through `tar` in the container: (files, note on skipped entries, over-the-cap reason)."""
    import io
    import tarfile

    limit = RESULTS_TMPFS_BYTES + (RESULTS_TMPFS_INODES + 4) * 1024 + 20480  # data + tar headers and padding
    exec_id = api.exec_create(container_id, ["tar", "-C", "/results", "-cf", "-", "."])["Id"]
    run = _exec_output(api, exec_id, time.monotonic() + RESULTS_READ_TIMEOUT_S, limit, keep="head")
    cap = f"{RESULTS_MAX_BYTES} bytes"
    if run.overflow or not run.finished:
        return {}, "", f"results in /results could not be read within the cap ({cap}, {RESULTS_READ_TIMEOUT_S:g}s)"
    files: dict[str, bytes] = {}
    skipped: list[str] = []
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(run.stdout), mode="r:") as archive:
            for member in archive.getmembers():
                name = member.name.removeprefix("./")
                if name in ("", "."):
                    continue
                total += member.size if member.isreg() else 0
                fh = archive.extractfile(member) if member.isreg() and "/" not in name else None
                if fh is None:
                    skipped.append(f"{name} (not a regular file at the top of /results)")
                elif len(files) >= RESULTS_MAX_FILES:
                    skipped.append(f"{name} (over the {RESULTS_MAX_FILES} files cap)")
                else:
                    files[name] = fh.read()
    except (tarfile.TarError, OSError) as exc:
        return {}, "", f"results in /results are not readable ({type(exc).__name__}: {exc})"
    if total > RESULTS_MAX_BYTES:
        return {}, "", f"wrote {total} bytes to /results, over the {cap} cap"
    return files, ("skipped in /results: " + ", ".join(skipped[:20])) if skipped else "", ""


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
