"""A reward that pays wrong programs and never reads its reference answer gets the candidate that does.

The evidence is real: programs scored by the synth-shown-tests scenario's own reward (it runs the examples the
prompt shows, so a lookup table of them is paid in full) and strict-scored by its oracle's reward, read back by
the health report's own code. The rule reads the code (the reference parameter passed on and ignored) and the
report (strict-wrong responses paid), never the scenario's name.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from scenario_cache import scenario_dir
from synth_evidence import REWARD, SHOWN_INPUTS, Problem, score_fn, write_run

from agent.decisions.knobs import harness_knobs
from agent.nodes.common import run_table
from agent.nodes.propose import probe_metrics
from agent.policies.alert_aims import critical_alerts
from agent.policies.explore import propose_probes
from diagnostics.report import build_report
from harness.code_reference import CodeReferenceError, reference_use, substitute_reference
from harness.manifest import Harness, load_harness
from skills.models import SkillSpec
from skills.patches import SkillPatchError, apply_skill


def _problems() -> list[Problem]:
    """Each group: a right program, two lookups of the shown examples (paid, strict-wrong), a wrong program."""
    out: list[Problem] = []
    for k in range(3, 9):
        for c in (0, 1):
            table = ",".join(str(x % k + c) for x in SHOWN_INPUTS)
            out.append(("synth/mod", f"mod-{k}-{c}", lambda x, k=k, c=c: x % k + c,
                        [f"x%{k}+{c}", f"[{table}][x]", f"[{table}][x%6]", f"x*{k}"]))  # fmt: skip
    return out


@pytest.fixture
def shown(tmp_path: Path) -> tuple[Harness, Path]:
    shutil.copytree(scenario_dir("synth-shown-tests", "defective"), tmp_path / "h")
    run_dir = tmp_path / "run"
    write_run(run_dir, tmp_path / "h", scenario_dir("synth-shown-tests", "oracle"), _problems())
    return load_harness(tmp_path / "h"), run_dir


def test_the_reward_that_ignores_its_reference_is_made_to_read_it(shown: tuple[Harness, Path]) -> None:
    harness, run_dir = shown
    knobs = harness_knobs(harness, "local", run_table(run_dir, harness.manifest.answer).train)
    assert knobs.reference is not None and not knobs.reference.read
    assert knobs.reference.ignored_in == ("test_cases",)
    report = build_report(run_dir)
    metrics = probe_metrics(report.metrics, harness, knobs)
    [alert] = [a for a in critical_alerts(report.findings, metrics) if a.alert_id == "score.rewarded_wrong"]
    ranked = propose_probes(knobs, metrics, tried=(), blocked={}, max_candidates=3,
                            only=frozenset(s.name for s in alert.symptoms), evidence=alert.as_evidence())  # fmt: skip
    ids = [p.probe.probe_id for p in ranked if p.probe]
    assert ids[:2] == ["reward:reference:test_cases:public_tests", "reward:reference:test_cases:prompt"]
    assert [p.skill.name for p in ranked[:2]] == ["probe-reward-reads-public-tests", "probe-reward-reads-prompt"]
    first = ranked[0]
    assert first.probe is not None and {"reference_unread", "reward_pays_wrong"} <= set(first.probe.symptoms)
    assert "never reads its reference answer (ground_truth)" in first.hypothesis

    apply_skill(first.skill, harness.root, harness)
    after = score_fn(harness.root)
    truth, extra = "6>1;9>1;13>2", {"public_tests": "0>1;1>2;2>3;3>1;4>2;5>3"}
    assert after("synth/mod", "[1,2,3,1,2,3][x]", truth, extra)["score"] == 0.0  # the lookup is no longer paid
    assert after("synth/mod", "x%3+1", truth, extra)["score"] == 1.0
    assert reference_use(harness.path(REWARD).read_text(), "compute_score").read


def test_no_probe_where_the_reward_reads_its_reference_or_pays_no_wrong_answer(shown: tuple[Harness, Path]) -> None:
    harness, run_dir = shown
    rows = run_table(run_dir, harness.manifest.answer).train
    knobs = harness_knobs(harness, "local", rows)
    calm = probe_metrics({"rewarded_wrong_rate": 0.25}, harness, knobs)  # a warning, not critical
    assert not [p for p in propose_probes(knobs, calm, tried=(), blocked={}, max_candidates=9)
                if p.probe and p.probe.probe_id.startswith("reward:reference")]  # fmt: skip
    for example in ("synth-fn-oracle", "arithmetic", "lookup-agent"):
        root = Path(__file__).resolve().parents[2] / "examples" / example
        assert reference_use((root / REWARD).read_text(), "compute_score").read, example


def test_a_learned_reference_skill_applies_only_where_that_place_is(tmp_path: Path) -> None:
    spec = SkillSpec(
        name="learned-read-reference", domain="*", trigger="rewarded_wrong_rate > 0.3", factor="reward",
        patch_kind="template",
        patch='[{"op": "read_reference", "file": "@reward", "function": "test_cases", "key": "public_tests"}]',
        expected_outcome="lookups are not paid", validation_rule="pilot", provenance="test",
    )  # fmt: skip
    shutil.copytree(scenario_dir("synth-shown-tests", "oracle"), tmp_path / "oracle")
    oracle = load_harness(tmp_path / "oracle")
    with pytest.raises(SkillPatchError, match="no read of extra_info"):
        apply_skill(spec, oracle.root, oracle)


@pytest.mark.parametrize(
    ("source", "read", "keys"),
    [
        ("def f(d, s, gt, e):\n    return float(s == gt)\n", True, []),
        ("def f(d, s, gt, e):\n    return float(s == e['answer'])\n", False, ["answer"]),
        (
            "def f(d, s, gt, e=None):\n    return g(s, e or {}, ref=gt)\n\n\ndef g(s, extra, ref):\n"
            "    return float(s == extra.get('cached'))\n",
            False,
            ["cached"],
        ),
        ("def f(d, s, gt, e):\n    return g(gt, e)\n\n\ndef g(x, e):\n    return float(len(x) > 0)\n", True, []),
        ("def f(d, s, gt, e):\n    print(gt)\n    return g(gt, e)\n\n\ndef g(x, e):\n    return e['a']\n", True, ["a"]),
    ],
)
def test_how_the_reference_is_traced(source: str, read: bool, keys: list[str]) -> None:
    use = reference_use(source, "f")
    assert use.read is read and [s.key for s in use.substitutions] == keys
    for sub in use.substitutions if not read else []:
        new, _ = substitute_reference(source, "f", sub.function, sub.key)
        assert reference_use(new, "f").read
    with pytest.raises(CodeReferenceError, match="no reference parameter"):
        reference_use("def f(a, b):\n    return 0\n", "f")
    with pytest.raises(CodeReferenceError, match="cannot be parsed"):
        reference_use("def f(:\n", "f")
    deep = "+".join(["s"] * 2000)  # parses, too deep for recursive walks: traced all the same
    traced = reference_use(f"def f(d, s, gt, e):\n    return g(gt, e)\n\n\ndef g(x, s):\n    return {deep}\n", "f")
    assert traced.ignored_in == ("g",) and not traced.read
