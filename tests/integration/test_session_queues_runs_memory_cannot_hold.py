"""A session on a machine with less memory than its parallel runs need queues them instead of dying.

A whole small session (tiny demo harness copy, process sandbox, one candidate: its pilot and the control
would run side by side) runs with ``EVOTRAINER_MEMORY_GB`` set below what two trainers take. The session must
finish, every run ok, every run's summary.json must hold its measured peak memory, no run may start before
the one before it finished, and the session says once that runs wait.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from llm_session import copy_demo

from agent.adapters.memory import MEMORY_ENV
from agent.adapters.runs import HANDLE_FILE
from diagnostics.schema import PEAK_RSS_GB, SUMMARY_FILE

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_runs_that_do_not_fit_in_memory_run_one_after_another(tmp_path: Path, git_available: None) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVOTRAINER_CACHE": str(tmp_path / "cache"), MEMORY_ENV: "0.5"}
    env.pop("EVOTRAINER_DB", None)
    harness = copy_demo(tmp_path / "mine")
    args = ["--sandbox", "process", "--base-steps", "2", "--pilot-steps", "2", "--iterations", "1",
            "--candidates", "1", "--replicates", "0", "--escalate-after", "0", "--quiet"]  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-m", "agent.cli", "run", "--harness", str(harness), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,  # a hang guard only
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    said = [line for line in (out.stdout + out.stderr).splitlines() if "memory:" in line and MEMORY_ENV in line]
    assert len(said) == 1, out.stderr[-3000:]

    runs = sorted(p.parent for p in (tmp_path / ".evotrainer" / "sessions").glob(f"*/runs/*/{SUMMARY_FILE}"))
    assert len(runs) >= 3, runs  # the base run, the control and the candidate's pilot
    spans = []
    for run in runs:
        summary = json.loads((run / SUMMARY_FILE).read_text())
        assert summary["outcome"] == "ok", summary
        assert 0.05 < summary[PEAK_RSS_GB] < 64, summary  # a torch process's peak, in GB
        spans.append(((run / HANDLE_FILE).stat().st_mtime, (run / SUMMARY_FILE).stat().st_mtime, run.name))
    spans.sort()
    for (_, ended, before), (started, _, after) in itertools.pairwise(spans):
        assert ended <= started, f"{after} started before {before} finished"
