"""Each agentic benchmark scenario is two valid harnesses differing in ONE factor, built by its
generator, and each defect does what its scenario.json says (checked on the reward and the trainer settings,
without training).
"""

from __future__ import annotations

import difflib
import json
import shutil
from pathlib import Path

import make_agentic_scenarios
import pytest
from scenario_cache import scenario_dir

from harness.calls import load_function
from harness.manifest import load_harness
from trainer_backend.local.config import load_trainer_config
from trainer_backend.local.vocab import tokenizer_for

ROOT = Path(__file__).resolve().parents[2]
NAMES = ["env-episode-leak", "env-lookup-limit", "one-turn-collapse", "tool-spam", "turn-budget", "turn-token-cap"]
FACTOR_FILE = {"reward": "harness/reward.py", "trainer": "harness/trainer.yaml", "env": "harness/env.py"}

# Trajectories of the level-2 prompt `c+f=>` (table c=3, f=5; ground truth 8), as the local backend writes them.
RIGHT = "<call>lookup c</call><obs>3</obs><call>lookup f</call><obs>5</obs>3+5=8<ans>8</ans>"
GUESS = "<ans>7</ans>"  # one turn, no lookup, wrong
LUCKY = "<ans>8</ans>"  # one turn, no lookup, right by chance
SPAM = "".join(f"<call>lookup {k}</call><obs>{v}</obs>" for k, v in zip("cfabcf", "351235", strict=True))


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def _score(folder: Path, trajectory: str, ground_truth: str = "8") -> float:
    harness = load_harness(folder)
    reward = load_function(harness.root, harness.reward)
    calls = trajectory.count("</call>")
    extra = {"num_turns": calls + (0 if trajectory.endswith("</obs>") else 1), "tool_calls": calls}
    out = reward("lookup/level2", trajectory, ground_truth, extra)
    return float(out["score"] if isinstance(out, dict) else out)


def _trainer(folder: Path):  # type: ignore[no-untyped-def]
    harness = load_harness(folder)
    settings = harness.manifest.trainer.settings("local")
    assert settings is not None
    return load_trainer_config(harness.path(settings))


