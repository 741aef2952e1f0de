"""The learnable-data-mix skill: its trigger, and the reweight_sources op on the demo's data selection.

The op works on any source names (entries are values of the manifest's ``data.select_by``
field, default ``data_source``), with no naming pattern. Per-source numbers below are from real local
runs of the arithmetic demo (seed 0, 60 steps) with the strict reward and a 48-token budget (the harness
once skills 1 and 2 are merged): level 1 is 70% dead (solved), level 5 99% dead (failed), level 2 57%
dead, levels 3-4 carry the signal.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from harness.manifest import load_harness
from skills.patches import SkillPatchError, apply_skill, resolve_file, reweight, sources_by_entry
from skills.seeds import SEED_SKILLS
from skills.templates import TemplateError, set_yaml_mapping
from skills.triggers import evaluate, unknown_names
from trainer_backend.local.config import load_data_weights

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "arithmetic"
SKILL = next(s for s in SEED_SKILLS if s.name == "learnable-data-mix")
REAL = {  # data source: (groups, dead ratio)
    "arithmetic/level1": (417, 0.70),
    "arithmetic/level2": (89, 0.57),
    "arithmetic/level3": (85, 0.15),
    "arithmetic/level4": (105, 0.30),
    "arithmetic/level5": (264, 0.99),
}


def _metrics(table: dict[str, tuple[int, float]] = REAL, **extra: float) -> dict[str, float]:
    out: dict[str, float] = {"dead_group_ratio": 0.62, "dead_source_share": 0.81, "truncation_rate": 0.0}
    out = {**out, "reward_hacking": 0.0, "unrewarded_correct_rate": 0.0, **extra}
    for source, (groups, ratio) in table.items():
        out[f"source_groups/{source}"] = float(groups)
        out[f"source_dead_ratio/{source}"] = ratio
    return out


def _by_source(*weights: float) -> dict[str, float]:
    return {f"arithmetic/level{i}": w for i, w in enumerate(weights, start=1)}


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    shutil.copytree(DEMO, tmp_path / "h")
    return tmp_path / "h"


def test_seed_is_a_data_skill_whose_trigger_reads_known_metrics() -> None:
    assert SKILL.factor == "data" and SKILL.params == {"dead_at": 0.5, "min_groups": 8}
    assert all(not unknown_names(s.trigger) for s in SEED_SKILLS)
    assert len(SEED_SKILLS) == 11  # 7 + the 4 agentic skills (skills/agentic_seeds.py)


def test_trigger_fires_on_dead_sources_only_once_responses_are_not_cut() -> None:
    assert evaluate(SKILL.trigger, _metrics())
    assert not evaluate(SKILL.trigger, _metrics(truncation_rate=0.42))  # judge data after the length fix
    assert not evaluate(SKILL.trigger, _metrics(dead_source_share=0.1))  # dead groups spread over sources
    assert not evaluate(SKILL.trigger, _metrics(reward_hacking=1.0))  # fix the reward before judging the data
    assert not evaluate(SKILL.trigger, _metrics(unrewarded_correct_rate=0.12))  # a format gate hides a level
    assert not evaluate(SKILL.trigger, _metrics(dead_group_ratio=0.4))  # warning level: the filter's turn
    oracle = _metrics(dead_group_ratio=0.307, dead_source_share=0.314)  # the fixed demo after 60 steps
    assert not evaluate(SKILL.trigger, oracle)
    missing = {k: v for k, v in _metrics().items() if k != "dead_source_share"}
    assert not evaluate(SKILL.trigger, missing)  # no per-source evidence: never fires


def test_op_zeroes_dead_levels_of_the_demo_and_keeps_comments(demo: Path) -> None:
    harness = load_harness(demo)
    before = (demo / "harness/data.yaml").read_text()
    applied = apply_skill(SKILL, demo, harness, metrics=_metrics())
    assert applied.files == ("harness/data.yaml",)
    after = (demo / "harness/data.yaml").read_text()
    assert after.splitlines()[:3] == before.splitlines()[:3]  # the comments stay
    assert [a for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b] == [
        "weights: {arithmetic/level1: 0.4, arithmetic/level2: 0.1, arithmetic/level3: 0.1, arithmetic/level4: 0.1, "
        "arithmetic/level5: 0.3}"
    ]
    assert load_data_weights(demo / "harness/data.yaml") == _by_source(0.0, 0.0, 0.5, 0.5, 0.0)
    assert (
        "zeroed arithmetic/level1: 70% dead of 417 groups; arithmetic/level2: 57% dead of 89 groups; "
        "arithmetic/level5: 99% dead of 264 groups" in applied.notes[0]
    )


def test_survivors_keep_their_proportions_and_the_total() -> None:
    table = {"arithmetic/level5": (264, 0.99), "arithmetic/level3": (85, 0.15)}
    weights = {"arithmetic/level1": 0.4, "arithmetic/level2": 0.1, "arithmetic/level3": 0.2, "arithmetic/level5": 0.3}
    new, _ = reweight(weights, _metrics(table), 0.9, 8)
    assert list(new.values()) == [round(0.4 / 0.7, 4), round(0.1 / 0.7, 4), round(0.2 / 0.7, 4), 0.0]


def test_threshold_and_evidence_floor_come_from_params(demo: Path) -> None:
    harness = load_harness(demo)
    apply_skill(SKILL, demo, harness, params={"dead_at": 0.9}, metrics=_metrics())
    assert load_data_weights(demo / "harness/data.yaml") == _by_source(0.5714, 0.1429, 0.1429, 0.1429, 0.0)
    few = _metrics({"arithmetic/level5": (5, 1.0), "arithmetic/level3": (85, 0.15)})
    with pytest.raises(TemplateError, match="no source is dead"):
        reweight({"arithmetic/level3": 0.5, "arithmetic/level5": 0.5}, few, 0.5, 8)


def test_entries_of_another_selection_field_map_to_sources_through_the_training_file(tmp_path: Path) -> None:
    """With data.select_by: tier, an entry draws the data sources of the rows with that tier, any names."""
    rows = [{"prompt": "p", "ground_truth": "g", "tier": t, "data_source": s} for t, s in ((1, "wiki"), (2, "code"))]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    by_entry = sources_by_entry(tmp_path, "train.jsonl", "tier")
    assert by_entry == {"1": {"wiki"}, "2": {"code"}}
    new, note = reweight({1: 0.5, 2: 0.5}, _metrics({"wiki": (40, 0.9), "code": (40, 0.2)}), 0.5, 8, by_entry)
    assert new == {1: 0.0, 2: 1.0} and "zeroed 1: 90% dead of 40 groups" in note


@pytest.mark.parametrize(
    ("weights", "metrics", "match"),
    [
        ({"a/1": 0.5, "a/5": 0.5}, _metrics({"gsm8k": (50, 1.0)}), "no entry of"),
        ({"a/1": 0.5, "a/5": 0.5}, {"dead_group_ratio": 0.6}, "no per-source table"),
        ({"a/1": 0.5, "a/5": 0.5}, _metrics({"a/1": (50, 1.0), "a/5": (50, 0.95)}), "every"),
        ({"a/3": 1.0}, _metrics({"a/3": (50, 0.1)}), "no source is dead"),
        ({"a/3": -1.0}, _metrics(), "must be a number >= 0"),
    ],
)
def test_reweight_refuses(weights: dict[str, float], metrics: dict[str, float], match: str) -> None:
    with pytest.raises(TemplateError, match=match):
        reweight(weights, metrics, 0.5, 8)


def test_apply_refuses_without_evidence_file_or_field(demo: Path) -> None:
    harness = load_harness(demo)
    with pytest.raises(SkillPatchError, match="no per-source table"):
        apply_skill(SKILL, demo, harness)  # no metrics passed
    trainer = demo / "harness/trainer.yaml"
    trainer.write_text(trainer.read_text().replace("data_selection: harness/data.yaml\n", ""))
    with pytest.raises(SkillPatchError, match=r"harness/trainer\.yaml: no field 'data_selection'"):
        resolve_file("@data_selection", harness, demo)
    trainer.write_text(trainer.read_text() + "data_selection: harness/mix.yaml\n")
    with pytest.raises(SkillPatchError, match=r"harness/mix\.yaml does not exist"):
        apply_skill(SKILL, demo, harness, metrics=_metrics())
    (demo / "harness/mix.yaml").write_text("mix: {arithmetic/level1: 1.0}\n")
    with pytest.raises(SkillPatchError, match="has no key 'weights'"):
        apply_skill(SKILL, demo, harness, metrics=_metrics())
    assert (demo / "harness/data.yaml").read_text() == (DEMO / "harness/data.yaml").read_text()


def test_block_mappings_are_edited_line_by_line() -> None:
    text = "weights:  # per tier\n  1: 0.4  # easy\n  3: 0.6\nother: 1\n"
    new, old, value = set_yaml_mapping(text, "weights", {1: 0.0, 3: 1.0})
    assert new == "weights:  # per tier\n  1: 0.0  # easy\n  3: 1.0\nother: 1\n"
    assert (old, value) == ({1: 0.4, 3: 0.6}, {1: 0.0, 3: 1.0})
    assert yaml.safe_load(new)["other"] == 1
    with pytest.raises(TemplateError, match="no entry"):
        set_yaml_mapping(text, "weights", {2: 0.5})
    with pytest.raises(TemplateError, match="not a mapping"):
        set_yaml_mapping(text, "other", {1: 0.5})
