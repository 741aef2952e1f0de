"""Harness → verl override mapping, refusals with key + fix, and outcome classification (no verl needed)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.failures import Outcome
from harness.manifest import load_harness
from trainer_backend.base import RunSpec
from trainer_backend.verl.classify import classify
from trainer_backend.verl.config import (
    VerlConfigError,
    VerlTrainerConfig,
    build_plan,
    legacy_key_problem,
    load_verl_config,
)
from trainer_backend.verl.data import convert_row

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "verl_harness"


@pytest.fixture
def harness_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "harness"
    shutil.copytree(FIXTURE, dst)
    return dst


def _plan(harness_dir: Path, out: Path, **spec_kw):
    harness = load_harness(harness_dir)
    spec = RunSpec(run_id="r1", harness_dir=harness_dir, out_dir=out, steps=7, **spec_kw)
    return build_plan(harness, spec, load_verl_config(harness), 3, out / "train.parquet", out / "val.parquet")


def _as_dict(overrides: list[str]) -> dict[str, str]:
    return dict(o.split("=", 1) for o in overrides)


def test_plan_maps_harness_reward_filter_and_controller_defaults(tmp_path: Path) -> None:
    plan = _plan(FIXTURE, tmp_path / "run")
    ov = _as_dict(plan.overrides)
    out = (tmp_path / "run").resolve()
    assert ov["reward.custom_reward_function.path"] == str(FIXTURE / "harness" / "reward.py")
    assert ov["reward.custom_reward_function.name"] == "compute_score"
    assert not any(k.startswith(("custom_reward_function", "reward_model", "sandbox_fusion")) for k in ov)
    assert ov["algorithm.filter_groups.enable"] == "True" and ov["algorithm.filter_groups.metric"] == "acc"
    assert ov["actor_rollout_ref.rollout.n"] == "4" and ov["data.train_batch_size"] == "4"
    assert ov["trainer.total_training_steps"] == "7" and int(ov["trainer.save_freq"]) > 0
    assert ov["trainer.logger"] == "[console,file]" and ov["trainer.resume_mode"] == "auto"
    assert ov["trainer.rollout_data_dir"] != ov["trainer.validation_data_dir"]
    assert all(Path(ov[k]).is_absolute() for k in ("trainer.default_local_dir", "data.train_files"))
    assert plan.env["VERL_FILE_LOGGER_PATH"] == str(out / "verl_metrics.3.jsonl")
    # the harness's own override comes last so it wins over our default
    assert plan.overrides[-1] == "actor_rollout_ref.rollout.gpu_memory_utilization=0.4"
    assert any("filters.py:filter_groups" in w and "NOT run by verl" in w for w in plan.warnings)


def test_custom_filter_without_verl_mapping_is_reported_as_not_applied(harness_copy: Path, tmp_path: Path) -> None:
    cfg_path = harness_copy / "harness" / "verl.yaml"
    raw = yaml.safe_load(cfg_path.read_text())
    raw.pop("filter_groups_metric")
    cfg_path.write_text(yaml.safe_dump(raw))
    plan = _plan(harness_copy, tmp_path / "run")
    assert "algorithm.filter_groups.enable=True" not in plan.overrides
    assert any("no hook for a custom filter function" in w and "NOT" in w for w in plan.warnings)


def test_score_metric_maps_to_verls_canonical_reward(harness_copy: Path, tmp_path: Path) -> None:
    cfg_path = harness_copy / "harness" / "verl.yaml"
    raw = yaml.safe_load(cfg_path.read_text()) | {"filter_groups_metric": "score", "kl_coef": 0.001}
    cfg_path.write_text(yaml.safe_dump(raw))
    ov = _as_dict(_plan(harness_copy, tmp_path / "run").overrides)
    assert ov["algorithm.filter_groups.metric"] == "reward"
    assert ov["actor_rollout_ref.actor.use_kl_loss"] == "True" and ov["actor_rollout_ref.actor.kl_loss_coef"] == "0.001"


@pytest.mark.parametrize(
    ("override", "replacement"),
    [
        ("custom_reward_function.path=/x.py", "reward.custom_reward_function.path"),
        ("reward_model.reward_manager=dapo", "reward.reward_manager.name"),
        ("+reward_model.reward_kwargs.max_resp_len=9", "reward.custom_reward_function.reward_kwargs.max_resp_len"),
        ("sandbox_fusion.url=http://sb", "reward.sandbox_fusion.url"),
    ],
)
def test_legacy_reward_keys_are_refused_naming_the_replacement(override: str, replacement: str) -> None:
    problem = legacy_key_problem(override)
    assert problem is not None and replacement in problem and "ignored" in problem
    with pytest.raises(ValueError, match=replacement.replace(".", r"\.")):
        VerlTrainerConfig(model_path="m", overrides=[override])


def test_new_reward_keys_are_not_mistaken_for_legacy_ones() -> None:
    assert legacy_key_problem("reward.custom_reward_function.path=/x.py") is None
    assert legacy_key_problem("+reward.reward_model.enable=False") is None


def test_legacy_key_in_harness_config_raises_config_error_with_file(harness_copy: Path) -> None:
    cfg_path = harness_copy / "harness" / "verl.yaml"
    raw = yaml.safe_load(cfg_path.read_text())
    raw["overrides"] = ["custom_reward_function.name=other"]
    cfg_path.write_text(yaml.safe_dump(raw))
    with pytest.raises(VerlConfigError, match=r"verl\.yaml.*custom_reward_function\.name.*reward\.custom_reward"):
        load_verl_config(load_harness(harness_copy))


def test_controller_owned_keys_cannot_be_overridden() -> None:
    with pytest.raises(ValueError, match=r"trainer\.logger is set by EvoTrainer"):
        VerlTrainerConfig(model_path="m", overrides=["trainer.logger=[console,wandb]"])
    with pytest.raises(ValueError, match="ppo_mini_batch_size=64 exceeds train_batch_size=32"):
        VerlTrainerConfig(model_path="m", train_batch_size=32, ppo_mini_batch_size=64)


def test_existing_checkpoint_requires_resume_and_is_detected(tmp_path: Path) -> None:
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("5")
    with pytest.raises(VerlConfigError, match="step 5 but resume=False"):
        _plan(FIXTURE, out)
    plan = _plan(FIXTURE, out, resume=True)
    assert plan.resume_from_step == 5
    assert _as_dict(plan.overrides)["trainer.default_local_dir"] == str((out / "checkpoints").resolve())
    assert any("global_step_5" in w for w in plan.warnings)


def test_sandbox_request_is_reported_as_not_applied(tmp_path: Path) -> None:
    plan = _plan(FIXTURE, tmp_path / "run", sandbox="docker")
    assert any("sandbox=docker: NOT applied" in w for w in plan.warnings)


def test_convert_row_builds_verl_columns() -> None:
    row = {"id": "a-1", "prompt": "1+1?", "ground_truth": 2, "data_source": "arith", "level": 3}
    out = convert_row(row, 7, "train", "fallback", "math")
    assert out["prompt"] == [{"role": "user", "content": "1+1?"}]
    assert out["reward_model"] == {"style": "rule", "ground_truth": "2"}
    assert out["data_source"] == "arith" and out["ability"] == "math"
    assert out["extra_info"] == {"id": "a-1", "level": 3, "index": 7, "split": "train"}
    assert convert_row({"prompt": "q", "ground_truth": "x"}, 0, "val", "h", "d")["data_source"] == "h"
    with pytest.raises(ValueError, match="ground_truth"):
        convert_row({"prompt": "q"}, 0, "train", "h", "d")


GPU_LOG = """Traceback (most recent call last):
  File ".../verl/single_controller/ray/base.py", line 210, in _check_resource_available