def test_the_generator_writes_its_agentic_scenarios_as_the_cache_builds_them(tmp_path: Path) -> None:
    make_agentic_scenarios.main(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == NAMES
    for name in NAMES:
        fresh, built = _files(tmp_path / name), _files(scenario_dir(name))
        assert fresh.keys() == built.keys(), name
        assert [path for path in fresh if fresh[path] != built[path]] == [], name


@pytest.mark.parametrize("name", NAMES)
def test_agentic_scenario_is_two_valid_harnesses_differing_in_one_factor(name: str) -> None:
    defective, oracle = scenario_dir(name, "defective"), scenario_dir(name, "oracle")
    meta = json.loads((scenario_dir(name) / "scenario.json").read_text())
    assert meta["name"] == name
    for folder in (defective, oracle):
        harness = load_harness(folder)
        assert harness.manifest.env is not None and [t.name for t in harness.manifest.env.tools] == ["lookup"]
        assert harness.manifest.name == "lookup-agent"  # the name never tells the forms apart
        _trainer(folder)  # the trainer settings validate in both forms
    a, b = _files(defective), _files(oracle)
    assert a.keys() == b.keys()
    differ = [path for path in a if a[path] != b[path]]
    assert differ == [FACTOR_FILE[meta["factor"]]]
    assert load_harness(defective).is_editable(differ[0])
    text = a[differ[0]].decode().lower()
    assert "defect" not in text and "fixed form" not in text and "oracle" not in text  # evidence, not a note


def test_oracle_reward_pays_only_a_looked_up_right_answer() -> None:
    oracle = scenario_dir("one-turn-collapse", "oracle")
    assert _score(oracle, RIGHT) == 1.0
    assert _score(oracle, GUESS) == _score(oracle, LUCKY) == _score(oracle, SPAM) == 0.0


def test_efficiency_reward_pays_a_one_turn_guess_over_a_looked_up_right_answer() -> None:
    defective = scenario_dir("one-turn-collapse", "defective")
    assert _score(defective, GUESS) > _score(defective, RIGHT) > 0.0


def test_tool_credit_pays_calling_to_the_turn_cap_over_answering_right() -> None:
    defective = scenario_dir("tool-spam", "defective")
    assert _score(defective, SPAM) > _score(defective, RIGHT) > _score(defective, GUESS) == 0.0
    # a call earns more than a right answer: at the cap, one more call beats answering in the last turn
    five_then_right = SPAM.rsplit("<call>", 1)[0] + "3+5=8<ans>8</ans>"
    assert _score(defective, SPAM) > _score(defective, five_then_right) > _score(defective, RIGHT)


def test_turn_budget_cuts_level_three_only_in_the_defective_form() -> None:
    needed = 3 + 1  # level 3: three lookups, then the answer turn
    assert _trainer(scenario_dir("turn-budget", "defective")).max_turns < needed
    assert _trainer(scenario_dir("turn-budget", "oracle")).max_turns >= needed


def _episode(folder: Path, keys: str) -> list[object]:
    """What the scenario's environment answers to a lookup of each key in turn, until it ends the episode."""
    harness = load_harness(folder)
    assert harness.env is not None
    env = load_function(harness.root, harness.env)({"table": dict(zip("abcdefgh", range(8), strict=True))})
    out: list[object] = []
    for key in keys:
        result = env.call("lookup", {"key": key})
        out.append(result)
        if isinstance(result, dict) and result.get("done"):
            break
    return out


def test_env_lookup_limit_ends_level_three_episodes_only_in_the_defective_form() -> None:
    refused = {"result": "no lookup", "success": False, "done": True}
    assert _episode(scenario_dir("env-lookup-limit", "defective"), "cfh") == ["2", "5", refused]
    assert _episode(scenario_dir("env-lookup-limit", "oracle"), "cfhab") == ["2", "5", "7", "0", "1"]


def test_env_lookup_limit_is_probed_back_to_its_declared_default_as_an_env_factor(tmp_path: Path) -> None:
    # The environment declares MAX_LOOKUPS a knob (safe 4-64): at 2 it is out of range, a symptom of its own, and
    # the probe that moves it back is an `env` candidate that changes that constant and nothing else.
    from agent.decisions.factors import check_candidate
    from agent.decisions.knobs import harness_knobs, range_restoration
    from agent.nodes.propose import probe_metrics
    from agent.policies.explore import propose_probes
    from skills.patches import apply_skill

    work = tmp_path / "h"
    shutil.copytree(scenario_dir("env-lookup-limit", "defective"), work)
    harness = load_harness(work)
    knobs = harness_knobs(harness, "local")
    env_knobs = [k for k in knobs.code if k.role == "@env"]
    assert [(k.spec.key, k.current, k.in_range) for k in env_knobs] == [("MAX_LOOKUPS", 2.0, False)]
    metrics = probe_metrics({"strict_acc_delta": 0.10}, harness, knobs)  # no stall: a range is enough
    props = propose_probes(knobs, metrics, tried=(), blocked={}, max_candidates=2)
    probe = props[0].probe
    assert probe is not None and probe.probe_id == "env:MAX_LOOKUPS:default" and props[0].skill.factor == "env"
    before = (work / "harness" / "env.py").read_text()
    parent = tmp_path / "parent"
    shutil.copytree(work, parent)
    apply_skill(props[0].skill, work, harness)
    after = (work / "harness" / "env.py").read_text()
    assert after == before.replace("MAX_LOOKUPS = 2\n", "MAX_LOOKUPS = 8\n")
    assert _episode(work, "cfh")[-1] == "7"
    lines = difflib.unified_diff(
        before.splitlines(), after.splitlines(), "a/harness/env.py", "b/harness/env.py", lineterm=""
    )
    diff = "diff --git a/harness/env.py b/harness/env.py\n" + "\n".join(lines) + "\n"
    verdict = check_candidate(["harness/env.py"], diff, harness, declared_factors=["env"])
    assert verdict.ok and verdict.factors == ("env",), verdict.reason
    assert range_restoration(load_harness(parent), load_harness(work), "local", ["harness/env.py"]) == ("MAX_LOOKUPS",)


def _turn_tokens(folder: Path, text: str) -> int:
    """Tokens of one policy turn as the local backend generates it (an answer turn ends with EOS)."""
    harness = load_harness(folder)
    tok = tokenizer_for(harness, _trainer(folder).warmstart_data, None)
    return len(tok.encode(text)) + (0 if text.endswith("</call>") else 1)


def test_turn_token_cap_fits_a_call_but_cuts_long_answer_turns_only_in_the_defective_form() -> None:
    defective, oracle = scenario_dir("turn-token-cap", "defective"), scenario_dir("turn-token-cap", "oracle")
    cap = _trainer(defective).max_turn_tokens
    for fits in ("<call>lookup h</call>", "<ans>8</ans>", "6+3=9<ans>9</ans>"):  # a call, short answer turns
        assert _turn_tokens(defective, fits) <= cap, fits
    for cut in ("6+4=10<ans>10</ans>", "1+2+3=6<ans>6</ans>"):  # a two-digit sum, the shortest level-3 turn
        assert _turn_tokens(defective, cut) > cap, cut
    assert _turn_tokens(oracle, "9+9+9=27<ans>27</ans>") <= _trainer(oracle).max_turn_tokens


def test_each_named_seed_skill_exists_and_fits_the_scenarios_factor() -> None:
    from skills.seeds import SEED_SKILLS

    seeds = {s.name: s for s in SEED_SKILLS}
    named = {}
    for name in NAMES:
        meta = json.loads((scenario_dir(name) / "scenario.json").read_text())
        if meta["seed_skill"] is not None:
            assert meta["seed_skill"] in seeds, (name, meta["seed_skill"])
            assert seeds[meta["seed_skill"]].factor in (meta["factor"], "guard"), name  # a guard refuses the defect
            named[name] = meta["seed_skill"]
    assert named == {"one-turn-collapse": "never-reward-brevity", "turn-budget": "raise-turn-budget",
                     "tool-spam": "confirmed-behaviour-reward", "turn-token-cap": "raise-length-budget"}  # fmt: skip


def test_a_stalled_run_cut_at_the_turn_token_cap_probes_a_longer_turn_budget(tmp_path: Path) -> None:
    # The v0 run of turn-token-cap (seed 0): half the held-out episodes stop at the per-turn cap, and held-out
    # accuracy stalls. The response cap of single-turn runs (max_new_tokens) is no knob of an agentic harness.
    from agent.decisions.knobs import harness_knobs
    from agent.nodes.propose import probe_metrics
    from agent.policies.explore import propose_probes
    from skills.patches import apply_skill

    work = tmp_path / "h"
    shutil.copytree(scenario_dir("turn-token-cap", "defective"), work)
    harness = load_harness(work)
    knobs = harness_knobs(harness, "local")
    keys = {k.spec.key for k in knobs.trainer}
    assert "max_turn_tokens" in keys and "max_new_tokens" not in keys
    metrics = probe_metrics({"strict_acc_delta": -0.007, "truncation_rate": 0.49}, harness, knobs)
    props = propose_probes(knobs, metrics, tried=(), blocked={}, max_candidates=3)
    assert props and props[0].probe is not None and props[0].probe.probe_id.startswith("trainer:max_turn_tokens:up")
    apply_skill(props[0].skill, work, harness)
    assert _trainer(work).max_turn_tokens >= _turn_tokens(work, "9+9+9=27<ans>27</ans>")
    single = harness_knobs(load_harness(ROOT / "examples" / "arithmetic"), "local")
    assert "max_new_tokens" in {k.spec.key for k in single.trainer}
    assert "max_turn_tokens" not in {k.spec.key for k in single.trainer}


def test_the_length_budget_skill_raises_the_cap_that_cuts_the_run(tmp_path: Path) -> None:
    # On an agentic harness the per-turn budget cuts the answer turns; single-turn runs are cut at max_new_tokens.
    from skills.patches import apply_skill
    from skills.seeds import SEED_SKILLS
    from trainer_backend.knobs import declared_knobs
    from trainer_backend.local.config import LocalTrainerConfig
    from trainer_backend.local.plugin import LENGTH_CAPS

    caps = {k.episodes: (k.key, k.default) for k in declared_knobs(LocalTrainerConfig) if k.move("up") and
            "longer_responses" in k.move("up").effects}  # type: ignore[union-attr]  # fmt: skip
    assert caps == LENGTH_CAPS
    skill = next(s for s in SEED_SKILLS if s.name == "raise-length-budget")
    agentic = tmp_path / "agentic"
    shutil.copytree(scenario_dir("turn-token-cap", "defective"), agentic)
    before = _trainer(agentic).max_new_tokens
    apply_skill(skill, agentic, load_harness(agentic))
    assert _trainer(agentic).max_turn_tokens >= _turn_tokens(agentic, "9+9+9=27<ans>27</ans>")
    assert _trainer(agentic).max_new_tokens == before
    single = tmp_path / "single"
    shutil.copytree(ROOT / "examples" / "arithmetic", single)
    harness = load_harness(single)
    old = load_trainer_config(harness.path(harness.manifest.trainer.settings("local") or "")).max_new_tokens
    apply_skill(skill, single, harness)
    assert load_trainer_config(single / "harness" / "trainer.yaml").max_new_tokens > old
