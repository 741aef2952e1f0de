"""The diff classifier names the factors a candidate touches and enforces the single-factor rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.decisions.factors import check_candidate, classify_path, parse_diff
from harness.manifest import Harness, load_harness

DEMO = Path(__file__).resolve().parents[2] / "examples" / "arithmetic"


@pytest.fixture(scope="module")
def harness() -> Harness:
    return load_harness(DEMO)


def _diff(path: str, *hunk: str) -> str:
    body = "\n".join(hunk)
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1,3 +1,3 @@\n{body}\n"


REWARD = _diff("harness/reward.py", " import re", "-    return 1.0", "+    return 0.0")
BUDGET = _diff("harness/trainer.yaml", " group_size: 8", "-max_new_tokens: 16  # DEFECT", "+max_new_tokens: 48")
LR = _diff("harness/trainer.yaml", "-lr: 3.0e-4", "+lr: 1.0e-4", " group_size: 8")


def test_single_reward_edit_is_ok(harness: Harness) -> None:
    check = check_candidate(["harness/reward.py"], REWARD, harness, ["reward"], "")
    assert check.ok and check.factors == ("reward",) and check.reason == ""


def test_length_budget_is_a_trainer_factor_flagged_as_length_budget(harness: Harness) -> None:
    check = check_candidate(["harness/trainer.yaml"], BUDGET, harness)
    assert check.ok and check.factors == ("trainer",)
    assert check.trainer_keys == ("max_new_tokens",) and check.length_budget
    lr = check_candidate(["harness/trainer.yaml"], LR, harness)
    assert lr.factors == ("trainer",) and lr.trainer_keys == ("lr",) and not lr.length_budget


def test_reward_plus_trainer_is_refused_unless_declared_and_justified(harness: Harness) -> None:
    changed = ["harness/reward.py", "harness/trainer.yaml"]
    both = REWARD + BUDGET
    undeclared = check_candidate(changed, both, harness, ["reward"], "because")
    assert not undeclared.ok and undeclared.factors == ("reward", "trainer")
    assert "multi-factor" in undeclared.reason and "['trainer']" in undeclared.reason
    unjustified = check_candidate(changed, both, harness, ["reward", "trainer"], "  ")
    assert not unjustified.ok and "no justification" in unjustified.reason
    bundle = check_candidate(changed, both, harness, ["reward", "trainer"], "strict reward needs room for the answer")
    assert bundle.ok and bundle.factors == ("reward", "trainer")


def test_protected_and_off_surface_paths_are_refused_by_name(harness: Harness) -> None:
    for path in ("eval/strict.py", "evotrainer.yaml", "data/val.jsonl"):
        check = check_candidate([path], _diff(path, "-a", "+b"), harness, ["reward"], "x")
        assert not check.ok and path in check.reason and "protected" in check.reason
    # a protected path hidden in the diff but missing from `changed` is still caught
    sneaky = check_candidate(["harness/reward.py"], REWARD + _diff("eval/strict.py", "-a", "+b"), harness)
    assert not sneaky.ok and "eval/strict.py" in sneaky.reason
    off = check_candidate(["data/train.jsonl"], _diff("data/train.jsonl", "-a", "+b"), harness)
    assert not off.ok and "outside the editable surface" in off.reason


def test_empty_diff_is_flagged_null(harness: Harness) -> None:
    check = check_candidate([], "", harness, ["reward"], "")
    assert not check.ok and check.is_null and check.factors == () and "null" in check.reason
    comment = _diff("harness/trainer.yaml", "-# old comment", "+# new comment", " lr: 3.0e-4")
    cosmetic = check_candidate(["harness/trainer.yaml"], comment, harness)
    assert cosmetic.is_null and not cosmetic.ok and "comments" in cosmetic.reason


def test_declared_factor_must_match_a_single_factor_diff(harness: Harness) -> None:
    check = check_candidate(["harness/trainer.yaml"], LR, harness, ["reward"], "")
    assert not check.ok and "declares ['reward']" in check.reason
    unknown = check_candidate(["harness/reward.py"], REWARD, harness, ["vibes"], "")
    assert not unknown.ok and "vibes" in unknown.reason


def test_filter_data_diagnostic_and_other_files(harness: Harness) -> None:
    cases = {
        "harness/filters.py": ("filter",),
        "harness/data.yaml": ("data",),
        "harness/diagnostics/dgr.py": ("diagnostic",),
        "harness/helper.py": ("other",),
    }
    for path, factors in cases.items():
        assert classify_path(path, None, harness)[0] == factors, path
    wiring = _diff("harness/trainer.yaml", "-data_selection: harness/data.yaml", "+data_selection: harness/d2.yaml")
    assert check_candidate(["harness/trainer.yaml"], wiring, harness).factors == ("data",)


def test_nested_trainer_keys_use_the_hunk_context(harness: Harness) -> None:
    nested = _diff("harness/trainer.yaml", " rollout:", "-  max_new_tokens: 16", "+  max_new_tokens: 32")
    check = check_candidate(["harness/trainer.yaml"], nested, harness)
    assert check.trainer_keys == ("rollout.max_new_tokens",) and check.length_budget
    mix = _diff("harness/trainer.yaml", " data_mix:", "-  easy: 0.5", "+  easy: 0.1")
    assert check_candidate(["harness/trainer.yaml"], mix, harness).factors == ("data",)


def test_parse_diff_lists_both_sides_of_a_rename() -> None:
    text = (
        "diff --git a/harness/old.py b/harness/new.py\nsimilarity index 100%\n"
        "rename from harness/old.py\nrename to harness/new.py\n"
    )
    assert set(parse_diff(text)) == {"harness/old.py", "harness/new.py"}
