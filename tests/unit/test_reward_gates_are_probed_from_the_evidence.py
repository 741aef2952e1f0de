"""A gate of the reward's code that fails strict-right responses is found from the evidence and dropped.

The run is real evidence: programs scored by the synth-format-gate scenario's own reward (a character check that
pays 0 to any program with `%`, a call or a subscript) and, as the strict score, by its oracle's reward (what the
protected evaluator computes), written as rollouts and read back by the health report's own code. Nothing names
the scenario: the rule reads the gate's payout and the failed strict-right rollouts.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from scenario_cache import scenario_dir
from synth_evidence import REWARD, Problem, score_fn, write_run

from agent.decisions.knobs import harness_knobs
from agent.decisions.reward_gates import gate_evidence
from agent.nodes.common import run_table
from agent.nodes.propose import probe_metrics
from agent.policies.alert_aims import critical_alerts
from agent.policies.explore import propose_probes
from diagnostics.report import build_report
from harness.code_gates import GateError, drop_gate, reward_gates
from harness.manifest import Harness, load_harness
from skills.models import SkillSpec
from skills.patches import SkillPatchError, apply_skill


def _problems() -> list[Problem]:
    """The mod family's right programs need `%` (the gate stops them); the affine family's do not."""
    out: list[Problem] = []
    for k in range(3, 9):
        for c in (0, 1):
            out.append(("synth/mod", f"mod-{k}-{c}", lambda x, k=k, c=c: x % k + c,
                        [f"x%{k}+{c}", f"(x%{k})+{c}", f"x+{c}", f"x*{k}"]))  # fmt: skip
    for c in range(1, 7):
        out.append(("synth/affine", f"affine-{c}", lambda x, c=c: x + c, [f"x+{c}", f"x*{c}", "x", f"x-{c}"]))
    return out


@pytest.fixture
def gated(tmp_path: Path) -> tuple[Harness, Path]:
    shutil.copytree(scenario_dir("synth-format-gate", "defective"), tmp_path / "h")
    run_dir = tmp_path / "run"
    write_run(run_dir, tmp_path / "h", scenario_dir("synth-format-gate", "oracle"), _problems())
    return load_harness(tmp_path / "h"), run_dir


def test_the_gate_that_fails_the_right_programs_is_the_first_probe_for_the_alert(gated: tuple[Harness, Path]) -> None:
    harness, run_dir = gated
    rows = run_table(run_dir, harness.manifest.answer).train
    knobs = harness_knobs(harness, "local", rows)
    [ev] = knobs.gates
    assert ev.failed_right == ev.explained == 2 * 24  # both steps: the 24 right `%` programs, all at the gate's payout
    report = build_report(run_dir)
    metrics = probe_metrics(report.metrics, harness, knobs)
    [alert] = [a for a in critical_alerts(report.findings, metrics) if a.alert_id == "score.unrewarded_correct"]
    only = frozenset(s.name for s in alert.symptoms)
    first = propose_probes(knobs, metrics, tried=(), blocked={}, max_candidates=3, only=only,
                           evidence=alert.as_evidence())[0]  # fmt: skip
    assert first.probe is not None and first.probe.probe_id == f"reward:gate:{ev.gate.id}"
    assert "gate_fails_right" in first.probe.symptoms and "reward_misses_right" in first.probe.symptoms
    assert "48 of the 48 strict-right responses the reward fails" in first.hypothesis
    # Proposed without a stall: the evidence names the gate.
    unprompted = propose_probes(knobs, {**metrics, "strict_acc_delta": 0.3}, tried=(), blocked={}, max_candidates=3,
                                only=frozenset({"gate_fails_right"}))  # fmt: skip
    assert [p.probe.probe_id for p in unprompted if p.probe] == [first.probe.probe_id]

    apply_skill(first.skill, harness.root, harness)
    after = score_fn(harness.root)
    assert after("synth/mod", "x%3+1", "6>1;9>1", {})["score"] == 1.0  # the right program is paid now
    assert after("synth/mod", "x+1", "6>1;9>1", {})["score"] == 0.0  # a wrong one still is not
    assert reward_gates(harness.path(REWARD).read_text(), "compute_score") == ()


def test_a_reward_that_declares_no_knobs_still_gets_the_gate_probe(gated: tuple[Harness, Path]) -> None:
    """Disagreement-driven candidates where the reward's code allows, with no declaration."""
    import re

    harness, run_dir = gated
    source = harness.path(REWARD).read_text()
    bare = re.sub(r"(?ms)^EVOTRAINER_KNOBS = \{.*?^\}\n", "", source)
    assert "EVOTRAINER_KNOBS" not in bare and "STEP_LIMIT = " in bare
    harness.path(REWARD).write_text(bare)
    knobs = harness_knobs(harness, "local", run_table(run_dir, harness.manifest.answer).train)
    assert knobs.code == ()
    metrics = probe_metrics(build_report(run_dir).metrics, harness, knobs)
    ranked = propose_probes(knobs, metrics, tried=(), blocked={}, max_candidates=3,
                            only=frozenset({"reward_misses_right"}))  # fmt: skip
    assert [p.probe.probe_id for p in ranked if p.probe] == [f"reward:gate:{knobs.gates[0].gate.id}"]


