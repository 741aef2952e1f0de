"""A harness declares tunable constants of its reward and filter code as knobs, and the controller's
probes move them like trainer settings (read without importing, out of range a symptom, one move at a time).

The harness is the bundled program-synthesis example, whose reward declares its step budgets; its defective form
(`examples/synth-fn`) ships a per-test step limit of 12, below the declared safe range, so correct programs that
loop over a range fail as timeouts.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agent.decisions.knobs import harness_knobs
from agent.launch.preflight import check_backend
from agent.nodes.propose import probe_metrics
from agent.policies.explore import propose_probes, why_no_probe
from agent.policies.symptoms import SYMPTOMS, Abnormal
from harness.code_knobs import KNOBS_NAME, CodeKnobError, read_code_knobs, set_constant
from harness.manifest import Harness, load_harness
from skills.models import SkillSpec
from skills.patches import SkillPatchError, apply_skill

ROOT = Path(__file__).resolve().parents[2]
REWARD = "harness/reward.py"
GOOD = '''"""A reward."""
LIMIT = 12  # steps
SCALE: float = 0.5
EVOTRAINER_KNOBS = {
    "LIMIT": {"default": 100, "safe": [50, 1000],
              "up": {"factors": [4], "effects": ["pay_more_right"], "why": "slow right answers pass"}},
    "SCALE": {"default": 0.5, "safe": [0.1, 1.0],
              "down": {"factors": [0.5], "effects": ["pay_fewer_wrong"], "why": "partial credit pays less"}},
}


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return 0.0
'''


def _example(tmp_path: Path, name: str) -> Harness:
    shutil.copytree(ROOT / "examples" / name, tmp_path / name)
    return load_harness(tmp_path / name)


def test_declared_constants_are_read_without_importing_the_file() -> None:
    source = GOOD.replace("return 0.0", "raise SystemExit('imported')")  # importing it would exit
    limit, scale = read_code_knobs(source, REWARD, "@reward")
    assert (limit.spec.key, limit.spec.kind, limit.current, limit.in_range) == ("LIMIT", "int", 12.0, False)
    assert (scale.spec.kind, scale.current, scale.in_range) == ("float", 0.5, True)
    assert limit.spec.move("up") is not None and limit.spec.move("up").effects == ("pay_more_right",)  # type: ignore[union-attr]
    assert read_code_knobs('"""no knobs"""\nX = 1\n', REWARD, "@reward") == ()


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (('"LIMIT": {"default"', '"LIMT": {"default"'), "the knob LIMT is not assigned"),
        (("LIMIT = 12  # steps", "LIMIT = int('12')"), "int or float literal"),
        (("LIMIT = 12  # steps", "LIMIT = True"), "int or float literal"),
        (('"safe": [50, 1000]', '"safe": 50'), "'safe' must be [min, max]"),
        (('"default": 100', '"default": 5000'), "outside its safe range"),
        (('"effects": ["pay_more_right"]', '"effects": ["pay_more"]'), "effects"),
        (('"factors": [4]', '"factors": [0.5]'), "do not move up"),
        (('"why": "slow', '"wy": "slow'), "'up' must be a mapping"),
        (('"default": 100,', '"default": 100, "max": 3,'), "unknown field(s) ['max']"),
        (("EVOTRAINER_KNOBS = {", "EVOTRAINER_KNOBS = dict(**{"), "literal dict"),
    ],
)
def test_a_malformed_declaration_names_the_file_the_entry_and_the_fix(edit: tuple[str, str], named: str) -> None:
    old, new = edit
    assert old in GOOD
    source = GOOD.replace(old, new, 1)
    if new.startswith("EVOTRAINER_KNOBS = dict("):
        source = source.replace("\n}\n", "\n})\n", 1)
    with pytest.raises(CodeKnobError) as err:
        read_code_knobs(source, REWARD, "@reward")
    assert REWARD in str(err.value) and named in str(err.value) and "docs/harness.md" in str(err.value)


@pytest.mark.parametrize(
    "source", ["def f(:\n", "X = 1\0\n", "X = " + "(" * 300 + "1" + ")" * 300 + "\n", "X = " + "-" * 100_000 + "1\n"]
)
def test_a_file_that_does_not_parse_is_one_clear_error_never_a_crash(source: str) -> None:
    with pytest.raises(CodeKnobError, match=REWARD):
        read_code_knobs(source, REWARD, "@reward")
    with pytest.raises(CodeKnobError):
        set_constant(source, "X", 2)


def test_setting_a_constant_rewrites_only_its_literal() -> None:
    text, old, new = set_constant(GOOD, "LIMIT", 48.7)
    assert (old, new) == (12.0, 49.0) and "LIMIT = 49  # steps" in text  # an int constant stays an int
    assert text.replace("LIMIT = 49", "LIMIT = 12") == GOOD
    text, _, _ = set_constant(GOOD, "SCALE", 0.25)
    assert "SCALE: float = 0.25\n" in text
    with pytest.raises(CodeKnobError, match="is not assigned"):
        set_constant(GOOD, "MISSING", 1)


def test_an_out_of_range_constant_is_probed_back_to_its_default_without_a_stall(tmp_path: Path) -> None:
    harness = _example(tmp_path, "synth-fn")
    knobs = harness_knobs(harness, "local")
    step = next(k for k in knobs.code if k.spec.key == "STEP_LIMIT")
    assert (step.role, step.path, step.current, step.in_range) == ("@reward", REWARD, 12.0, False)
    metrics = probe_metrics({"strict_acc_delta": 0.2}, harness, knobs)  # held-out accuracy rising: no stall
    [probe] = propose_probes(knobs, metrics, tried=(), blocked={}, max_candidates=3, only=frozenset({"out_of_range"}))
    assert probe.factor == "reward" and probe.probe is not None and probe.probe.probe_id == "reward:STEP_LIMIT:default"
    assert "STEP_LIMIT in harness/reward.py from 12 back to its documented default 2000" in probe.hypothesis
    applied = apply_skill(probe.skill, harness.root, harness)
    assert applied.files == (REWARD,)
    source = harness.path(REWARD).read_text()
    assert "STEP_LIMIT = 2000  # interpreter steps per test case" in source
    assert f"{KNOBS_NAME} = {{" in source  # the declaration is untouched


def test_a_reward_knob_answers_the_disagreement_its_effect_names(tmp_path: Path) -> None:
    harness = _example(tmp_path, "synth-fn-oracle")  # every declared constant in range
    knobs = harness_knobs(harness, "local")
    metrics = probe_metrics({"strict_acc_delta": 0.0, "unrewarded_correct_rate": 0.4}, harness, knobs)
    probes = propose_probes(knobs, metrics, tried=(), blocked={}, max_candidates=5)
    reward = [p for p in probes if p.factor == "reward"]
    assert reward and all(p.probe is not None and "reward_misses_right" in p.probe.symptoms for p in reward)
    first = reward[0]
    assert first.probe is not None and first.probe.probe_id == "reward:STEP_LIMIT:up:m0"
    apply_skill(first.skill, harness.root, harness)
    assert "STEP_LIMIT = 8000  # interpreter steps per test case" in harness.path(REWARD).read_text()
    # the other way round: a reward that pays wrong programs has no knob here that pays fewer of them
    pays_wrong = [Abnormal(s, ("rewarded_wrong_rate > 0.3 (0.9)",)) for s in SYMPTOMS if s.name == "reward_pays_wrong"]
    gap = why_no_probe(knobs, metrics, pays_wrong, tried=(), blocked={})
    assert "pay_fewer_wrong" in gap and "EVOTRAINER_KNOBS" in gap


def test_a_skill_learned_from_a_code_knob_applies_only_where_the_knob_is_declared(tmp_path: Path) -> None:
    spec = SkillSpec(
        name="probe-step-limit-up", domain="*", trigger="unrewarded_correct_rate > 0.2", factor="reward",
        patch_kind="template",
        patch='[{"op": "set_constant", "file": "@reward", "name": "STEP_LIMIT", "value": "{{ current * 4 }}"}]',
        expected_outcome="more right programs are paid", validation_rule="pilot", provenance="test",
    )  # fmt: skip
    apply_skill(spec, tmp_path / "synth-fn-oracle", _example(tmp_path, "synth-fn-oracle"))
    arithmetic = _example(tmp_path, "arithmetic")  # its reward declares no knob
    with pytest.raises(SkillPatchError, match="declares no knob 'STEP_LIMIT'"):
        apply_skill(spec, arithmetic.root, arithmetic)


def test_the_session_start_refuses_a_malformed_declaration_in_the_users_harness(tmp_path: Path) -> None:
    harness = _example(tmp_path, "synth-fn-oracle")
    reward = harness.path(REWARD)
    reward.write_text(reward.read_text().replace('"safe": [200, 20000]', '"safe": [200]', 1))
    with pytest.raises(ValueError, match=r"synth-fn-oracle/harness/reward.py: EVOTRAINER_KNOBS\['STEP_LIMIT'\]"):
        check_backend("local", harness.root)
    # a candidate's malformed declaration never stops the session: its knobs are skipped
    assert not [k for k in harness_knobs(harness, "local").code if k.spec.key == "STEP_LIMIT"]
