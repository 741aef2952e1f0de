"""Call harness code (reward, group filter, environment) inside one long-lived sandbox; run analysis scripts.

`SandboxCalls` starts ONE container per instance (a world-readable snapshot of the harness folder, minus
`exclude`, mounted read-only at /harness; limits from `SandboxConfig`) running the baked-in worker
(`sandboxes/_worker_main.py`), and talks to it over the container's attach socket: requests are
length-prefixed JSON frames on stdin; responses are frames on the worker's private copy of stdout, each
`MAGIC + session token + length + JSON`. Candidate prints go to stderr (shown to humans, capped), never to
the channel; bytes on the channel that are not a frame of this session
raise `CandidateCodeError(SPOOF_DETECTED)`. Any failure kills the container; the next call starts a new one.

An agentic harness's environments (`harness/env.py`) live in the same worker: `open_episodes` makes one per
data row, `env_calls` runs one turn's calls of every live episode in ONE request (the per-call timeout is
per turn), `close_episodes` forgets them. Results are checked like rewards: a frame that is not this
session's, answers of the wrong count, an episode id the worker did not hand out, or a result the worker
could not serialise fail the candidate; tool results are cut to `harness.env.MAX_RESULT_CHARS` inside the
worker, so a flooding environment never floods the channel.

`mode="process"` runs the same worker as a child process (`sandboxes/process.py`: weaker isolation, and
every error message says so); `mode="auto"` uses Docker when an engine is reachable, else the process.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import secrets
import select
import struct
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, NoReturn

from harness.calls import validate_filter_state
from harness.env import MAX_RESULT_CHARS, Isolation
from harness.failures import CandidateCodeError, InfraError, Outcome
from sandboxes.docker import (
    SandboxConfig,
    SandboxResult,
    container_options,
    engine_client,
    failure_reason,
    readable_by_sandbox,
    remove_container,
    run_in_container,
    stage_copy,
    tail,
)
from sandboxes.image import WORKER_PATH_IN_IMAGE, WORKER_SOURCE
from sandboxes.owners import scratch_dir
from sandboxes.process import WEAKER, kill_group, run_process, spawn

log = logging.getLogger(__name__)

Mode = Literal["docker", "process", "auto"]
MAGIC = b"EVO1"  # must match _worker_main.MAGIC
_LEN = struct.Struct(">I")
_HEADER = len(MAGIC) + 16 + _LEN.size
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
STARTUP_TIMEOUT_S = 30.0


def resolve_mode(mode: Mode, client: Any = None) -> tuple[Literal["docker", "process"], Any]:
    """Pick the sandbox kind: `auto` falls back to the (weaker) process sandbox only when no engine answers."""
    if mode == "process":
        return "process", None
    try:
        return "docker", client if client is not None else engine_client()
    except InfraError as exc:
        if mode == "docker":
            raise
        log.warning("no Docker engine (%s): falling back to the process sandbox, %s", exc.message, WEAKER)
        return "process", None


class _DockerChannel:
    """The worker container and its attach socket (stdin in, demultiplexed stdout/stderr out)."""

    def __init__(self, client: Any, config: SandboxConfig, harness_root: Path, exclude: tuple[str, ...]) -> None:
        self.config = config
        # A snapshot, not the live folder: world-readable for the sandbox user, frozen for the session,
        # without `exclude` (e.g. the protected surface).
        self.staging = scratch_dir("harness")
        snapshot = stage_copy(harness_root, Path(self.staging.name), (*exclude, ".git", ".venv", "__pycache__"))
        opts = container_options(config, {snapshot: "/harness"})
        try:
            self.container = client.containers.create(
                command=["python3", "-I", "-B", WORKER_PATH_IN_IMAGE], stdin_open=True, detach=True, **opts
            )
        except BaseException:
            self.staging.cleanup()
            raise
        try:
            params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            self.sock = client.api.attach_socket(self.container.id, params=params)
            self.raw = self.sock._sock
            self.container.start()
        except BaseException:
            self.kill()
            raise
        self.buf = bytearray()
        self.stderr = bytearray()

    def send(self, data: bytes) -> None:
        self.raw.sendall(data)

    def read(self, timeout_s: float) -> bytes | None:
        """Return the next stdout bytes, b"" at end of stream, None when `timeout_s` passes first."""
        deadline = time.monotonic() + timeout_s
        while True:
            while len(self.buf) >= 8:
                stream, size = self.buf[0], int.from_bytes(self.buf[4:8], "big")
                if len(self.buf) < 8 + size:
                    break
                payload = bytes(self.buf[8 : 8 + size])
                del self.buf[: 8 + size]
                if stream == 1:
                    return payload
                self.stderr = (self.stderr + payload)[-self.config.output_cap_bytes :]
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self.raw], [], [], remaining)[0]:
                return None
            chunk = self.raw.recv(1 << 20)
            if not chunk:
                return b""
            self.buf += chunk

    def stderr_tail(self) -> str:
        return tail(bytes(self.stderr), self.config.output_cap_bytes)

    def exit_reason(self) -> str:
        status = self.container.wait(timeout=10)
        self.container.reload()
        oom = bool(self.container.attrs["State"].get("OOMKilled", False))
        return failure_reason(int(status.get("StatusCode", -1)), oom, self.stderr_tail(), self.config)

    def kill(self) -> None:
        try:
            remove_container(self.container)
        finally:
            self.staging.cleanup()


class _ProcessChannel:
    """The worker as a child process under rlimits (weaker isolation)."""

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self.tmp = scratch_dir("worker")
        self.err = open(Path(self.tmp.name) / "stderr", "w+b")  # noqa: SIM115 - lives as long as the worker
        argv = [sys.executable, "-I", "-B", str(WORKER_SOURCE)]
        pipe = subprocess.PIPE
        self.proc = spawn(argv, config, Path(self.tmp.name), None, None, stdin=pipe, stdout=pipe, stderr=self.err)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout

    def send(self, data: bytes) -> None:
        self.stdin.write(data)
        self.stdin.flush()

    def read(self, timeout_s: float) -> bytes | None:
        if not select.select([self.stdout], [], [], timeout_s)[0]:
            return None
        return os.read(self.stdout.fileno(), 1 << 20)

    def stderr_tail(self) -> str:
        size = self.err.seek(0, os.SEEK_END)
        self.err.seek(max(0, size - self.config.output_cap_bytes))
        return tail(self.err.read(), self.config.output_cap_bytes)

    def exit_reason(self) -> str:
        return failure_reason(self.proc.wait(timeout=10), False, self.stderr_tail(), self.config)

    def kill(self) -> None:
        kill_group(self.proc)
        self.err.close()
        self.tmp.cleanup()


class SandboxCalls:
    """Reward and group-filter calls into harness code running in one long-lived sandbox.

    Args:
        harness_root: the harness folder (mounted read-only; entry paths are relative to it).
        reward_entry: `path.py:function` of the reward (`compute_score` contract).
        filter_entry: `path.py:function` of the group filter, if any.
        env_entry: `path.py:function` making one episode's environment (`make_env`), agentic harnesses only.
        mode: "docker", "process" (weaker isolation) or "auto".
        config: container limits (memory, CPU, pids, scratch).
        call_timeout_s: wall-clock limit per call (one batch of rewards, one filter call, one turn of
            environment calls across the live episodes).
        exclude: harness-relative paths kept out of the sandbox's snapshot (pass the protected surface:
            held-out data and the strict evaluator are no business of a reward). Docker mode only.
    """

    def __init__(
        self,
        harness_root: Path,
        reward_entry: str,
        filter_entry: str | None = None,
        mode: Mode = "docker",
        *,
        config: SandboxConfig | None = None,
        call_timeout_s: float = 30.0,
        client: Any = None,
        exclude: tuple[str, ...] = (),
        env_entry: str | None = None,
    ) -> None:
        self.harness_root = Path(harness_root).resolve()
        if not self.harness_root.is_dir():
            raise ValueError(f"harness_root {self.harness_root} is not a directory")
        self.reward_entry, self.filter_entry, self.env_entry = reward_entry, filter_entry, env_entry
        self._episodes: set[int] = set()  # the ids the current worker handed out
        self.mode, self._client = resolve_mode(mode, client)
        self.weaker_isolation = self.mode == "process"
        self.config = config or SandboxConfig()
        self.call_timeout_s = call_timeout_s
        self.exclude = exclude
        self._channel: _DockerChannel | _ProcessChannel | None = None
        self._token = b""
        self._next_id = 0
        self._rbuf = bytearray()

    def __enter__(self) -> SandboxCalls:
        self.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def start(self) -> None:
        """Start the sandbox and import the harness code (raises `CandidateCodeError` on import failure)."""
        if self._channel is not None:
            return
        import_path = self.reward_entry.partition(":")[0]
        try:
            if self.mode == "docker":
                self._channel = _DockerChannel(self._client, self.config, self.harness_root, self.exclude)
            else:
                self._channel = _ProcessChannel(self.config)
        except Exception as exc:
            raise InfraError(f"could not start the {self.mode} sandbox: {type(exc).__name__}: {exc}") from exc
        self._token, self._rbuf = secrets.token_bytes(16), bytearray()
        root = "/harness" if self.mode == "docker" else str(self.harness_root)
        init = {
            "token": self._token.hex(),
            "harness_root": root,
            "reward": self.reward_entry,
            "filter": self.filter_entry,
            "env": self.env_entry,
        }
        self._exchange(init, import_path, STARTUP_TIMEOUT_S + self.call_timeout_s, expect_id=None)

    def open_episodes(self, rows: list[dict[str, Any]], isolation: Isolation | None = None) -> list[int]:
        """Make one environment per data row inside the sandbox (`make_env(row)`); return their episode ids.

        The env module's declared isolation holds (`harness.env`); `isolation` overrides it (a replay's
        reference environments are built with ``fresh_module``).

        Raises:
            ValueError: the harness declares no environment (a bug of the caller).
            CandidateCodeError: `make_env` raised, hung or answered something else than fresh ids.
        """
        path = self._env_path()
        if not rows:
            return []
        if self._channel is None:
            self._episodes.clear()  # a fresh worker holds no environment
        request: dict[str, Any] = {"op": "open", "rows": rows}
        if isolation is not None:
            request["isolation"] = isolation
        response = self._call(request, path)
        ids = response.get("episodes")
        if (
            not isinstance(ids, list)
            or len(ids) != len(rows)
            or not all(type(i) is int for i in ids)
            or len(set(ids)) != len(ids)
            or self._episodes.intersection(ids)
        ):
            got = type(ids).__name__
            self._fail(Outcome.SPOOF_DETECTED, f"worker answered {got} for {len(rows)} new episodes", path)
        self._episodes.update(ids)
        return list(ids)

    def env_calls(self, calls: list[tuple[int, str, dict[str, Any]]]) -> list[object]:
        """Run one turn's `(episode, tool, arguments)` calls in ONE request; return each raw result.

        Results are JSON round-tripped and unvalidated (`harness.env.validate_env_result` checks them);
        result texts come back cut to at most `MAX_RESULT_CHARS` + 1 characters.

        Raises:
            ValueError: an episode this object never opened (a bug of the caller).
            CandidateCodeError: `env.call` raised, hung (TIMEOUT), or the answer is not one value per call.
        """
        path = self._env_path()
        if not calls:
            return []
        unknown = sorted({episode for episode, _, _ in calls} - self._episodes)
        if unknown:
            raise ValueError(f"env_calls for episodes that are not open: {unknown[:5]}")
        response = self._call({"op": "env_calls", "calls": [list(c) for c in calls]}, path)
        values = response.get("values")
        if not isinstance(values, list) or len(values) != len(calls):
            self._fail(Outcome.SPOOF_DETECTED, f"worker returned {type(values).__name__} for {len(calls)} calls", path)
        for value in values:
            text = value.get("result") if isinstance(value, dict) else value
            if isinstance(text, str) and len(text) > MAX_RESULT_CHARS + 1:
                self._fail(Outcome.SPOOF_DETECTED, "worker returned a result longer than it may", path)
        return values

    def close_episodes(self, episodes: list[int]) -> None:
        """Forget these episodes' environments in the worker (a no-op once the worker is gone)."""
        path = self._env_path()
        live = [e for e in episodes if e in self._episodes]
        self._episodes.difference_update(live)
        if live and self._channel is not None:
            self._call({"op": "close", "episodes": live}, path)

    def _env_path(self) -> str:
        if self.env_entry is None:
            raise ValueError("this harness declares no env: it has no episodes")
        return self.env_entry.partition(":")[0]

    def close(self) -> None:
        """Kill and remove the sandbox (idempotent)."""
        self._episodes.clear()
        if self._channel is not None:
            channel, self._channel = self._channel, None
            channel.kill()

    def compute_rewards(self, batch: list[dict[str, Any]]) -> list[object]:
        """Return what the reward returned for each item (JSON round-tripped; NaN survives)."""
        path = self.reward_entry.partition(":")[0]
        response = self._call({"op": "rewards", "batch": batch}, path)
        values = response.get("values")
        if not isinstance(values, list) or len(values) != len(batch):
            self._fail(Outcome.SPOOF_DETECTED, f"worker returned {type(values).__name__} for {len(batch)} items", path)
        return values

    def filter_groups(
        self, group_rewards: list[list[float]], state: dict[str, Any]
    ) -> tuple[list[bool], dict[str, Any]]:
        """Return the filter's keep flags (one bool per group) and the state it left behind.

        A harness without a group filter keeps every group (as `harness.calls.InProcessCalls` does).
        """
        if self.filter_entry is None:
            return [True] * len(group_rewards), state
        path = self.filter_entry.partition(":")[0]
        response = self._call({"op": "filter", "group_rewards": group_rewards, "state": state}, path)
        keep, new_state = response.get("keep"), response.get("state")
        if not isinstance(keep, list) or len(keep) != len(group_rewards) or not all(isinstance(k, bool) for k in keep):
            got = f"{type(keep).__name__} of length {len(keep)}" if isinstance(keep, list) else type(keep).__name__
            self._fail(Outcome.CANDIDATE_ERROR, f"filter must return {len(group_rewards)} bools, got {got}", path)
        try:
            return keep, validate_filter_state(new_state, self.filter_entry)
        except CandidateCodeError as exc:
            self._fail(exc.outcome, exc.message, path)

    def _call(self, request: dict[str, Any], path: str) -> dict[str, Any]:
        self.start()
        self._next_id += 1
        return self._exchange({**request, "id": self._next_id}, path, self.call_timeout_s, expect_id=self._next_id)

    def _exchange(self, request: dict[str, Any], path: str, timeout_s: float, expect_id: int | None) -> dict[str, Any]:
        assert self._channel is not None
        body = json.dumps(request, allow_nan=True).encode()
        try:
            self._channel.send(_LEN.pack(len(body)) + body)
        except OSError as exc:
            self._fail(Outcome.CANDIDATE_ERROR, f"worker stopped reading requests ({exc}); {self._died(path)}", path)
        frame = self._read_frame(timeout_s, path)
        try:
            response = json.loads(frame)
        except ValueError:
            self._fail(Outcome.SPOOF_DETECTED, "malformed response frame", path)
        if not isinstance(response, dict) or response.get("id") != expect_id:
            self._fail(Outcome.SPOOF_DETECTED, "response does not answer this request", path)
        assert isinstance(response, dict)
        if not response.get("ok"):
            err = response.get("error")
            err = err if isinstance(err, dict) else {}  # the frame comes from the candidate's process
            where = str(err.get("path") or path)[:300]
            msg = f"{err.get('kind', 'error')} failed in {where}: {err.get('type')}: {str(err.get('message'))[:2000]}"
            self._fail(Outcome.CANDIDATE_ERROR, msg, where)
        return response

    def _read_frame(self, timeout_s: float, path: str) -> bytes:
        assert self._channel is not None
        deadline = time.monotonic() + timeout_s
        size: int | None = None
        while size is None or len(self._rbuf) < _HEADER + size:
            if size is None and len(self._rbuf) >= _HEADER:
                magic, token = bytes(self._rbuf[:4]), bytes(self._rbuf[4:20])
                if magic != MAGIC or not secrets.compare_digest(token, self._token):
                    self._fail(
                        Outcome.SPOOF_DETECTED, "bytes on the response channel that are not a worker frame", path
                    )
                size = _LEN.unpack(self._rbuf[20:_HEADER])[0]
                if size > MAX_RESPONSE_BYTES:
                    self._fail(Outcome.CANDIDATE_ERROR, f"response of {size} bytes exceeds the cap", path)
                continue
            try:
                chunk = self._channel.read(max(0.0, deadline - time.monotonic()))
            except OSError as exc:
                self.close()
                raise InfraError(f"sandbox channel failed: {exc}") from exc
            if chunk is None:
                self._fail(Outcome.TIMEOUT, f"call exceeded {timeout_s:g}s; sandbox killed", path)
            if not chunk:
                self._fail(Outcome.CANDIDATE_ERROR, self._died(path), path)
            self._rbuf += chunk
        frame = bytes(self._rbuf[_HEADER : _HEADER + size])
        del self._rbuf[: _HEADER + size]
        return frame

    def _died(self, path: str) -> str:
        assert self._channel is not None
        try:
            reason = self._channel.exit_reason()
        except Exception as exc:  # advisory only; the death itself is the fact
            reason = f"exit status unavailable ({type(exc).__name__})"
        return f"worker died ({reason}); stderr tail: {self._channel.stderr_tail()[-2000:]}"

    def _fail(self, outcome: Outcome, message: str, path: str) -> NoReturn:
        """Kill the sandbox and raise; the next call starts a fresh one."""
        self.close()
        if self.weaker_isolation:
            message = f"{message} [{WEAKER}]"
        raise CandidateCodeError(outcome, message, path)