def test_a_gate_the_evidence_does_not_point_at_is_no_probe(gated: tuple[Harness, Path], tmp_path: Path) -> None:
    harness, run_dir = gated
    rows = run_table(run_dir, harness.manifest.answer).train
    source = harness.path(REWARD).read_text()
    # The same gate paying 0 with another fingerprint: the failed right programs carry parsed = 0, not -1.
    other = source.replace('return {"score": 0.0, "parsed": 0.0, "timeouts": 0.0}',
                           'return {"score": 0.0, "parsed": -1.0, "timeouts": 0.0}')  # fmt: skip
    assert other != source
    [ev] = gate_evidence(harness, other, rows)
    assert ev.failed_right == 48 and ev.explained == 0
    harness.path(REWARD).write_text(other)
    knobs = harness_knobs(harness, "local", rows)
    ranked = propose_probes(knobs, probe_metrics({}, harness, knobs), tried=(), blocked={}, max_candidates=9)
    assert not [d for d in ranked if d.probe and d.probe.probe_id.startswith("reward:gate")]
    assert gate_evidence(harness, source, None) == ()  # no rollouts, no evidence: no gate is a candidate

    # A bare-number payout leaves no fingerprint but the reward, which any other way of paying 0 shares: its probe
    # is drafted, yet ranks like any move with the same effect (not proposed on its own evidence, without a stall).
    bare = source.replace('return {"score": 0.0, "parsed": 0.0, "timeouts": 0.0}', "return 0.0")
    harness.path(REWARD).write_text(bare)
    knobs = harness_knobs(harness, "local", rows)
    [ev] = knobs.gates
    assert ev.fingerprint == () and ev.explained == ev.failed_right == 48
    metrics = probe_metrics({"unrewarded_correct_rate": 0.8}, harness, knobs)
    ranked = propose_probes(knobs, metrics, tried=(), blocked={}, max_candidates=9)
    gate = [p.probe for p in ranked if p.probe and p.probe.probe_id.startswith("reward:gate")]
    assert gate and "gate_fails_right" not in gate[0].symptoms
    assert not propose_probes(knobs, metrics, tried=(), blocked={}, max_candidates=9,
                              only=frozenset({"gate_fails_right"}))  # fmt: skip


