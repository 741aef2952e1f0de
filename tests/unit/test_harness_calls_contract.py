"""Reward contract validation and in-process harness calls."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from harness.calls import InProcessCalls, RewardContractError, validate_reward
from harness.failures import CandidateCodeError, Outcome
from harness.manifest import HarnessError, load_harness
from sandboxes.calls import open_calls

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ENTRY = "harness/reward.py:compute_score"


def test_numbers_and_score_dicts_are_accepted() -> None:
    assert validate_reward(1, ENTRY) == (1.0, {})
    assert validate_reward(0.25, ENTRY) == (0.25, {})
    assert validate_reward({"score": 0.5, "hit": 1, "numbers": 3.0}, ENTRY) == (0.5, {"hit": 1.0, "numbers": 3.0})


@pytest.mark.parametrize(
    "value",
    [
        None,
        "1.0",
        math.nan,
        math.inf,
        True,
        {"hit": 1.0},
        {"score": "1"},
        {"score": 1.0, "note": "x"},
        {"score": 1.0, "x": math.nan},
        [1.0],
    ],
)
def test_contract_violations_raise_naming_the_entry(value: object) -> None:
    with pytest.raises(RewardContractError, match=r"harness/reward\.py:compute_score"):
        validate_reward(value, ENTRY)


def _copy(tmp_path: Path, name: str = "arithmetic-oracle") -> Path:
    dst = tmp_path / name
    shutil.copytree(EXAMPLES / name, dst, ignore=shutil.ignore_patterns("train.jsonl", "warmstart.jsonl"))
    (dst / "data" / "train.jsonl").write_text((EXAMPLES / name / "data" / "val.jsonl").read_text())
    (dst / "data" / "warmstart.jsonl").write_text("")
    return dst


def test_in_process_calls_score_and_filter_the_oracle_harness(tmp_path: Path) -> None:
    calls = open_calls(load_harness(_copy(tmp_path)), "none")
    item = {"data_source": "arithmetic/level3", "ground_truth": "33", "extra_info": {}}
    out = calls.compute_rewards(
        [
            dict(item, solution_str="12+21=33<ans>33</ans>"),
            dict(item, solution_str="12+21=33<ans>33</ans>33;34"),
            dict(item, solution_str="12+21=32<ans>32</ans>"),
        ]
    )
    assert [validate_reward(v, ENTRY)[0] for v in out] == [1.0, 0.0, 0.0]
    keep, state = calls.filter_groups([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]], {})
    assert keep == [False, True, False]  # zero-variance groups dropped
    assert state["seen"] == 3
    calls.close()


def test_defective_reward_pays_for_number_spam(tmp_path: Path) -> None:
    calls = InProcessCalls(load_harness(_copy(tmp_path, "arithmetic")))
    item = {"data_source": "arithmetic/level3", "ground_truth": "71", "extra_info": {}}
    honest_wrong, spam = calls.compute_rewards(
        [
            dict(item, solution_str="23+48=61<ans>61</ans>"),
            dict(item, solution_str="23+48=61<ans>61</ans>17;1;3"),
        ]
    )
    assert validate_reward(spam, ENTRY)[0] > validate_reward(honest_wrong, ENTRY)[0]


def test_raising_reward_becomes_a_classified_failure_naming_the_file(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    (root / "harness" / "reward.py").write_text("def compute_score(*a, **k):\n    raise KeyError('boom')\n")
    calls = InProcessCalls(load_harness(root))
    with pytest.raises(CandidateCodeError) as info:
        calls.compute_rewards([{"data_source": "", "solution_str": "1", "ground_truth": "1", "extra_info": {}}])
    assert info.value.outcome is Outcome.CANDIDATE_ERROR
    assert info.value.path == "harness/reward.py" and "KeyError" in info.value.message


def test_bad_filter_return_is_classified(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    (root / "harness" / "filters.py").write_text("def filter_groups(g, s):\n    return [1] * len(g)\n")
    with pytest.raises(CandidateCodeError, match=r"harness/filters\.py:filter_groups must return a list of 2 bools"):
        InProcessCalls(load_harness(root)).filter_groups([[0.0], [1.0]], {})


def test_import_error_in_reward_file_is_classified(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    (root / "harness" / "reward.py").write_text("import not_a_module_anywhere\n")
    with pytest.raises(CandidateCodeError, match=r"importing harness/reward\.py raised ModuleNotFoundError"):
        InProcessCalls(load_harness(root))


def test_unknown_sandbox_mode_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown sandbox mode"):
        open_calls(load_harness(_copy(tmp_path)), "vm")


def test_manifest_missing_field_names_file_and_field(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    manifest = root / "evotrainer.yaml"
    manifest.write_text("\n".join(line for line in manifest.read_text().splitlines() if not line.startswith("reward:")))
    with pytest.raises(HarnessError, match=r"evotrainer.yaml: field 'reward': Field required"):
        load_harness(root)


def test_both_example_harnesses_load_and_differ_only_in_harness_folder() -> None:
    for name in ("arithmetic", "arithmetic-oracle"):
        harness = load_harness(EXAMPLES / name)
        assert harness.is_protected("eval/strict.py") and harness.is_editable("harness/reward.py")
    for rel in ("data/train.jsonl", "data/val.jsonl", "data/warmstart.jsonl", "eval/strict.py"):
        assert (EXAMPLES / "arithmetic" / rel).read_bytes() == (EXAMPLES / "arithmetic-oracle" / rel).read_bytes()
