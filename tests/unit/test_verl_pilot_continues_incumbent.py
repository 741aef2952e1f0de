"""A verl pilot continues the incumbent's checkpoint through verl's resume, and says what it carries.

No verl import: the plan is pure (trainer_backend/verl/config.py) and the checkpoint copy is file I/O.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from harness.manifest import load_harness
from trainer_backend.base import RunSpec
from trainer_backend.verl import final_checkpoint, parent_of, seed_continuation
from trainer_backend.verl.config import Parent, VerlConfigError, build_plan, load_verl_config
from trainer_backend.verl.run import _run_summary

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "verl_harness"


def _checkpoint(run_dir: Path, step: int, world: int = 1) -> Path:
    """A verl checkpoint folder as verl 0.9.1 lays it out (FSDP shards per rank, data.pt, the marker)."""
    folder = run_dir / "checkpoints" / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    for rank in range(world):
        for kind in ("model", "optim", "extra_state"):
            (folder / "actor" / f"{kind}_world_size_{world}_rank_{rank}.pt").write_bytes(b"shard")
    (folder / "data.pt").write_bytes(b"dataloader")
    (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").write_text(str(step))
    return folder


def _plan(harness_dir: Path, out: Path, parent: Parent, train_data: str = "d", **spec_kw):
    harness = load_harness(harness_dir)
    spec = RunSpec(run_id="p", harness_dir=harness_dir, out_dir=out, steps=8, **spec_kw)
    cfg = load_verl_config(harness)
    return build_plan(harness, spec, cfg, 1, out / "t.parquet", out / "v.parquet", parent, train_data)


def _ov(plan) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return dict(o.split("=", 1) for o in plan.overrides)


def test_exact_continuation_resumes_everything_verl_saves_and_counts_steps_after_the_parent(tmp_path: Path) -> None:
    source = _checkpoint(tmp_path / "v0", 60)
    plan = _plan(FIXTURE, tmp_path / "pilot", Parent(lr=1e-6, train_data="d", world_size=1), init_checkpoint=source,
                 init_state="exact")  # fmt: skip
    ov = _ov(plan)
    assert ov["trainer.total_training_steps"] == "68"  # 8 pilot steps after the parent's step 60
    assert ov["trainer.resume_mode"] == "auto"
    assert ov["actor_rollout_ref.actor.checkpoint.load_contents"] == "[model,optimizer,extra]"
    assert ov["actor_rollout_ref.model.path"] == "Qwen/Qwen2.5-0.5B-Instruct"  # the shards hold the weights
    cont = plan.continuation
    assert cont is not None and cont.step == 60 and cont.dataloader and plan.start_step == 60
    assert "AdamW moments" in cont.carried_text() and "random states" in cont.carried_text()
    assert "not carried: the rollout engine's sampling state" in cont.carried_text()
    assert any(w.startswith("continues ") and str(source) in w for w in plan.warnings)


def test_a_learning_rate_change_does_not_restore_the_parents_scheduler(tmp_path: Path) -> None:
    source = _checkpoint(tmp_path / "v0", 20)
    plan = _plan(FIXTURE, tmp_path / "pilot", Parent(lr=4e-6, train_data="d"), init_checkpoint=source,
                 init_state="exact")  # fmt: skip
    assert _ov(plan)["actor_rollout_ref.actor.checkpoint.load_contents"] == "[model,optimizer]"
    assert plan.continuation is not None
    text = plan.continuation.carried_text()
    assert "the learning rate changes 4e-06 -> 1e-06" in text and "lr-scheduler position" in text.split("not")[1]


def test_changed_training_data_or_a_fresh_seed_restarts_the_data_order(tmp_path: Path) -> None:
    source = _checkpoint(tmp_path / "v0", 20)
    changed = _plan(FIXTURE, tmp_path / "a", Parent(lr=1e-6, train_data="old"), "new", init_checkpoint=source,
                    init_state="exact")  # fmt: skip
    assert changed.continuation is not None and not changed.continuation.dataloader
    assert "the training data changed" in changed.continuation.carried_text()
    replicate = _plan(FIXTURE, tmp_path / "b", Parent(lr=1e-6, train_data="d"), init_checkpoint=source,
                      init_state="optimizer", seed=7)  # fmt: skip
    assert replicate.continuation is not None and replicate.continuation.load_contents == ("model", "optimizer")
    assert "fresh seed: data.seed=7" in replicate.continuation.carried_text()
    weights = _plan(FIXTURE, tmp_path / "c", Parent(), init_checkpoint=source, init_state="weights")
    assert weights.continuation is not None and weights.continuation.load_contents == ("model",)
    assert "AdamW moments" in weights.continuation.carried_text().split("not carried")[1]


def test_a_different_gpu_layout_cannot_continue_fsdp_shards(tmp_path: Path) -> None:
    source = _checkpoint(tmp_path / "v0", 20, world=2)
    with pytest.raises(VerlConfigError, match=r"saved by 2 GPU worker\(s\) but this run asks for 1"):
        _plan(FIXTURE, tmp_path / "pilot", parent_of(source), init_checkpoint=source)


def test_the_seeded_copy_is_hard_linked_marked_and_not_mistaken_for_the_runs_own_checkpoint(tmp_path: Path) -> None:
    source = _checkpoint(tmp_path / "v0", 20)
    out = tmp_path / "pilot"
    plan = _plan(FIXTURE, out, Parent(lr=1e-6, train_data="old"), "new", init_checkpoint=source)
    assert plan.continuation is not None
    seed_continuation(plan.continuation, out)
    copy = out / "checkpoints" / "global_step_20"
    shard = copy / "actor" / "model_world_size_1_rank_0.pt"
    assert shard.stat().st_ino == (source / "actor" / shard.name).stat().st_ino  # a link, not a second copy
    assert not (copy / "data.pt").exists()  # the data changed: verl starts the data order afresh
    assert (out / "checkpoints" / "latest_checkpointed_iteration.txt").read_text() == "20"
    seed_continuation(plan.continuation, out)  # a second attempt keeps what is there
    assert final_checkpoint(out) == copy
    # attempt 1 of the pilot finds its seeded copy: not "a checkpoint without resume"
    again = _plan(FIXTURE, out, Parent(lr=1e-6, train_data="new"), "new", init_checkpoint=source)
    assert again.continuation is not None
    (out / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("24")  # the pilot saved its own
    with pytest.raises(VerlConfigError, match="step 24 but resume=False"):
        _plan(FIXTURE, out, Parent(), init_checkpoint=source)
    assert _ov(_plan(FIXTURE, out, Parent(), init_checkpoint=source, resume=True))["trainer.resume_mode"] == "auto"


def test_parent_facts_are_read_from_the_parent_run_folder(tmp_path: Path) -> None:
    source = _checkpoint(tmp_path / "v0", 20, world=4)
    config = {"overrides": ["actor_rollout_ref.actor.optim.lr=3e-06", "data.seed=0"], "train_data": "abc"}
    (tmp_path / "v0" / "config.json").write_text(json.dumps(config))
    assert parent_of(source) == Parent(lr=3e-6, train_data="abc", world_size=4)
    assert parent_of(_checkpoint(tmp_path / "bare", 5)) == Parent(world_size=1)


def test_an_init_checkpoint_of_neither_kind_is_refused_naming_both(tmp_path: Path) -> None:
    (tmp_path / "weird").mkdir()
    with pytest.raises(VerlConfigError, match="neither a verl checkpoint folder"):
        _plan(FIXTURE, tmp_path / "p", Parent(), init_checkpoint=tmp_path / "weird")
    hf = tmp_path / "merged"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    plan = _plan(FIXTURE, tmp_path / "q", Parent(), init_checkpoint=hf, init_state="exact")
    assert plan.continuation is None and _ov(plan)["actor_rollout_ref.model.path"] == str(hf.resolve())
    assert any("holds weights only" in w for w in plan.warnings)


def test_run_summary_reports_the_numbers_every_backend_reports() -> None:
    rows = [
        {"step": 20, "data": {"val/strict_acc": 0.4}},
        {"step": 21, "data": {"critic/score/mean": 0.1}},
        {"step": 22, "data": {"critic/score/mean": 0.3, "val/strict_acc": 0.5}},
    ]
    assert _run_summary(rows, start_step=20) == {
        "strict_acc_before": 0.4,
        "strict_acc_after": 0.5,
        "train_reward_first": 0.1,
        "train_reward_last": 0.3,
    }


def test_a_harness_without_verl_settings_is_refused_naming_the_fix(tmp_path: Path) -> None:
    harness = tmp_path / "h"
    shutil.copytree(FIXTURE, harness)
    manifest = yaml.safe_load((harness / "evotrainer.yaml").read_text())
    manifest["trainer"] = {"backend": "local", "local": "harness/verl.yaml"}
    (harness / "evotrainer.yaml").write_text(yaml.safe_dump(manifest))
    with pytest.raises(VerlConfigError, match=r"trainer names no verl settings.*verl: harness/verl\.yaml"):
        load_verl_config(load_harness(harness))
