"""Run `langgraph dev` from the repository root on a free port for a test (offline, no reload, no browser)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LANGGRAPH = Path(sys.executable).parent / "langgraph"
START_TIMEOUT_S = 90


def free_port() -> int:
    """A TCP port nobody listens on right now (the CLI would silently move to another one if taken)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def dev_server(
    tmp_path: Path, reload: bool = False, config: str = "langgraph.json", n_jobs: int | None = None, **env: str
) -> Iterator[str]:
    """Serve `config` (default `langgraph.json`) with the durable dev checkpointer in `tmp_path`; yield the base URL.

    `reload`: serve as docs/studio.md's command does, watching the repository for changed Python files.
    `n_jobs`: runs the server executes at once (`--n-jobs-per-worker`; the CLI's default is 1).
    """
    if not LANGGRAPH.exists():
        pytest.skip("langgraph-cli[inmem] is not installed (the dev extra)")
    port = free_port()
    full_env = {**os.environ, "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGSMITH_TRACING": "false",
                "EVOTRAINER_STUDIO_DB": str(tmp_path / "studio.db"), "PYTHONPATH": str(ROOT), **env}  # fmt: skip
    log_path = tmp_path / "dev.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [str(LANGGRAPH), "dev", "--no-browser", *([] if reload else ["--no-reload"]), "--port", str(port),
             "--config", config, *([] if n_jobs is None else ["--n-jobs-per-worker", str(n_jobs)])],
            cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.time() + START_TIMEOUT_S
            while True:
                try:
                    urllib.request.urlopen(url + "/ok", timeout=2).read()
                    break
                except OSError:
                    if proc.poll() is not None or time.time() > deadline:
                        pytest.fail(f"langgraph dev did not start: {log_path.read_text()[-3000:]}")
                    time.sleep(0.5)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=20)
