"""What an analysis script writes to its results folder is bounded; over the cap is `candidate_error`.

Before the fix `/results` was a host folder bind-mounted read-write: a script wrote 1.5 GB to the host's
disk in 8 s and the run came back `ok`. In Docker it is now a capped tmpfs read back through `tar`; the
process fallback polls its (host) results folder and kills the script once it passes the cap.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.failures import Outcome
from sandboxes.docker import RESULTS_MAX_BYTES
from sandboxes.worker import run_script

FLOOD = """
import os
out = os.environ["EVOTRAINER_RESULTS_DIR"]
chunk = b"x" * (1 << 20)
try:
    with open(os.path.join(out, "flood.bin"), "wb") as fh:
        for _ in range(400):
            fh.write(chunk)
except OSError:
    pass  # swallow ENOSPC: the cap must still be seen
with open(os.path.join(out, "out.json"), "w") as fh:
    fh.write("{}")
"""
MANY_FILES = """
import os
out = os.environ["EVOTRAINER_RESULTS_DIR"]
for i in range(100):
    try:
        with open(os.path.join(out, f"part{i}.bin"), "wb") as fh:
            fh.write(b"y" * (512 * 1024))
    except OSError:
        break
with open(os.path.join(out, "out.json"), "w") as fh:
    fh.write("{}")
"""
WITHIN = """
import json, os
out = os.environ["EVOTRAINER_RESULTS_DIR"]
os.mkdir(os.path.join(out, "sub"))
os.symlink("/etc/passwd", os.path.join(out, "leak"))
with open(os.path.join(out, "out.json"), "w") as fh:
    json.dump({"n": 3, "blob": "z" * 1000}, fh)
"""


def _script(tmp_path: Path, code: str) -> Path:
    path = tmp_path / "analysis.py"
    path.write_text(code)
    return path


def _run(tmp_path: Path, code: str, mode: str, client: Any = None) -> Any:
    return run_script(_script(tmp_path, code), {}, timeout_s=60, mode=mode, client=client)  # type: ignore[arg-type]


@pytest.fixture
def docker_mode(docker_client: Any) -> Any:
    from sandboxes.image import ensure_image

    ensure_image(docker_client)
    return docker_client


@pytest.mark.docker
@pytest.mark.parametrize("code", [FLOOD, MANY_FILES], ids=["one-big-file", "many-files"])
def test_docker_results_over_the_cap_are_a_candidate_error(tmp_path: Path, docker_mode: Any, code: str) -> None:
    result = _run(tmp_path, code, "docker", docker_mode)
    assert result.outcome is Outcome.CANDIDATE_ERROR, result
    assert f"over the {RESULTS_MAX_BYTES} bytes cap" in result.reason
    assert result.files == {}


@pytest.mark.docker
def test_docker_results_within_the_cap_come_back_without_links(tmp_path: Path, docker_mode: Any) -> None:
    result = _run(tmp_path, WITHIN, "docker", docker_mode)
    assert result.outcome is Outcome.OK, result
    assert json.loads(result.files["out.json"])["n"] == 3
    assert set(result.files) == {"out.json"} and "leak (not a regular file" in result.reason


@pytest.mark.parametrize("code", [FLOOD, MANY_FILES], ids=["one-big-file", "many-files"])
def test_process_results_over_the_cap_are_a_candidate_error(tmp_path: Path, code: str) -> None:
    result = _run(tmp_path, code, "process")
    assert result.outcome is Outcome.CANDIDATE_ERROR, result
    assert f"over {RESULTS_MAX_BYTES} bytes" in result.reason and "weaker isolation" in result.reason
    assert result.files == {}
