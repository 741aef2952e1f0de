"""Seed skills apply to a copy of examples/arithmetic and produce single-factor candidates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scenario_cache import scenario_dir

from agent.decisions.factors import check_candidate
from harness.manifest import load_harness
from sandboxes import git_worktree as gw
from sandboxes import worktree_files as wf
from skills.context import filter_is_noop, length_terms, trigger_context
from skills.models import SkillSpec
from skills.patches import GuardSkillError, SkillPatchError, apply_skill
from skills.seeds import SEED_SKILLS
from trainer_backend.local.config import load_data_weights, load_trainer_config

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "arithmetic"
ORACLE = ROOT / "examples" / "arithmetic-oracle"
SEEDS = {s.name: s for s in SEED_SKILLS}
pytestmark = pytest.mark.usefixtures("git_available")


def _candidate(source: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A session repo of `source` with one open candidate worktree; returns (candidate, harness)."""
    repo = gw.init_session_repo(source, tmp_path / "repo")
    main = gw.create_session_branch(repo, "s1")
    harness = load_harness(tmp_path / "repo")
    return gw.create_candidate(repo, "s1", 0, 1, "skill", main, tmp_path / "wt"), harness


@pytest.fixture
def cand(tmp_path: Path):  # type: ignore[no-untyped-def]
    return _candidate(DEMO, tmp_path)


def _load(path: Path) -> dict:  # type: ignore[type-arg]
    ns: dict = {}  # type: ignore[type-arg]
    exec(compile(path.read_text(), str(path), "exec"), ns)  # test-only: the seed's own reward file
    return ns


@pytest.mark.parametrize(
    ("name", "factor", "files"),
    [
        ("strict-answer-extraction", "reward", ["harness/reward.py"]),
        ("raise-length-budget", "trainer", ["harness/trainer.yaml"]),
        ("std-group-filter", "filter", ["harness/filters.py"]),
        ("dense-auxiliary-reward", "reward", ["harness/reward.py"]),
    ],
)
def test_seed_patch_applies_as_a_single_factor_candidate(cand, name: str, factor: str, files: list[str]) -> None:  # type: ignore[no-untyped-def]
    c, harness = cand
    applied = apply_skill(SEEDS[name], c.path, harness)
    assert list(applied.files) == files
    changed = wf.changed_files(c.path, c.base_sha)
    check = check_candidate(changed, wf.diff(c.path, c.base_sha), harness, [factor], "")
    assert changed == files and check.ok and check.factors == (factor,), check.reason


def test_length_budget_template_doubles_to_the_floor(cand) -> None:  # type: ignore[no-untyped-def]
    c, harness = cand
    applied = apply_skill(SEEDS["raise-length-budget"], c.path, harness)
    assert applied.notes == ("harness/trainer.yaml: max_new_tokens 16 -> 64",)
    text = (c.path / "harness/trainer.yaml").read_text()
    assert "max_new_tokens: 64  # DEFECT" in text
    check = check_candidate(["harness/trainer.yaml"], wf.diff(c.path, c.base_sha), harness)
    assert check.trainer_keys == ("max_new_tokens",) and check.length_budget
    apply_skill(SEEDS["raise-length-budget"], c.path, harness, params={"max_tokens": 100})
    assert "max_new_tokens: 100" in (c.path / "harness/trainer.yaml").read_text()  # min(128, 100)


