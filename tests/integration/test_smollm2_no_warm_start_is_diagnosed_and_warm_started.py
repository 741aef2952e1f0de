"""The real SmolLM2-135M-Instruct trained as it ships is diagnosed, and the offline
controller proposes the warm start, from the evidence alone.

The public `no-warm-start` scenario (`benchmarks/scenarios/make_model_scenarios.py`: the SmolLM2 example with
`warmstart_steps: 0`): the instruct model never writes `<ans>N</ans>`, so every reward group is flat. A whole
`evotrainer run` on a smoke budget (a few prompts, short outputs) trains v0, whose health report names
`behaviour.format_never_written` (CRITICAL), and the heuristic policy's first candidate is the `teach_format`
move: `warmstart_steps` 0 -> 200 on its own branch, a single-factor change whose pilot would restart from the
model as it ships. It comes ahead of the skills the same evidence matches (a longer budget for the responses
cut at the cap, a denser reward for the dead groups), since neither can show an effect while no response is
well-formed (`BLOCKING`). The session stops at its launch gate: the warm start itself (200 steps of 64
examples) is GPU work (docs/models.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from scenario_cache import scenario_dir

from diagnostics.schema import HEALTH_REPORT_FILE

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVOTRAINER_CACHE": str(cwd / "cache"), "COLUMNS": "200"}
    env.pop("EVOTRAINER_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


def _no_warm_start(tmp_path: Path) -> Path:
    """The public `no-warm-start` scenario's defective form, shrunk to a CPU smoke budget."""
    harness = tmp_path / "no-warm-start"
    shutil.copytree(scenario_dir("no-warm-start", "defective"), harness)
    val = (harness / "data" / "val.jsonl").read_text().splitlines()
    (harness / "data" / "val.jsonl").write_text("\n".join(val[::50]) + "\n")  # 6 rows: the held-out set is whole
    settings = harness / "harness" / "trainer.yaml"
    trainer = yaml.safe_load(settings.read_text())
    assert trainer["warmstart_steps"] == 0  # the defect
    trainer.update(group_size=4, prompts_per_step=4, max_new_tokens=32, val_every=2, save_every=2)
    settings.write_text(yaml.safe_dump(trainer))
    return harness


def test_the_shipped_model_is_diagnosed_and_the_first_candidate_is_a_warm_start(
    smollm2_folder: Path, tmp_path: Path, git_available: None
) -> None:
    harness, repo = _no_warm_start(tmp_path), tmp_path / "repo"
    budget = ("--iterations", "1", "--base-steps", "2", "--pilot-steps", "2", "--candidates", "1")
    run = _cli(
        "run", "--harness", str(harness), "--repo", str(repo), "--sandbox", "process", *budget,
        "--replicates", "0", "--escalate-after", "0", "--gate", "launch", cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    [report_file] = (tmp_path / ".evotrainer").glob(f"sessions/*/runs/*-v0*/{HEALTH_REPORT_FILE}")
    report = json.loads(report_file.read_text())
    alerts = {f["alert_id"]: f for f in report["findings"] if f["severity"] != "ok"}
    assert alerts["behaviour.format_never_written"]["severity"] == "critical"
    assert report["metrics"]["answer_written_rate_first_steps"] == 0.0
    branches = subprocess.run(
        ["git", "-C", str(repo), "branch", "--list", "evo/*/v1.*", "--format=%(refname:short)"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    [warm] = branches  # the one slot: ahead of the skills that match (a longer budget, a denser reward)
    assert "warmstart-steps-up-from-zero" in warm, branches
    shown = subprocess.run(
        ["git", "-C", str(repo), "diff", "--stat", f"{warm}~1", warm], capture_output=True, text=True, check=True
    ).stdout
    assert "harness/trainer.yaml" in shown and "1 file changed" in shown, shown
    moved = subprocess.run(
        ["git", "-C", str(repo), "show", f"{warm}:harness/trainer.yaml"], capture_output=True, text=True
    )
    assert yaml.safe_load(moved.stdout)["warmstart_steps"] == 200
    message = subprocess.run(
        ["git", "-C", str(repo), "log", "-1", "--format=%B", warm], capture_output=True, text=True
    ).stdout
    assert "never writes the answer format" in message and "restarts from the model as it ships" in message
    for checkpoint in (tmp_path / ".evotrainer").rglob("*.pt"):  # 1.2 GB and more each: kept only on a failure
        checkpoint.unlink()
