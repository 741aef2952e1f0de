"""A private Ray head on 127.0.0.1 for tests, started and stopped without touching any other Ray cluster.

Several EvoTrainer sessions may run their own heads on one machine, so this head gets its own free ports
(every listening port Ray opens by default, worker ports OS-assigned) and its own short temp dir, runs as
`ray start --head --block` in its own process group, and is stopped by that group, never by `ray stop`
(which stops every Ray process of the user). Jobs still running on it are stopped through its Jobs API
first; a process left behind is found by this head's unique temp dir in its command line and killed by pid.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

GRACE_S = 15  # SIGINT to SIGKILL of the head's process group
PORT_OPTIONS = (
    "port",
    "dashboard-port",
    "ray-client-server-port",
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "runtime-env-agent-port",
    "metrics-export-port",
    "object-manager-port",
    "node-manager-port",
)


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):  # held open together: n distinct ports
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


@contextlib.contextmanager
def ray_head(num_cpus: int) -> Iterator[str]:
    """Start a head with `num_cpus` logical CPUs; yield its Jobs API URL; stop it and everything it started."""
    from trainer_backend.ray_jobs import TERMINAL, client

    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent))
    if ray_bin is None:  # `make test` installs the verl extra, which brings Ray: there this is a failure
        reason = "ray CLI not installed beside this interpreter (the verl extra)"
        pytest.fail(reason) if os.environ.get("EVOTRAINER_REQUIRE_SERVICES") == "1" else pytest.skip(reason)
    temp_dir = Path(tempfile.mkdtemp(prefix="evo-ray-", dir="/tmp"))  # short: Ray's socket paths are length-capped
    ports = dict(zip(PORT_OPTIONS, _free_ports(len(PORT_OPTIONS)), strict=True))
    args = [f"--{name}={port}" for name, port in ports.items()]
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    log_path = temp_dir.parent / f"{temp_dir.name}.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed in finally
    head = subprocess.Popen(
        [
            str(ray_bin),
            "start",
            "--head",
            "--block",
            f"--num-cpus={num_cpus}",
            "--disable-usage-stats",
            "--node-ip-address=127.0.0.1",
            "--dashboard-host=127.0.0.1",
            "--include-dashboard=true",
            f"--temp-dir={temp_dir}",
            "--min-worker-port=0",
            "--max-worker-port=0",
            *args,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    address = f"http://127.0.0.1:{ports['dashboard-port']}"
    try:
        deadline = time.time() + 120
        while True:  # the Jobs API comes up a little after the head
            try:
                client(address).list_jobs()
                break
            except Exception:
                if head.poll() is not None or time.time() > deadline:
                    tail = log_path.read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"Ray head did not come up: {tail}") from None
                time.sleep(1)
        yield address
    finally:
        with contextlib.suppress(Exception):
            jobs = client(address)
            for job in jobs.list_jobs():
                if str(job.status.value) not in TERMINAL:
                    jobs.stop_job(job.submission_id)
            deadline = time.time() + 60
            while time.time() < deadline and any(str(j.status.value) not in TERMINAL for j in jobs.list_jobs()):
                time.sleep(1)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGINT)  # `ray start --block` shuts its head down on Ctrl-C
        try:
            head.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(head.pid, signal.SIGKILL)
            head.wait(timeout=30)
        _kill_leftovers(str(temp_dir))
        log.close()
        log_path.unlink(missing_ok=True)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _kill_leftovers(marker: str) -> None:
    """SIGKILL, by pid, processes whose command line names this head's temp dir (they belong to this head)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