def test_strict_reward_matches_the_oracle_on_spam_and_answers(cand) -> None:  # type: ignore[no-untyped-def]
    c, harness = cand
    apply_skill(SEEDS["strict-answer-extraction"], c.path, harness)
    ours = _load(c.path / "harness/reward.py")["compute_score"]
    oracle = _load(ORACLE / "harness/reward.py")["compute_score"]
    lenient = _load(DEMO / "harness/reward.py")["compute_score"]
    responses = [
        "7*3=21;12+21=33<ans>33</ans>",  # correct
        "7*3=21;12+21=33<ans>33</ans>1;33;45",  # rambling after the answer
        "33 34 35 36 37",  # number spam, untagged
        "<ans>32</ans><ans>33</ans>",  # several answers
        "12+21=34<ans>34</ans>",  # wrong
    ]
    for r in responses:
        assert ours("arithmetic/level4", r, "33")["score"] == oracle("arithmetic/level4", r, "33")["score"], r
    assert lenient("arithmetic/level4", responses[2], "33")["score"] == 1.0  # the defect the skill fixes
    assert ours("arithmetic/level4", responses[2], "33")["score"] == 0.0


def test_std_group_filter_replaces_the_noop_filter(cand) -> None:  # type: ignore[no-untyped-def]
    c, harness = cand
    before = (c.path / "harness/filters.py").read_text()
    assert filter_is_noop(before)
    apply_skill(SEEDS["std-group-filter"], c.path, harness)
    source = (c.path / "harness/filters.py").read_text()
    assert not filter_is_noop(source)
    filter_groups = _load(c.path / "harness/filters.py")["filter_groups"]
    state: dict = {}  # type: ignore[type-arg]
    keep = filter_groups([[1.0] * 8, [0.0, 1.0] * 4, [0.0] * 8, [0.0, 0.5] * 4], state)
    assert keep == [False, True, False, True] and state["groups_seen"] == 4
    json.dumps(state)  # the trainer persists it as JSON


# Per-source health metrics of a real 12-step run of the demo with the strict reward and 48 tokens.
SOURCE_METRICS = {
    "dead_group_ratio": 0.63,
    "dead_source_share": 0.78,
    "truncation_rate": 0.0,
    "reward_hacking": 0.0,
}
for _n, (_groups, _dead) in enumerate([(73.0, 0.53), (17.0, 0.65), (21.0, 0.19), (22.0, 0.36), (59.0, 1.0)], start=1):
    SOURCE_METRICS[f"source_groups/arithmetic/level{_n}"] = _groups
    SOURCE_METRICS[f"source_dead_ratio/arithmetic/level{_n}"] = _dead


def test_data_mix_skill_is_a_single_data_factor_the_trainer_loads(cand) -> None:  # type: ignore[no-untyped-def]
    c, harness = cand
    applied = apply_skill(SEEDS["learnable-data-mix"], c.path, harness, metrics=SOURCE_METRICS)
    changed = wf.changed_files(c.path, c.base_sha)
    check = check_candidate(changed, wf.diff(c.path, c.base_sha), harness, ["data"], "")
    assert changed == list(applied.files) == ["harness/data.yaml"]
    assert check.ok and check.factors == ("data",), check.reason
    cfg = load_trainer_config(c.path / harness.manifest.trainer.config)
    assert cfg.data_selection == "harness/data.yaml"
    weights = load_data_weights(c.path / cfg.data_selection)
    assert weights == {f"arithmetic/level{n}": w for n, w in enumerate((0.0, 0.0, 0.5, 0.5, 0.0), start=1)}
    assert "# DEFECT (bad mix)" in (c.path / "harness/data.yaml").read_text()  # comments kept
    with pytest.raises(SkillPatchError, match="no per-source table"):
        apply_skill(SEEDS["learnable-data-mix"], c.path, harness)  # evidence is required


def test_context_flags_the_demo_defects() -> None:
    ctx = trigger_context(
        "math", (DEMO / "harness/reward.py").read_text(), (DEMO / "harness/filters.py").read_text(), [0.0, 0.1, 1.0]
    )
    assert ctx == {
        "domain": "math",
        "candidate_reward_length_term": 1,
        "filter_present": 0,
        "reward_discrete": 1,
        "candidate_reward_action_count_term": 0,  # the demo's reward pays no tool calls
        "filter_drops_marked": 0,  # nor does its filter read trajectory marks
    }
    assert length_terms((DEMO / "harness/reward.py").read_text()) == ["0.1 * len(numbers)"]
    oracle = trigger_context(
        "math", (ORACLE / "harness/reward.py").read_text(), (ORACLE / "harness/filters.py").read_text()
    )
    assert oracle == {
        "domain": "math",
        "candidate_reward_length_term": 0,
        "filter_present": 1,
        "candidate_reward_action_count_term": 0,
        "filter_drops_marked": 0,
    }


