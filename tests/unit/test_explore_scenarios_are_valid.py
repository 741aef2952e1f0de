"""The exploration scenarios are valid one-defect harnesses, every factor covered, no seed skill for any.

The generator (`benchmarks/scenarios/make_explore_scenarios.py`) writes exactly these scenarios, as
`scenario_dir` builds them; defective and oracle differ in one editable file of the scenario's factor; each
defect does what its scenario says (checked on the harness code and config, without training).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import make_explore_scenarios
import pytest
import yaml
from scenario_cache import scenario_dir

from agent.decisions.knobs import harness_knobs
from agent.nodes.propose import probe_metrics
from agent.policies.explore import UNPROMPTED, case_key, propose_probes
from harness.calls import load_function
from harness.manifest import load_harness
from skills.patches import apply_skill
from skills.seeds import SEED_SKILLS
from trainer_backend.knobs import declared_knobs
from trainer_backend.local.config import LocalTrainerConfig

NAMES = ["cold-sampling", "greedy-filter", "narrow-mix", "shortcut-bonus", "tiny-batch"]
FILES = {"trainer": "harness/trainer.yaml", "filter": "harness/filters.py", "reward": "harness/reward.py",
         "data": "harness/data.yaml"}  # fmt: skip


def _files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def _changed(a: Path, b: Path) -> list[str]:
    fa, fb = _files(a), _files(b)
    return sorted(k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k))


def test_the_generator_writes_its_scenarios_as_the_cache_builds_them(tmp_path: Path) -> None:
    make_explore_scenarios.main(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == NAMES
    for name in NAMES:
        assert _files(tmp_path / name) == _files(scenario_dir(name)), name


def test_every_factor_has_a_scenario_and_no_seed_skill_is_for_any() -> None:
    metas = [json.loads((scenario_dir(n) / "scenario.json").read_text()) for n in NAMES]
    assert {m["factor"] for m in metas} == set(FILES)
    assert all(m["seed_skill"] is None for m in metas)
    seeds = {s.name for s in SEED_SKILLS}
    assert not any(n in s or s in n for n in NAMES for s in seeds)


@pytest.mark.parametrize("name", NAMES)
def test_scenario_is_two_valid_harnesses_differing_in_one_editable_file(name: str) -> None:
    defective, oracle = scenario_dir(name, "defective"), scenario_dir(name, "oracle")
    meta = json.loads((scenario_dir(name) / "scenario.json").read_text())
    harness = load_harness(defective)
    load_harness(oracle)
    changed = _changed(defective, oracle)
    assert changed == [FILES[meta["factor"]]] and harness.is_editable(changed[0])
    assert "DEFECT" not in (defective / changed[0]).read_text()
    assert _files(oracle) == _files(scenario_dir("length-budget", "oracle"))  # the fixed demo harness itself


@pytest.mark.parametrize(("name", "key"), [("cold-sampling", "temperature"), ("tiny-batch", "prompts_per_step")])
def test_trainer_defect_is_out_of_range_and_its_probe_restores_the_oracle(tmp_path: Path, name: str, key: str) -> None:
    folder = scenario_dir(name)
    knob = {k.key: k for k in declared_knobs(LocalTrainerConfig)}[key]
    bad = yaml.safe_load((folder / "defective" / "harness" / "trainer.yaml").read_text())[key]
    good = yaml.safe_load((folder / "oracle" / "harness" / "trainer.yaml").read_text())[key]
    assert not knob.in_range(bad) and knob.in_range(good)
    work = tmp_path / "h"
    shutil.copytree(folder / "defective", work)
    harness = load_harness(work)
    knobs = harness_knobs(harness, "local")
    props = propose_probes(knobs, probe_metrics({"strict_acc_delta": 0.0}, harness, knobs), tried=(), blocked={},
                           max_candidates=3)  # fmt: skip
    assert props[0].probe is not None and props[0].probe.probe_id == f"trainer:{key}:default"
    apply_skill(props[0].skill, work, harness)
    assert _changed(work, folder / "oracle") == []


def test_greedy_filter_drops_live_groups_the_oracle_keeps() -> None:
    groups = [[0.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]]
    defective, oracle = scenario_dir("greedy-filter", "defective"), scenario_dir("greedy-filter", "oracle")
    bad = load_function(defective, load_harness(defective).group_filter)  # type: ignore[arg-type]
    good = load_function(oracle, load_harness(oracle).group_filter)  # type: ignore[arg-type]
    assert bad(groups, {}) == [False, True, False]
    assert good(groups, {}) == [True, True, False]


def test_shortcut_bonus_pays_skipping_the_working_but_keeps_right_above_wrong() -> None:
    folder = scenario_dir("shortcut-bonus")
    bad = load_function(folder / "defective", load_harness(folder / "defective").reward)
    good = load_function(folder / "oracle", load_harness(folder / "oracle").reward)
    worked, direct = "6*2=12;8+12=20<ans>20</ans>", "<ans>20</ans>"
    right_worked, right_direct = bad("arithmetic/level3", worked, "20"), bad("arithmetic/level3", direct, "20")
    wrong_worked, wrong_direct = bad("arithmetic/level3", worked, "21"), bad("arithmetic/level3", direct, "21")
    assert right_direct["score"] > right_worked["score"] > wrong_direct["score"] > wrong_worked["score"] == 0.0
    assert right_direct["direct"] == 1.0 and right_worked["direct"] == 0.0
    assert "direct" not in good("arithmetic/level3", direct, "20")


def test_narrow_mix_trains_on_one_level_only() -> None:
    def weights(form: str) -> dict[str, float]:
        raw = yaml.safe_load((scenario_dir("narrow-mix", form) / "harness" / "data.yaml").read_text())
        return {k: float(v) for k, v in raw["weights"].items()}

    bad, good = weights("defective"), weights("oracle")
    assert [k for k, w in bad.items() if w > 0] == ["arithmetic/level3"]
    assert sum(1 for w in good.values() if w > 0) >= 3


def _top_probe(work: Path, metrics: dict[str, Any]) -> Any:
    harness = load_harness(work)
    knobs = harness_knobs(harness, "local")
    props = propose_probes(knobs, probe_metrics(metrics, harness, knobs), tried=(), blocked={}, max_candidates=3)
    assert props and props[0].probe is not None
    return harness, props[0]


def test_greedy_filter_is_seen_as_biased_and_its_probe_installs_the_std_filter(tmp_path: Path) -> None:
    # The v0 run of this scenario (seed 0): the filter keeps 65% of the signal, so filter_drops_signal holds
    # still, but the kept live groups average reward 0.74 against 0.25 for the dropped ones.
    work = tmp_path / "h"
    shutil.copytree(scenario_dir("greedy-filter", "defective"), work)
    stalled = {"strict_acc_delta": -0.01, "kept_live_ratio": 0.65, "filter_reward_bias": 0.487,
               "dead_group_ratio": 0.32, "ppo_kl_max": 0.0016}  # fmt: skip
    harness, top = _top_probe(work, stalled)
    assert top.probe.probe_id == "filter:std" and "filter_biased" in top.probe.symptoms
    apply_skill(top.skill, work, harness)
    assert _changed(work, scenario_dir("greedy-filter", "defective")) == ["harness/filters.py"]
    fixed = load_function(work, load_harness(work).group_filter)  # type: ignore[arg-type]
    groups = [[0.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]]
    assert fixed(groups, {}) == [True, True, False]  # the hard live group is kept again, as the oracle does


def test_narrow_mix_is_seen_as_uncovered_and_its_probe_trains_on_the_held_out_mix(tmp_path: Path) -> None:
    # The v0 run of this scenario (seed 0): every training rollout from level 3, held-out levels 2-4 alike.
    work = tmp_path / "h"
    shutil.copytree(scenario_dir("narrow-mix", "defective"), work)
    third = 1 / 3
    stalled = {"strict_acc_delta": 0.0, "source_mix_gap": 2 / 3, "train_source_share/arithmetic/level3": 1.0,
               **{f"heldout_source_share/arithmetic/level{n}": third for n in (2, 3, 4)}}  # fmt: skip
    harness, top = _top_probe(work, stalled)
    assert top.probe.probe_id == "data:match-heldout" and "heldout_uncovered" in top.probe.symptoms
    # proposed without a stall too (the symptom names the knob), so the skill it would teach needs none either
    assert "source_mix_gap > 0.3" in top.probe.learned_trigger and "strict_acc_delta" not in top.probe.learned_trigger
    metrics = probe_metrics(stalled, harness, harness_knobs(harness, "local"))
    apply_skill(top.skill, work, harness, metrics=metrics)
    weights = yaml.safe_load((work / "harness" / "data.yaml").read_text())["weights"]
    assert weights == {"arithmetic/level1": 0.0, "arithmetic/level2": 0.3333, "arithmetic/level3": 0.3333,
                       "arithmetic/level4": 0.3333, "arithmetic/level5": 0.0}  # fmt: skip


def test_a_symptom_that_names_the_filter_outranks_general_ones_and_needs_no_stall(tmp_path: Path) -> None:
    # greedy-filter seed 1, iteration 2: no diversity, low spread and dead groups (4.0 of general support for the
    # temperature and group-size probes) beside filter_biased (3.0 for the std filter).
    work = tmp_path / "h"
    shutil.copytree(scenario_dir("greedy-filter", "defective"), work)
    noisy = {"strict_acc_delta": 0.0, "filter_reward_bias": 0.45, "identical_group_ratio": 0.6,
             "reward_spread": 0.05, "dead_group_ratio": 0.35, "wrong_mean_logprob": -0.05}  # fmt: skip
    _, top = _top_probe(work, noisy)
    assert top.probe.probe_id == "filter:std"
    harness = load_harness(work)
    knobs = harness_knobs(harness, "local")
    calm = probe_metrics({**noisy, "strict_acc_delta": 0.08}, harness, knobs)  # held-out still rising
    props = propose_probes(knobs, calm, tried=(), blocked={}, max_candidates=3, only=UNPROMPTED)
    assert [p.probe.probe_id for p in props] == ["filter:std"]


def test_a_filter_probe_with_thin_evidence_is_tried_again_and_a_regressed_one_is_not(tmp_path: Path) -> None:
    work = tmp_path / "h"
    shutil.copytree(scenario_dir("greedy-filter", "defective"), work)
    harness = load_harness(work)
    knobs = harness_knobs(harness, "local")
    metrics = probe_metrics({"strict_acc_delta": 0.0, "filter_reward_bias": 0.45}, harness, knobs)
    key = case_key("filter:std", "filter_biased")

    def first(outcome: str) -> str:
        props = propose_probes(knobs, metrics, tried=(), blocked={key: outcome}, max_candidates=3)
        return props[0].probe.probe_id if props and props[0].probe else ""

    assert first("insufficient") == "filter:std"  # a pilot that could not tell is not evidence against it
    assert first("regression") != "filter:std" and first("mixed") != "filter:std"
