"""Candidate code stays in the sandbox during training too: the trusted trainer calls the reward
through a worker inside a Docker container, so a hostile reward is contained and the run is classified."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from trainer_backend import BACKENDS
from trainer_backend.base import RunSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TINY = (
    "lr: 1.0e-3\ngroup_size: 4\nprompts_per_step: 4\nmax_new_tokens: 24\nval_every: 2\nsave_every: 2\n"
    "n_layers: 1\nhidden: 32\nwarmstart_steps: 20\n"
)
HOSTILE = {
    "socket": "import socket\n    socket.create_connection(('1.1.1.1', 80), timeout=2)\n",
    "read_evaluator": "open('/harness/eval/strict.py').read()\n",
    "write_outside_scratch": "open('/harness/harness/pwned.txt', 'w').write('x')\n",
}

pytestmark = [pytest.mark.slow, pytest.mark.docker]


@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_hostile_reward_during_a_pilot_is_contained_and_classified(
    attack: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, docker_client: object
) -> None:
    from sandboxes.image import ensure_image

    ensure_image(docker_client)
    monkeypatch.setenv("EVOTRAINER_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "h"
    shutil.copytree(EXAMPLES / "arithmetic-oracle", root)
    (root / "harness" / "trainer.yaml").write_text(TINY)
    val = (root / "data" / "val.jsonl").read_text().splitlines()
    (root / "data" / "val.jsonl").write_text("\n".join(val[::20]) + "\n")
    body = HOSTILE[attack].replace("\n    ", "\n    ")
    (root / "harness" / "reward.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
        f"    {body}    return 1.0\n"
    )
    spec = RunSpec(run_id="hostile", harness_dir=root, out_dir=tmp_path / "run", steps=3, sandbox="docker")
    result = BACKENDS["local"].run(spec)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert result.outcome.value == "candidate_error", summary
    assert "harness/reward.py" in result.message
    assert not (root / "harness" / "pwned.txt").exists()
