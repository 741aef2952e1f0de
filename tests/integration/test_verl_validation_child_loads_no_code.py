"""The verl validation child instantiates nothing a value names and sees no credential of the controller.

verl's `omega_conf_to_dataclass` (Hydra's recursive `instantiate`) calls whatever a `_target_` in a config
mapping names, while the child validates; so an override whose value is a mapping is refused before verl
composes anything, even when it reaches the child directly. The child also imports the harness's reward
module: it gets an allow-listed environment, and a secret set in the controller is not in it (the reward
module here records the child's environment at import), while the wandb check still knows a key is set.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest

from trainer_backend.base import RunSpec
from trainer_backend.verl import prepare, validate_plans

pytestmark = pytest.mark.verl
pytest.importorskip("verl")

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "verl_harness"
SECRETS = {
    name: f"secret-{i}-9f3c1e"
    for i, name in enumerate(
        ["OPENAI_API_KEY", "EVOTRAINER_SERVER_TOKENS", "HF_TOKEN", "DEPLOY_SECRET", "DB_PASSWORD", "WANDB_API_KEY"]
    )
}


def test_a_mapping_value_runs_nothing_and_no_secret_reaches_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    path_entry = str(tmp_path / "site")  # a PYTHONPATH a user set is part of what the child needs to import
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), path_entry])))
    harness = Path(shutil.copytree(FIXTURE, tmp_path / "h"))
    seen = tmp_path / "child_env.json"
    reward = harness / "harness" / "reward.py"
    reward.write_text(
        f"import json as _j, os as _o\n_j.dump(dict(_o.environ), open({str(seen)!r}, 'w'))\n" + reward.read_text()
    )
    _, plan = prepare(RunSpec(run_id="r1", harness_dir=harness, out_dir=tmp_path / "run", steps=3))
    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    payload = (
        f"{{_target_: pathlib.Path.write_text, self: {{_target_: pathlib.Path, _args_: [{victim}]}}, data: pwned}}"
    )
    key = "actor_rollout_ref.actor.policy_loss.loss_mode"  # an allowed key, in a node verl instantiates
    crafted = dataclasses.replace(plan, overrides=[*plan.overrides, f"{key}={payload}"])
    wandb = dataclasses.replace(plan, overrides=[*plan.overrides, "trainer.logger=[console,wandb]"])

    (_, refused), (yaml_text, problems) = validate_plans([(crafted, True), (wandb, True)], tmp_path, "t")

    assert victim.read_text() == "original"
    assert len(refused) == 1 and refused[0].startswith(f"{key}: the value is a mapping"), refused
    assert problems == [] and "wandb" in yaml_text  # composed, validated, and the key counted as set
    env = json.loads(seen.read_text())
    assert not set(SECRETS) & set(env), sorted(set(SECRETS) & set(env))
    assert "9f3c1e" not in json.dumps(env)  # nor under another name
    assert env["PATH"] and path_entry in env["PYTHONPATH"]  # what the child needs to import verl and the reward
