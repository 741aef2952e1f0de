"""One test per isolation property of `sandboxes.docker.run_in_container`, on the real engine."""

from __future__ import annotations

import ipaddress
import json
import time
from pathlib import Path
from typing import Any

import pytest

from harness.failures import Outcome
from sandboxes.docker import LABEL, OWNER_LABEL, SandboxConfig, run_in_container
from sandboxes.image import WORKER_PATH_IN_IMAGE, WORKER_SOURCE, ensure_image, image_tag
from sandboxes.owners import owner_token

pytestmark = pytest.mark.docker


@pytest.fixture(scope="session")
def sandbox_image(docker_client: Any) -> str:
    """Build the sandbox image once per session (instant when it exists)."""
    return ensure_image(docker_client)


def _py(code: str) -> list[str]:
    return ["python3", "-I", "-c", code]


def _leftovers(client: Any) -> list[Any]:
    """This test process's sandbox containers (other EvoTrainer sessions on the machine may have their own)."""
    return client.containers.list(all=True, filters={"label": [LABEL, f"{OWNER_LABEL}={owner_token()}"]})


def test_image_is_reused_and_bakes_the_current_worker(docker_client: Any, sandbox_image: str) -> None:
    t0 = time.monotonic()
    assert ensure_image(docker_client) == sandbox_image == image_tag()
    assert time.monotonic() - t0 < 2.0
    result = run_in_container(docker_client, ["cat", WORKER_PATH_IN_IMAGE])
    assert result.outcome is Outcome.OK
    assert result.stdout_tail.encode() == WORKER_SOURCE.read_bytes()


def test_network_is_unreachable(docker_client: Any, sandbox_image: str) -> None:
    ipam = docker_client.networks.get("bridge").attrs["IPAM"]["Config"][0]
    # The engine omits Gateway when it is the default: the subnet's first host (docker0, the host itself).
    gateway = ipam.get("Gateway") or str(next(ipaddress.ip_network(ipam["Subnet"]).hosts()))
    code = f"""
import errno, json, socket
out = {{}}
for host, port in (("1.1.1.1", 53), ({gateway!r}, 2375), ({gateway!r}, 22)):
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, port))
        out[f"{{host}}:{{port}}"] = "connected"
    except OSError as exc:
        out[f"{{host}}:{{port}}"] = errno.errorcode.get(exc.errno, str(exc))
out["interfaces"] = [l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]]
print(json.dumps(out))
"""
    result = run_in_container(docker_client, _py(code))
    assert result.outcome is Outcome.OK, result
    out = json.loads(result.stdout_tail)
    assert out.pop("interfaces") == ["lo"]
    # ENETUNREACH, not ECONNREFUSED: there is no route at all, not merely a closed port.
    assert out == {k: "ENETUNREACH" for k in out}, out


def test_writes_outside_scratch_fail(docker_client: Any, sandbox_image: str, tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_text("original")
    code = """
import errno, json
out = {}
for path in ("/scratch/ok", "/tmp/x", "/etc/x", "/x", "/results/x", "/data/data.txt", "/data/new"):
    try:
        with open(path, "w") as fh:
            fh.write("pwned")
        out[path] = "written"
    except OSError as exc:
        out[path] = errno.errorcode.get(exc.errno, str(exc))
print(json.dumps(out))
"""
    result = run_in_container(docker_client, _py(code), ro_mounts={tmp_path: "/data"})
    assert result.outcome is Outcome.OK, result
    out = json.loads(result.stdout_tail)
    assert out.pop("/scratch/ok") == "written"
    assert set(out.values()) <= {"EROFS", "EACCES"}, out
    assert (tmp_path / "data.txt").read_text() == "original"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.txt"]


def test_fork_bomb_is_contained_and_classified(docker_client: Any, sandbox_image: str) -> None:
    code = """
import os, sys, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
except OSError as exc:
    print(n)
    print(type(exc).__name__, exc, file=sys.stderr)
    sys.exit(3)
"""
    config = SandboxConfig(pids_limit=32, timeout_s=30)
    result = run_in_container(docker_client, _py(code), config=config)
    assert result.outcome is Outcome.CANDIDATE_ERROR
    assert result.exit_code == 3
    assert int(result.stdout_tail) < 32
    assert "pids_limit=32" in result.reason
    assert _leftovers(docker_client) == []


def test_memory_bomb_is_oom_killed_and_classified(docker_client: Any, sandbox_image: str) -> None:
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 1024 * 1024))"
    result = run_in_container(docker_client, _py(code), config=SandboxConfig(mem_limit_mb=128))
    assert result.outcome is Outcome.CANDIDATE_ERROR
    assert result.oom_killed
    assert "memory limit (128 MiB)" in result.reason


def test_infinite_loop_is_killed_by_the_timeout(docker_client: Any, sandbox_image: str) -> None:
    t0 = time.monotonic()
    result = run_in_container(docker_client, _py("while True:\n    pass"), config=SandboxConfig(timeout_s=2))
    assert result.outcome is Outcome.TIMEOUT
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - t0 < 10
    assert _leftovers(docker_client) == []


def test_host_env_secrets_are_invisible(
    docker_client: Any, sandbox_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVOTRAINER_TEST_SECRET", "hunter2-do-not-leak")
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    result = run_in_container(docker_client, _py(code), env={"EXPLICIT": "yes"})
    assert result.outcome is Outcome.OK
    env = json.loads(result.stdout_tail)
    assert env["EXPLICIT"] == "yes"  # the channel works: explicitly passed variables do arrive
    assert "EVOTRAINER_TEST_SECRET" not in env
    assert "hunter2-do-not-leak" not in result.stdout_tail


def test_engine_errors_are_infra_errors(docker_client: Any, sandbox_image: str) -> None:
    config = SandboxConfig(image="evotrainer-sandbox:does-not-exist")
    result = run_in_container(docker_client, ["true"], config=config)
    assert result.outcome is Outcome.INFRA_ERROR
    assert "evotrainer sandbox build" in result.reason
