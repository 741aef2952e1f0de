"""In a `--backend verl` session, trainer-setting skills edit the verl settings file (and that
edit is a trainer factor the verl backtest does not refuse), on a harness whose default backend is local."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from agent.decisions.factors import check_candidate
from agent.launch.preflight import _unread_changes
from harness.manifest import load_harness
from skills.patches import SkillPatchError, apply_skill
from skills.seeds import SEED_SKILLS

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "verl_agentic"
SEEDS = {s.name: s for s in SEED_SKILLS}


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    dst = tmp_path / "h"
    shutil.copytree(FIXTURE, dst)
    return dst


def _settings(root: Path, name: str) -> dict:  # type: ignore[type-arg]
    return dict(yaml.safe_load((root / "harness" / name).read_text()))


def test_length_budget_skill_edits_the_backends_own_settings(copy: Path) -> None:
    harness = load_harness(copy)
    assert harness.manifest.trainer.backend == "local"
    local_before = (copy / "harness" / "trainer.yaml").read_text()
    applied = apply_skill(SEEDS["raise-length-budget"], copy, harness, backend="verl")
    assert applied.files == ("harness/verl.yaml",)
    assert _settings(copy, "verl.yaml")["max_response_length"] == 1024  # max_new_tokens is verl's max_response_length
    assert (copy / "harness" / "trainer.yaml").read_text() == local_before
    applied = apply_skill(SEEDS["raise-length-budget"], copy, harness, backend="local")
    # an agentic harness on the local backend: the per-turn budget cuts its turns (max_new_tokens is not read)
    assert "max_turn_tokens" not in yaml.safe_load(local_before)  # added at its default 32, then raised
    assert applied.files == ("harness/trainer.yaml",) and _settings(copy, "trainer.yaml")["max_turn_tokens"] == 64
    assert _settings(copy, "trainer.yaml")["max_new_tokens"] == 48


def test_a_verl_setting_left_at_its_default_is_added_and_a_missing_one_refused(copy: Path) -> None:
    harness = load_harness(copy)
    apply_skill(SEEDS["stabilise-policy-updates"], copy, harness, backend="verl")
    verl = _settings(copy, "verl.yaml")
    assert verl["lr"] == pytest.approx(1e-7) and verl["clip_ratio_low"] == 0.2 and verl["clip_ratio_high"] == 0.2
    temperature = SEEDS["raise-length-budget"].model_copy(
        update={"patch": '[{"op": "set_yaml_key", "file": "@trainer_config", "key": "temperature", "value": 1}]'}
    )
    with pytest.raises(SkillPatchError, match="not for --backend verl"):
        apply_skill(temperature, copy, harness, backend="verl")


def test_every_backends_settings_file_is_the_trainer_config_factor(copy: Path) -> None:
    harness = load_harness(copy)
    subprocess.run(["git", "init", "-q", str(copy)], check=True)
    subprocess.run(["git", "-C", str(copy), "add", "-A"], check=True)
    base = copy.parent / "base"
    shutil.copytree(copy, base)
    apply_skill(SEEDS["raise-length-budget"], copy, harness, backend="verl")
    diff = subprocess.run(["git", "-C", str(copy), "diff"], capture_output=True, text=True, check=True).stdout
    check = check_candidate(["harness/verl.yaml"], diff, harness, ["trainer"])
    assert check.ok and check.factors == ("trainer",) and check.trainer_keys == ("max_response_length",)
    assert check.length_budget
    assert _unread_changes("verl", load_harness(base), copy) == []  # the verl backtest does not refuse it