def run_script(
    script_path: Path,
    inputs: dict[str, Path],
    timeout_s: float,
    *,
    mode: Mode = "docker",
    config: SandboxConfig | None = None,
    client: Any = None,
) -> SandboxResult:
    """Run an analysis script over read-only inputs; its JSON result is `files["out.json"]`.

    The script finds input `name` at `$EVOTRAINER_INPUTS_DIR/name` (/inputs/name in Docker) and writes
    `$EVOTRAINER_RESULTS_DIR/out.json` (/results/out.json). A zero exit without a parseable out.json is a
    CANDIDATE_ERROR.
    """
    for name in inputs:
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"input name {name!r} must be a plain file name")
    config = dataclasses.replace(config or SandboxConfig(), timeout_s=timeout_s)
    script_path = Path(script_path).resolve()
    kind, client = resolve_mode(mode, client)
    if kind == "docker":
        with scratch_dir("stage") as tmp:
            mounts = {stage_copy(script_path, Path(tmp)): f"/code/{script_path.name}"}
            for name, src in inputs.items():
                src = Path(src).resolve()
                # Large rollout files are mounted in place; only what the sandbox user cannot read is copied.
                if not readable_by_sandbox(src):
                    holder = Path(tmp) / f"input-{name}"
                    holder.mkdir()
                    src = stage_copy(src, holder)
                mounts[src] = f"/inputs/{name}"
            env = {"EVOTRAINER_INPUTS_DIR": "/inputs", "EVOTRAINER_RESULTS_DIR": "/results"}
            argv = ["python3", "-I", "-B", f"/code/{script_path.name}"]
            result = run_in_container(client, argv, config=config, ro_mounts=mounts, env=env, want_results=True)
    else:
        with scratch_dir("inputs") as tmp:
            for name, src in inputs.items():
                (Path(tmp) / name).symlink_to(Path(src).resolve())
            argv = [sys.executable, "-I", "-B", str(script_path)]
            result = run_process(argv, config=config, env={"EVOTRAINER_INPUTS_DIR": tmp}, want_results=True)
    if result.outcome is Outcome.OK:
        try:
            json.loads(result.files["out.json"])
        except (KeyError, ValueError) as exc:
            why = "wrote no out.json" if isinstance(exc, KeyError) else f"wrote an out.json that is not JSON ({exc})"
            reason = "; ".join(r for r in (f"script {why}", result.reason) if r)
            return dataclasses.replace(result, outcome=Outcome.CANDIDATE_ERROR, reason=reason)
    return result