def test_a_learned_gate_skill_applies_only_where_that_gate_is(tmp_path: Path) -> None:
    defective = scenario_dir("synth-format-gate", "defective")
    [gate] = reward_gates((defective / REWARD).read_text(), "compute_score")
    spec = SkillSpec(
        name="learned-drop-gate", domain="*", trigger="unrewarded_correct_rate > 0.2", factor="reward",
        patch_kind="template", patch=f'[{{"op": "drop_gate", "file": "@reward", "gate": "{gate.id}"}}]',
        expected_outcome="right programs are paid", validation_rule="pilot", provenance="test",
    )  # fmt: skip
    shutil.copytree(scenario_dir("synth-format-gate", "oracle"), tmp_path / "oracle")
    oracle = load_harness(tmp_path / "oracle")
    with pytest.raises(SkillPatchError, match=f"no gate '{gate.id}'"):
        apply_skill(spec, oracle.root, oracle)


@pytest.mark.parametrize(
    ("body", "gates"),
    [
        ("    if not s:\n        return 0.0\n    return 1.0\n", 1),
        ("    if len(s) > 9:\n        return -1\n    return 1.0\n", 1),  # a penalty pays nothing too
        ("    if len(s) > 9:\n        return 0.5\n    return 1.0\n", 0),  # partial credit is no gate
        ("    if s:\n        return 0.0\n    else:\n        return 1.0\n", 0),  # both ways: a branch, not a gate
        ("    if not (m := s.strip()):\n        return 0.0\n    return float(len(m))\n", 0),  # binds a name used later
        ("    if not s:\n        return {'score': 0.0, 'n': len(s)}\n    return 1.0\n", 0),  # not a constant payout
        ("    if not s:\n        return {'parsed': 0.0}\n    return 1.0\n", 0),  # no score: what does it pay?
        ("    for c in s:\n        if c == 'x':\n            return 0.0\n    return 1.0\n", 0),  # not at the top
    ],
)
def test_what_counts_as_a_gate(body: str, gates: int) -> None:
    source = f"def compute_score(data_source, s, ground_truth, extra_info=None):\n{body}"
    found = reward_gates(source, "compute_score")
    assert len(found) == gates
    for gate in found:
        dropped, _ = drop_gate(source, "compute_score", gate.id)
        assert gate.condition not in dropped and dropped.rstrip().endswith("return 1.0")
    with pytest.raises(GateError, match="no top-level function 'score'"):
        reward_gates(source, "score")
    with pytest.raises(GateError, match="cannot be parsed"):
        reward_gates("def compute_score(:\n", "compute_score")
    deep = "+".join(["s"] * 2000)  # parses, but too deep for ast.unparse: a clear error, never a RecursionError
    with pytest.raises(GateError, match="nested too deeply"):
        reward_gates(
            f"def compute_score(d, s, g, e):\n    if {deep}:\n        return 0\n    return 1\n", "compute_score"
        )


def test_the_gate_probe_aimed_at_the_alert_is_held_to_non_inferiority(
    gated: tuple[Harness, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its backtest must show the failed right responses fall: prior evidence, as a documented range is."""
    from agent.context import Context
    from agent.nodes import propose as node

    harness, run_dir = gated
    knobs = harness_knobs(harness, "local", run_table(run_dir, harness.manifest.answer).train)
    report = build_report(run_dir)
    metrics = probe_metrics(report.metrics, harness, knobs)
    state: Any = {"report": report.to_json(), "iteration": 1, "session_id": "s0"}
    monkeypatch.setattr(node, "_materialise", lambda *_: {"id": "c", "status": "proposed"})
    ranked = propose_probes(knobs, metrics, tried=(), blocked={}, max_candidates=9)
    gate = next(p for p in ranked if p.probe and p.probe.probe_id.startswith("reward:gate"))
    info = node._made(Context(), state, harness, gate, 1, metrics)
    assert "score.unrewarded_correct" in info.get("aims", [])
    assert gate.probe is not None and info.get("restores_range") == [gate.probe.probe_id]
    other = next(p for p in ranked if p.probe and not p.probe.probe_id.startswith("reward:gate"))
    assert "restores_range" not in node._made(Context(), state, harness, other, 2, metrics)
