"""A session decides on the selection split and reports the sealed one at its end.

Every run scores the sealed rows once, at its last step, into `rollouts/sealed/`; its validations (what the
decisions, the diagnosis and the tools read) hold none of them and its metrics name no sealed figure. The
run's end summary and `status` then show the version to use on both splits, saying which is which.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900, env=env)  # fmt: skip


def _ids(folder: Path) -> set[str]:
    return {json.loads(line)["prompt_id"] for f in folder.glob("step_*.jsonl") for line in f.read_text().splitlines()}


def test_a_session_reads_the_sealed_split_only_at_its_end(tmp_path: Path) -> None:
    harness = ROOT / "examples" / "arithmetic-oracle"
    budget = ["--base-steps", "6", "--pilot-steps", "6", "--iterations", "1", "--candidates", "1", "--quiet"]
    out = _cli("run", "--harness", str(harness), "--repo", "repo", "--sandbox", "process", *budget, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "sealed test split 0." in out.stdout and "(no decision read it)" in out.stdout, out.stdout[-3000:]
    assert "selection split" in out.stdout

    runs = sorted(p for p in (tmp_path / ".evotrainer" / "sessions").glob("*/runs/*") if (p / "summary.json").is_file())
    assert len(runs) >= 2  # v0 and at least the control
    val_n = sealed_n = 0
    for run in runs:
        summary = json.loads((run / "summary.json").read_text())
        sealed, val = _ids(run / "rollouts" / "sealed"), _ids(run / "rollouts" / "val")
        assert sealed and val and sealed.isdisjoint(val), run.name
        assert [p.name for p in (run / "rollouts" / "sealed").iterdir()] == [f"step_{int(summary['steps_done'])}.jsonl"]
        assert "sealed" not in (run / "metrics.jsonl").read_text()
        val_n, sealed_n = int(summary["val_n"]), int(summary["sealed_n"])
    held_out = len((harness / "data" / "val.jsonl").read_text().splitlines())
    assert val_n + sealed_n == held_out and 0.2 < sealed_n / held_out < 0.3

    session = next((tmp_path / ".evotrainer" / "sessions").iterdir()).name
    status = _cli("status", session, cwd=tmp_path)
    assert status.returncode == 0, status.stderr[-2000:]
    assert "sealed test split 0." in status.stdout, status.stdout[-2000:]
