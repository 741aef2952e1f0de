"""Each benchmark scenario is a valid harness with exactly ONE defect, built from its generator.

The generator writes exactly its scenarios, as `scenario_dir` builds them; defective and oracle forms
must differ in one editable file; and each defect must actually do what the scenario says (checked on the
harness code and config, without training).
"""

from __future__ import annotations

import filecmp
import importlib.util
import json
import random
import sys
from pathlib import Path

import make_scenarios
import pytest
import yaml
from scenario_cache import content_digest, scenario_dir

from harness.calls import load_function
from harness.manifest import load_harness
from trainer_backend.local.vocab import tokenizer_for

ROOT = Path(__file__).resolve().parents[2]
NAMES = ["dead-groups", "format-gate", "hackable-reward", "length-budget", "train-leak", "unstable-optimiser"]
# the program-synthesis scenarios; their defects are checked in test_synth_scenarios_defects.py
SYNTH_NAMES = ["synth-format-gate", "synth-length-budget", "synth-shown-tests", "synth-test-timeout"]


def _module(path: Path, name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def _diff_files(a: Path, b: Path) -> list[str]:
    """Relative paths of files that differ (or exist on one side only) between two trees."""
    out: list[str] = []

    def walk(cmp: filecmp.dircmp, prefix: str) -> None:
        out.extend(prefix + n for n in cmp.diff_files + cmp.left_only + cmp.right_only)
        for name, sub in cmp.subdirs.items():
            walk(sub, f"{prefix}{name}/")

    walk(filecmp.dircmp(a, b, ignore=["__pycache__"]), "")
    return sorted(out)


def _reward(folder: Path):  # type: ignore[no-untyped-def]
    harness = load_harness(folder)
    return load_function(harness.root, harness.reward)


def _trainer(folder: Path) -> dict:
    return yaml.safe_load((folder / "harness" / "trainer.yaml").read_text())


def _weights(folder: Path) -> dict[int, float]:
    """data.yaml's weights by difficulty level (the demo's data sources are `arithmetic/level<N>`)."""
    weights = yaml.safe_load((folder / "harness" / "data.yaml").read_text())["weights"]
    rows = [json.loads(x) for x in (folder / "data" / "train.jsonl").read_text().splitlines()]
    level = {r["data_source"]: r["level"] for r in rows}
    return {level[source]: w for source, w in weights.items()}


def test_the_generator_writes_its_scenarios_as_the_cache_builds_them(tmp_path: Path) -> None:
    make_scenarios.main(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(NAMES + SYNTH_NAMES)
    for name in NAMES + SYNTH_NAMES:
        assert content_digest(tmp_path / name) == content_digest(scenario_dir(name)), name


@pytest.mark.parametrize("name", NAMES + SYNTH_NAMES)
def test_scenario_is_two_valid_harnesses_differing_in_one_editable_file(name: str) -> None:
    defective, oracle = scenario_dir(name, "defective"), scenario_dir(name, "oracle")
    meta = json.loads((scenario_dir(name) / "scenario.json").read_text())
    harness = load_harness(defective)
    load_harness(oracle)
    changed = _diff_files(defective, oracle)
    assert len(changed) == 1 and harness.is_editable(changed[0]), changed
    expected_file = {"reward": "harness/reward.py", "data": "harness/data.yaml", "trainer": "harness/trainer.yaml"}
    assert changed[0] == expected_file[meta["factor"]]
    assert "DEFECT" not in (defective / changed[0]).read_text()  # the controller must find it from evidence


def test_hackable_reward_pays_number_spam_that_strict_rejects() -> None:
    bad, good = (
        _reward(scenario_dir("hackable-reward", "defective")),
        _reward(scenario_dir("hackable-reward", "oracle")),
    )
    spam = "3+4=7<ans>7</ans>1;2;3;4;5"
    assert bad("arithmetic/level1", spam, "7")["score"] == 1.0
    assert good("arithmetic/level1", spam, "7")["score"] == 0.0


def test_format_gate_rejects_correct_multi_step_answers() -> None:
    bad, good = _reward(scenario_dir("format-gate", "defective")), _reward(scenario_dir("format-gate", "oracle"))
    strict = load_function(
        scenario_dir("format-gate", "oracle"), load_harness(scenario_dir("format-gate", "oracle")).strict_eval
    )
    two_steps, one_step = "7*3=21;12+21=33<ans>33</ans>", "12+9=21<ans>21</ans>"
    assert strict(two_steps, "33") == 1.0 and good("arithmetic/level4", two_steps, "33")["score"] == 1.0
    assert bad("arithmetic/level4", two_steps, "33")["score"] == 0.0  # a false negative
    assert bad("arithmetic/level2", one_step, "21")["score"] == 1.0  # single steps still pass


def test_length_budget_truncates_worked_solutions_of_hard_levels() -> None:
    gen = _module(ROOT / "examples" / "make_arithmetic_data.py", "make_arithmetic_data_under_test")
    tok = tokenizer_for(load_harness(scenario_dir("length-budget", "defective")), "data/warmstart.jsonl", None)
    budget = _trainer(scenario_dir("length-budget", "defective"))["max_new_tokens"]
    need = {  # response tokens + EOS of sampled worked solutions, per level
        level: [len(tok.encode(gen.worked_solution(gen.make_problem(level, random.Random(i))))) + 1 for i in range(50)]
        for level in (4, 5)
    }
    assert min(need[5]) > budget  # every level-5 solution is cut off
    assert sum(n > budget for n in need[4]) >= 10  # and a good share of level 4
    longest = max(len(tok.encode(gen.worked_solution(gen.make_problem(5, random.Random(i))))) + 1 for i in range(50))
    assert _trainer(scenario_dir("length-budget", "oracle"))["max_new_tokens"] >= longest


def test_dead_groups_mix_weights_unlearnable_levels() -> None:
    bad, good = _weights(scenario_dir("dead-groups", "defective")), _weights(scenario_dir("dead-groups", "oracle"))
    assert (bad[1] + bad[5]) / sum(bad.values()) >= 0.5
    assert good[1] + good[5] == 0


def test_unstable_optimiser_raises_lr_and_opens_the_ratio_clip() -> None:
    bad, good = (
        _trainer(scenario_dir("unstable-optimiser", "defective")),
        _trainer(scenario_dir("unstable-optimiser", "oracle")),
    )
    assert bad["lr"] >= 10 * good["lr"]
    assert bad["clip_low"] > good["clip_low"] and bad["clip_high"] >= 10 * good["clip_high"]


def test_train_leak_states_the_answer_in_training_prompts_only() -> None:
    folder = scenario_dir("train-leak", "defective")
    rows = [json.loads(x) for x in (folder / "data" / "train.jsonl").read_text().splitlines()]
    leaky = [r for r in rows if r["level"] == 6]
    assert leaky and all(f"={r['ground_truth']}=>" in r["prompt"] for r in leaky)
    assert len({r["prompt_id"] for r in rows}) == len(rows)
    val = [json.loads(x) for x in (folder / "data" / "val.jsonl").read_text().splitlines()]
    assert not any(r["prompt"].endswith(f"={r['ground_truth']}=>") for r in val)
    assert _weights(folder)[6] >= 0.5 and _weights(scenario_dir("train-leak", "oracle"))[6] == 0
