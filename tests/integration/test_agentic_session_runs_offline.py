"""`evotrainer run --harness examples/lookup-agent` runs a whole session offline.

The real CLI in a subprocess (real torch training of agentic episodes, the process sandbox running the
candidate's environment, git, SQLite), on a copy of the defective agentic example shrunk to a tiny model so it
fits a loaded 2-core box. The session must finish (exit 0, status finished), every candidate in the store
must be a git branch of the session's repository, and the trained versions' rollouts must be trajectories.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TINY = {"n_layers": 1, "hidden": 32, "warmstart_steps": 150, "group_size": 4, "prompts_per_step": 4}


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVOTRAINER_CACHE": str(cwd / "cache"), "COLUMNS": "200"}
    env.pop("EVOTRAINER_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=1500
    )


def test_a_session_on_the_agentic_example_finishes_with_every_candidate_a_branch(
    tmp_path: Path, git_available: None
) -> None:
    harness = tmp_path / "lookup-agent"
    shutil.copytree(ROOT / "examples" / "lookup-agent", harness)
    trainer_path = harness / "harness" / "trainer.yaml"
    trainer = yaml.safe_load(trainer_path.read_text())
    assert trainer["max_turns"] == 3  # the example's defects stay: only the model and the batches shrink
    trainer_path.write_text(yaml.safe_dump({**trainer, **TINY}))
    val = (harness / "data" / "val.jsonl").read_text().splitlines()
    (harness / "data" / "val.jsonl").write_text("\n".join(val[::10]) + "\n")

    repo = tmp_path / "repo"
    session = cli(
        "run", "--harness", str(harness), "--repo", str(repo), "--sandbox", "process", "--iterations", "1",
        "--base-steps", "4", "--pilot-steps", "4", "--candidates", "1", "--replicates", "0",
        "--escalate-after", "0", "--max-steps", "40", cwd=tmp_path,
    )  # fmt: skip
    assert session.returncode == 0, session.stdout[-3000:] + session.stderr[-3000:]
    status = cli("status", cwd=tmp_path)
    assert status.returncode == 0 and "finished" in status.stdout, status.stdout + status.stderr

    db = sqlite3.connect(tmp_path / ".evotrainer" / "evotrainer.db")
    candidates = [row[0] for row in db.execute("select branch from candidates")]
    run_dirs = [Path(row[0]) for row in db.execute("select artefact_dir from runs where status = 'finished'")]
    db.close()
    branches = subprocess.run(
        ["git", "-C", str(repo), "branch", "--list", "evo/*", "--format=%(refname:short)"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert candidates, "the controller proposed no candidate"
    assert set(candidates) <= set(branches), (candidates, branches)

    assert run_dirs
    for run_dir in run_dirs:
        val_rows = [json.loads(x) for x in (run_dir / "rollouts" / "val" / "step_0.jsonl").read_text().splitlines()]
        assert val_rows and all(r["turns"] and r["num_turns"] == len(r["turns"]) for r in val_rows)
        assert all(r["num_turns"] <= 3 for r in val_rows)  # the harness's max_turns reached the episodes
