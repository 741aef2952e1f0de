"""A whole session on the program-synthesis example, unchanged core, exits 0 through the Docker sandbox.

`evotrainer run --harness examples/synth-fn` from an empty folder (the real CLI in a subprocess, real
training, the Docker sandbox, git and SQLite): the session gets a repository of its own harness, v0's
report sees the example's planted defects (program timeouts and truncation), the candidate is backtested and
piloted, and `status` reads the session as finished, with the candidate in its ledger.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sandboxes.image import ensure_image

pytestmark = [pytest.mark.slow, pytest.mark.docker]

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    env.pop("EVOTRAINER_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=1500
    )


def test_short_session_on_the_program_synthesis_example(docker_client: Any, tmp_path: Path) -> None:
    ensure_image(docker_client)
    harness = ROOT / "examples" / "synth-fn"
    proc = cli(
        "run", "--harness", str(harness), "--escalate-after", "0", "--base-steps", "8", "--pilot-steps", "8",
        "--iterations", "1", "--candidates", "1", "--quiet", cwd=tmp_path,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert (tmp_path / "evotrainer-synth-fn" / "evotrainer.yaml").is_file()  # its own harness, not the demo's
    assert "signal.component.timeouts" in out and "behaviour.truncation" in out, out
    session = re.search(r"session (s[0-9a-f-]+)", out)
    assert session is not None, out
    runs = tmp_path / ".evotrainer" / "sessions" / session.group(1) / "runs"
    assert any(p.name.endswith("-v0") for p in runs.iterdir())
    assert any("control" in p.name for p in runs.iterdir())
    status = cli("status", session.group(1), cwd=tmp_path)
    assert status.returncode == 0, status.stdout + status.stderr
    # the one slot went to the probe the reward's own code names (its gate) where v0's evidence names it, else to
    # the matching skill (raise-length-budget): either way one candidate is in the ledger
    assert "finished" in status.stdout and "v1.1-" in status.stdout, status.stdout
    # v0's reward misranks right and wrong programs (critical) and no declared knob pays fewer wrong ones: status
    # says what answered each critical alert, or why nothing did
    assert "critical alerts and what answers them" in status.stdout, status.stdout
    assert "score.misranked_groups" in status.stdout and "nothing: no knob this harness" in status.stdout
