"""Issue 25: a harness's verl `overrides` may set only keys that cannot make verl load code.

verl imports modules by path or name from many config keys (a custom dataset class, a reward manager module,
`external_lib`, `trust_remote_code`, the optimizer implementation, agent-loop and tool configs, a custom
sampler), in the trainer process outside any sandbox; `harness/verl.yaml` is candidate-editable. Every such
key is refused, naming the file, the key and the rule, and so is a `${...}` interpolation in a value; the keys
the docs and fixtures use stay allowed. A verl-marked check keeps every allowed key a real verl 0.9.1 leaf.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
import yaml

from harness.manifest import load_harness
from trainer_backend.verl.config import VerlConfigError, VerlTrainerConfig, load_verl_config
from trainer_backend.verl.overrides import ALLOWED_OVERRIDES, OVERRIDE_RULE, override_problem

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "verl_harness"

LOADS_CODE = [
    "data.custom_cls.path=/h/harness/ds.py",
    "+data.custom_cls.name=Evil",
    "~data.custom_cls",
    "reward.reward_manager.source=importlib",
    "reward.reward_manager.module.path=/h/harness/manager.py",
    "actor_rollout_ref.model.external_lib=harness.evil",
    "actor_rollout_ref.model.trust_remote_code=True",
    "data.trust_remote_code=True",
    "actor_rollout_ref.actor.optim.optimizer_impl=harness.opt",
    "actor_rollout_ref.rollout.agent.custom_async_server.path=/h/x.py",
    "actor_rollout_ref.rollout.multi_turn.function_tool_path=/h/tools.py",
    "actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module=harness.x",
    "trainer.v1.sampler.custom_sampler.path=/h/s.py",
    "trainer.checkpoint_callback_class=harness.cb.C",
    "+reward.custom_reward_function.reward_kwargs={a: 1}",  # the subtree itself, not a key below it
    "actor_rollout_ref.rollout.multi_turn.tool_config_path=/x.yaml",  # the controller's own, said so
]


@pytest.mark.parametrize("override", LOADS_CODE)
def test_keys_that_can_load_code_are_refused(override: str) -> None:
    problem = override_problem(override)
    assert problem is not None
    key = override.split("=", 1)[0].lstrip("+~")
    assert problem.startswith(key), problem
    with pytest.raises(ValueError, match=r"cannot load code|set by EvoTrainer"):
        VerlTrainerConfig(model_path="m", overrides=[override])


@pytest.mark.parametrize(
    "override",
    [
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",  # docs/verl.md
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.4",  # tests/fixtures/verl_harness
        "actor_rollout_ref.rollout.temperature=0.7",
        "+reward.custom_reward_function.reward_kwargs.max_resp_len=9",
        "algorithm.filter_groups.max_num_gen_batches=4",
        "~actor_rollout_ref.rollout.top_k",
    ],
)
def test_plain_knobs_are_allowed(override: str) -> None:
    assert override_problem(override) is None
    assert VerlTrainerConfig(model_path="m", overrides=[override]).overrides == [override]


def test_an_interpolation_is_refused() -> None:
    problem = override_problem("actor_rollout_ref.rollout.temperature=${oc.env:AWS_SECRET_ACCESS_KEY}")
    assert problem is not None and "interpolation" in problem


def test_the_refusal_names_the_file_the_key_and_the_rule(tmp_path: Path) -> None:
    harness = Path(shutil.copytree(FIXTURE, tmp_path / "h"))
    settings = harness / "harness" / "verl.yaml"
    raw = yaml.safe_load(settings.read_text())
    raw["overrides"] = ["actor_rollout_ref.rollout.gpu_memory_utilization=0.5", "+data.custom_cls.path=/h/ds.py"]
    settings.write_text(yaml.safe_dump(raw))
    with pytest.raises(VerlConfigError) as caught:
        load_verl_config(load_harness(harness))
    text = str(caught.value)
    assert text.startswith(f"{settings}: field 'overrides': ") and "data.custom_cls.path" in text, text
    assert OVERRIDE_RULE in text


@pytest.mark.verl
def test_every_allowed_key_is_a_leaf_of_verls_config() -> None:
    spec = importlib.util.find_spec("verl")
    if spec is None or spec.origin is None:
        pytest.skip("verl is not installed")
    packaged = Path(spec.origin).parent / "trainer" / "config" / "_generated_ppo_trainer.yaml"
    config = yaml.safe_load(packaged.read_text())
    for key in ALLOWED_OVERRIDES:
        parts = key.split(".")
        node = config
        for part in parts[:-2] if key.endswith(".*") else parts:  # a kwargs subtree: its parent exists
            assert isinstance(node, dict) and part in node, f"{key}: not in verl's {packaged.name}"
            node = node[part]
        assert key.endswith(".*") or not isinstance(node, dict), f"{key} is a subtree, not a leaf"