def test_guard_and_off_surface_templates_are_refused_before_writing(cand) -> None:  # type: ignore[no-untyped-def]
    c, harness = cand
    with pytest.raises(GuardSkillError):
        apply_skill(SEEDS["never-reward-brevity"], c.path, harness)
    evil = SkillSpec(
        name="evil",
        domain="math",
        trigger="dead_group_ratio > 0",
        factor="reward",
        patch_kind="template",
        patch=json.dumps(
            [
                {"op": "replace_file", "file": "@reward", "content": "x = 1\n"},
                {"op": "replace_file", "file": "eval/strict.py", "content": "def score(s, g):\n    return 1.0\n"},
            ]
        ),
        expected_outcome="x",
        validation_rule="y",
    )
    with pytest.raises(gw.SurfaceError, match=r"eval/strict\.py"):
        apply_skill(evil, c.path, harness)
    assert wf.changed_files(c.path, c.base_sha) == []  # nothing was written, not even the reward
    missing_key = SEEDS["raise-length-budget"].model_copy(
        update={"patch": json.dumps([{"op": "set_yaml_key", "file": "@trainer_config", "key": "nope", "value": 1}])}
    )
    with pytest.raises(SkillPatchError, match="nope"):
        apply_skill(missing_key, c.path, harness)


def test_stabilise_updates_cuts_the_lr_and_restores_the_clip_range_of_the_unstable_scenario(tmp_path: Path) -> None:
    source = scenario_dir("unstable-optimiser", "defective")
    c, harness = _candidate(source, tmp_path)
    before = load_trainer_config(c.path / "harness" / "trainer.yaml")
    apply_skill(SEEDS["stabilise-policy-updates"], c.path, harness)
    after = load_trainer_config(c.path / "harness" / "trainer.yaml")
    assert after.lr == pytest.approx(before.lr / 10)
    assert (after.clip_low, after.clip_high) == (0.2, 0.28) and (before.clip_low, before.clip_high) == (0.9, 10.0)
    changed = wf.changed_files(c.path, c.base_sha)
    check = check_candidate(changed, wf.diff(c.path, c.base_sha), harness, ["trainer"], "")
    assert changed == ["harness/trainer.yaml"] and check.ok and check.factors == ("trainer",), check.reason


def test_data_mix_finds_a_leaked_level_through_the_training_file_not_its_name(tmp_path: Path) -> None:
    """train-leak scenario: level 6 draws `arithmetic/annotated`; its groups are mostly dead (copied answers)."""
    source = scenario_dir("train-leak", "defective")
    c, harness = _candidate(source, tmp_path)
    # The v0 report of benchmarks/run_scenarios.py's train-leak session (40 steps, seed 0).
    metrics = {"source_dead_ratio/arithmetic/annotated": 0.759, "source_groups/arithmetic/annotated": 315.0}
    for level, ratio, n in ((2, 0.47, 100), (3, 0.163, 98), (4, 0.283, 127)):
        metrics |= {f"source_dead_ratio/arithmetic/level{level}": ratio, f"source_groups/arithmetic/level{level}": n}
    apply_skill(SEEDS["learnable-data-mix"], c.path, harness, metrics=metrics)
    weights = load_data_weights(c.path / "harness" / "data.yaml")
    assert weights is not None and weights["arithmetic/annotated"] == 0, weights
    assert all(weights[f"arithmetic/level{k}"] > 0 for k in (2, 3, 4)), weights