ValueError: Total available GPUs 0 is less than total desired GPUs 1
"""


def test_classify_gpu_shortage_is_infra_error_with_log_path() -> None:
    outcome, msg = classify(1, None, GPU_LOG, "/h", 0, None, "/run/train.log")
    assert outcome is Outcome.INFRA_ERROR and "/run/train.log" in msg and "GPUs" in msg
    outcome, msg = classify(None, "FAILED", GPU_LOG, "/h", 0, None, "/run/train.log")
    assert outcome is Outcome.INFRA_ERROR and msg.startswith("job FAILED")


def test_classify_harness_traceback_is_candidate_error() -> None:
    log = 'Traceback:\n  File "/h/harness/reward.py", line 3, in compute_score\nZeroDivisionError: division by zero\n'
    outcome, msg = classify(1, None, log, "/h", 2, None, "/run/train.log")
    assert outcome is Outcome.CANDIDATE_ERROR and "/run/train.log" in msg


def test_classify_success_timeout_and_zero_step_exit() -> None:
    assert classify(0, None, "", "/h", 3, None, "L")[0] is Outcome.OK
    assert classify(None, "SUCCEEDED", "", "/h", 1, None, "L")[0] is Outcome.OK
    assert classify(0, None, "", "/h", 0, None, "L")[0] is Outcome.INFRA_ERROR
    assert classify(-15, None, "", "/h", 2, "timeout", "L")[0] is Outcome.TIMEOUT
    assert classify(1, None, "boom", "/h", 0, None, "L")[1].startswith("exit code 1: unclassified")


def test_importing_the_backend_pulls_neither_verl_nor_ray() -> None:
    code = "import sys, trainer_backend.verl; print(sorted(m for m in ('verl', 'ray', 'pyarrow') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
