"""What a verl session will launch is validated with verl's own config before any GPU time.

- `evotrainer run --backend verl --dry-run` on the demo prints a validated command for every run of
  iteration 1 (v0, the control, each candidate the seeded skills could propose, the replicates) and trains
  nothing; a harness whose verl settings verl rejects makes it fail naming the key.
- `evotrainer train --backend verl --dry-run --harness examples/arithmetic` succeeds (one harness, both backends).
- At backtest time, a candidate whose pilot config verl rejects (a misspelled key, a GPU layout its parent's
  shards cannot load into), or that changes only files verl does not read, is a `candidate_error` before any
  pilot, and the rejection is the backtest's report.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agent.context import Context
from agent.launch.preflight import candidate_refusal
from harness.failures import Outcome

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "arithmetic"


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )


def _blocks(text: str) -> dict[str, str]:
    """The dry run's per-run sections, by run id."""
    parts = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    return {m.group(1): p for p in parts if (m := re.search(r": (\S+) \(\d+ steps", p.splitlines()[0]))}


@pytest.mark.verl
def test_verl_dry_run_prints_a_validated_command_for_every_run_of_iteration_one(tmp_path: Path) -> None:
    pytest.importorskip("verl")
    done = _cli(tmp_path, "run", "--backend", "verl", "--dry-run", "--replicates", "1", "--pilot-steps", "30")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    blocks = _blocks(done.stdout)
    candidates = [b for b in blocks if b.startswith("dryrun-v1.") and "-control" not in b and not b.endswith("-r1")]
    assert {"dryrun-v0", "dryrun-v1.0-control", "dryrun-v1.0-control-r1"} <= set(blocks)
    assert len(candidates) >= 2 and all(f"{c}-r1" in blocks for c in candidates)  # each may be the one to merge
    for run_id, block in blocks.items():
        assert "— validated" in block.splitlines()[0], block[:2000]
        assert "-m verl.trainer.main_ppo" in block and f"trainer.experiment_name={run_id}" in block
    v0, control = blocks["dryrun-v0"], blocks["dryrun-v1.0-control"]
    assert "trainer.total_training_steps=60" in v0 and "continues" not in v0
    assert "trainer.total_training_steps=90" in control  # 30 pilot steps after v0's step 60
    assert "dryrun-v0/checkpoints/global_step_60" in control and "carried: weights, AdamW moments" in control
    assert "load_contents=[model,optimizer,extra]" in control
    assert "load_contents=[model,optimizer]" in blocks["dryrun-v1.0-control-r1"]  # fresh seed: no RNG, no data position
    # In a verl session the length-budget skill edits harness/verl.yaml (its max_response_length), so its
    # pilot trains differently from the control; the group filter verl cannot run is still refused at backtest
    (budget,) = [blocks[c] for c in candidates if c.endswith("raise-length-budget")]
    assert "data.max_response_length=512" in budget and "data.max_response_length=256" in control
    assert re.search(r"std-group-filter: refused at its backtest, it changes only harness/filters\.py", done.stdout)
    assert "not plannable before v0's health report" in done.stdout  # the data-mix skill needs v0's evidence
    assert re.search(rf"# {len(blocks)} of {len(blocks)} run\(s\) validated; nothing was trained", done.stdout)
    assert not (tmp_path / ".evotrainer" / "sessions").exists() and not (tmp_path / "evotrainer-demo").exists()


@pytest.mark.verl
def test_a_verl_dry_run_of_a_broken_harness_fails_naming_the_key(tmp_path: Path) -> None:
    pytest.importorskip("verl")
    harness = tmp_path / "h"
    shutil.copytree(DEMO, harness)
    cfg = harness / "harness" / "verl.yaml"
    raw = yaml.safe_load(cfg.read_text()) | {"overrides": ["actor_rollout_ref.rollout.temprature=0.7"]}
    cfg.write_text(yaml.safe_dump(raw))
    done = _cli(tmp_path, "run", "--backend", "verl", "--dry-run", "--harness", str(harness), "--replicates", "0")
    assert done.returncode == 2, done.stdout[-3000:]
    # refused when the settings load, before any plan (overrides are an allow-list), in one line
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {cfg}: field 'overrides': "), line
    assert "did you mean actor_rollout_ref.rollout.temperature" in line
    assert "actor_rollout_ref.rollout.temprature: not a verl 0.9.1 config key" in line


@pytest.mark.verl
def test_train_verl_dry_run_on_the_demo_succeeds(tmp_path: Path) -> None:
    pytest.importorskip("verl")
    done = _cli(tmp_path, "train", "--backend", "verl", "--dry-run", "--harness", str(DEMO))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "(config validated)" in done.stdout and "trainer.logger=[console,file]" in done.stdout


def test_local_dry_run_plans_the_local_trainer_commands(tmp_path: Path) -> None:
    done = _cli(tmp_path, "run", "--dry-run", "--ray-address", "http://127.0.0.1:9", "--replicates", "0")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    blocks = _blocks(done.stdout)
    assert "dryrun-v0" in blocks and "dryrun-v1.0-control" in blocks and len(blocks) >= 4
    control = blocks["dryrun-v1.0-control"]
    assert "-m trainer_backend.local.train" in control and "--lock >>" in control  # a Ray job's entry point
    assert "init_state=exact" in control and "dryrun-v0/checkpoints/last.pt" in control
    assert "exact continuation" in control
    assert "does not answer" in done.stdout  # no cluster at that address: said, not hidden


def _fake_parent(run_dir: Path, step: int) -> Path:
    folder = run_dir / "checkpoints" / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    (folder / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"shard")
    return folder


@pytest.mark.verl
@pytest.mark.parametrize(
    ("settings", "change", "problem"),
    [
        (
            "verl.yaml",
            {"overrides": ["actor_rollout_ref.rollout.temprature=0.7"]},
            "temprature: not a verl 0.9.1 config",
        ),
        ("verl.yaml", {"n_gpus_per_node": 2}, "saved by 1 GPU worker(s) but this run asks for 2"),
        ("trainer.yaml", {"max_new_tokens": 48}, "changes only harness/trainer.yaml, which verl does not read"),
    ],
)
def test_a_candidate_verl_cannot_train_is_a_candidate_error_at_backtest(
    tmp_path: Path, settings: str, change: dict[str, object], problem: str
) -> None:
    pytest.importorskip("verl")
    worktree = tmp_path / "cand"
    shutil.copytree(DEMO, worktree)
    cfg = worktree / "harness" / settings
    cfg.write_text(yaml.safe_dump(yaml.safe_load(cfg.read_text()) | change))
    parent = _fake_parent(tmp_path / "v0", 60)
    payload = {
        "session_id": "s1",
        "harness_dir": str(DEMO),
        "iteration": 1,
        "version": {"checkpoint": str(parent), "steps": 60},
        "rollback": {},
        "candidate": {"id": "s1-v1.1-x", "worktree": str(worktree)},
    }
    ctx = Context(workdir=str(tmp_path), backend="verl", sandbox="process")
    out = tmp_path / "backtests" / "s1-v1.1-x"
    result = candidate_refusal(ctx, payload, out)
    assert result is not None and result.outcome is Outcome.CANDIDATE_ERROR and result.verdict.value == "fail"
    assert problem in result.message
    assert (out / "report.json").is_file()  # the backtest's result: a re-run node reads it
    assert candidate_refusal(ctx, payload, out) is None  # ... and does not check again
    assert not ctx.session_dir("s1").exists()  # no pilot folder: nothing was launched or seeded
