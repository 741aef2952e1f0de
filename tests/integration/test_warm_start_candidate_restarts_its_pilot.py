"""A warm-start candidate's pilot restarts from the model as it ships; the control continues.

A pilot normally continues the incumbent's checkpoint, which skips the warm start: a candidate that only
changes a warm-start setting would train exactly like the control. Here a whole `evotrainer run` on the
built-in tiny model from random weights with no warm start (so its first responses never write
`<ans>N</ans>`), proposes the `teach_format` move (`warmstart_steps` 0 -> 200), and its pilot is a root run:
no parent checkpoint, its own warm start of 200 steps, its own step-0 policy. The control continues v0 as always, and
the session decides between the two on the held-out prompts (real torch, git, SQLite; process sandbox).
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

from diagnostics.schema import CONFIG_FILE, HEALTH_REPORT_FILE, SUMMARY_FILE

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SESSION = ("--sandbox", "process", "--iterations", "1", "--base-steps", "2", "--pilot-steps", "2",
           "--candidates", "1", "--replicates", "0", "--escalate-after", "0")  # fmt: skip


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVOTRAINER_CACHE": str(cwd / "cache"), "COLUMNS": "200"}
    env.pop("EVOTRAINER_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


def _barely_warm(tmp_path: Path) -> Path:
    harness = tmp_path / "arithmetic"
    shutil.copytree(ROOT / "examples" / "arithmetic-oracle", harness)
    manifest = yaml.safe_load((harness / "evotrainer.yaml").read_text())
    manifest.pop("special_tokens")  # the tags as characters: random weights write "<ans>" by chance no more
    manifest["alphabet"] += "</as"
    (harness / "evotrainer.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    val = (harness / "data" / "val.jsonl").read_text().splitlines()
    (harness / "data" / "val.jsonl").write_text("\n".join(val[::25]) + "\n")
    settings = harness / "harness" / "trainer.yaml"
    trainer = yaml.safe_load(settings.read_text())
    # no warm start, and no evidence-driven extension of one (warmstart_min_format 0: any rate is enough)
    trainer.update(warmstart_steps=0, warmstart_min_format=0.0, warmstart_batch_size=8, group_size=4,
                   prompts_per_step=8, val_every=2, save_every=2)  # fmt: skip
    settings.write_text(yaml.safe_dump(trainer))
    return harness


def _run(folder: Path) -> tuple[dict[str, object], dict[str, object]]:
    return json.loads((folder / CONFIG_FILE).read_text())["spec"], json.loads((folder / SUMMARY_FILE).read_text())


def test_the_warm_start_candidate_pilots_from_scratch_and_the_control_continues_v0(
    tmp_path: Path, git_available: None
) -> None:
    harness, repo = _barely_warm(tmp_path), tmp_path / "repo"
    run = _cli("run", "--harness", str(harness), "--repo", str(repo), *SESSION, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    runs = {p.name.split("-", 2)[-1]: p for p in (tmp_path / ".evotrainer").glob("sessions/*/runs/*")}
    v0 = runs.pop("v0")
    report = json.loads((v0 / HEALTH_REPORT_FILE).read_text())
    assert report["metrics"]["answer_written_rate_first_steps"] < 0.01, report["metrics"]
    [control] = [p for name, p in runs.items() if name.endswith("control")]
    [warm] = [p for name, p in runs.items() if "warmstart-steps-up-from-zero" in name]
    spec, summary = _run(warm)
    assert spec["init_checkpoint"] is None and summary["warmstart_steps"] == 200.0  # a root run, warm-started
    assert (warm / "checkpoints").is_dir() and any((warm / "checkpoints").iterdir())
    control_spec, control_summary = _run(control)
    assert control_spec["init_checkpoint"] and Path(str(control_spec["init_checkpoint"])).is_relative_to(v0)
    assert control_spec["init_state"] == "exact" and "warmstart_steps" not in control_summary
    for folder in (v0, control, warm):  # the share of training responses cut at the token cap
        lines = [json.loads(line)["data"] for line in (folder / "metrics.jsonl").open()]
        rates = [m["rollout/truncation_rate"] for m in lines if "rollout/truncation_rate" in m]  # not step 0
        assert _run(folder)[1]["cap_hit_share"] == pytest.approx(sum(rates) / len(rates))
    status = _cli("status", cwd=tmp_path)
    assert status.returncode == 0 and "finished" in status.stdout, status.stdout + status.stderr
