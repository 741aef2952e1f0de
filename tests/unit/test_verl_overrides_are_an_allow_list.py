"""A harness's verl `overrides` may set only keys that cannot make verl load code.

verl imports modules by path or name from many config keys (a custom dataset class, a reward manager module,
`external_lib`, `trust_remote_code`, the optimizer implementation, agent-loop and tool configs, a custom
sampler), in the trainer process outside any sandbox; `harness/verl.yaml` is candidate-editable. Every such
key is refused, naming the file, the key and the rule. A value is a scalar or a list of scalars: verl's
`omega_conf_to_dataclass` instantiates a mapping's `_target_` while it validates, and `${...}` reads the
controller's environment. The keys the docs and fixtures use stay allowed. A verl-marked check keeps every
allowed key a real verl 0.9.1 leaf. The validation child gets an allow-listed environment without credentials.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
import yaml

from harness.manifest import load_harness
from trainer_backend.verl import child_env
from trainer_backend.verl.config import VerlConfigError, VerlTrainerConfig, load_verl_config
from trainer_backend.verl.overrides import ALLOWED_OVERRIDES, OVERRIDE_RULE, override_problem, value_problem

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


NOT_SCALAR = {
    "actor_rollout_ref.actor.policy_loss.loss_mode={_target_: pathlib.Path.write_text, self: /x, data: y}": "mapping",
    "actor_rollout_ref.rollout.temperature={a: 1}": "mapping",
    "+reward.reward_kwargs.cb={_target_: shutil.copyfile, src: /etc/passwd, dst: /tmp/x}": "mapping",
    "actor_rollout_ref.actor.optim.betas=[{_target_: os.getcwd}]": "mapping",
    "actor_rollout_ref.actor.optim.warmup_style='{_target_: os.getcwd}'": "mapping",
    "actor_rollout_ref.actor.optim.warmup_style=_target_": "_target_",
    "actor_rollout_ref.actor.optim.warmup_style=x_partial_": "_partial_",
    "actor_rollout_ref.rollout.temperature=choice(0.5,0.7)": "grammar function",
    "actor_rollout_ref.rollout.temperature=${oc.env:OPENAI_API_KEY}": "interpolation",
    "actor_rollout_ref.actor.checkpoint.save_contents=[[model],[optimizer]]": "nests lists",
}


@pytest.mark.parametrize("override", list(NOT_SCALAR))
def test_a_value_that_is_not_a_scalar_or_a_list_of_scalars_is_refused(override: str) -> None:
    problem = override_problem(override)
    key = override.split("=", 1)[0].lstrip("+")
    assert problem is not None and problem.startswith(f"{key}: ") and NOT_SCALAR[override] in problem, problem
    assert "a [list] of those" in problem  # what is allowed
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        VerlTrainerConfig(model_path="m", overrides=[override])


@pytest.mark.parametrize(
    "override",
    [
        "actor_rollout_ref.actor.optim.betas=[0.9,0.999]",
        "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra]",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        "actor_rollout_ref.rollout.top_k=null",
        "+reward.reward_kwargs.note='a quoted, plain string'",
    ],
)
def test_scalars_and_lists_of_scalars_are_allowed(override: str) -> None:
    assert value_problem(override) is None and override_problem(override) is None


@pytest.mark.parametrize("field", ["tool_format", "model_path"])
def test_a_settings_string_that_becomes_a_value_is_a_scalar(field: str) -> None:
    kwargs = {"model_path": "m", field: "{_target_: pathlib.Path.write_text, self: /x, data: y}"}
    with pytest.raises(ValueError, match=rf"{field}\n.*mapping"):
        VerlTrainerConfig(**kwargs)  # type: ignore[arg-type]


def test_the_validation_child_gets_no_credentials() -> None:
    parent = {
        "PATH": "/usr/bin",
        "HOME": "/home/u",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "PYTHONPATH": "/src",
        "VIRTUAL_ENV": "/venv",
        "HF_HOME": "/hf",
        "OPENAI_API_KEY": "sk-1",
        "EVOTRAINER_SERVER_TOKENS": "t:alice",
        "EVOTRAINER_DATABASE_URL": "postgresql://u:pw@db/x",
        "HF_TOKEN": "hf_1",
        "GITHUB_TOKEN": "g",
        "AWS_SECRET_ACCESS_KEY": "a",
        "PGPASSWORD": "p",
        "WANDB_API_KEY": "w",
        "PYTHON_KEYRING_BACKEND": "k",
        "RAY_AUTH_TOKEN_PATH": "/r",
    }
    assert child_env(parent) == {
        "PATH": "/usr/bin",
        "HOME": "/home/u",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "PYTHONPATH": "/src",
        "VIRTUAL_ENV": "/venv",
        "HF_HOME": "/hf",
    }


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
