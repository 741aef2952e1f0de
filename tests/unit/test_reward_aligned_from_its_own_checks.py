"""A reward that disagrees with the evaluator, where nothing specific explains it, gets the generic
candidate: pay what its own training-side checks agree with the evaluator on.

The evidence is real: programs scored by a synthesis reward that pays partial credit (the share of its tests a
program passes) and declares no knobs, strict-scored by the same task's evaluator rule (every test passed),
read back by the health report's own code. Programs that pass six of eight tests are paid 0.75 and are wrong;
no component, gate, reference or declared knob names that, so the rule over the reward's own checks does.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from synth_evidence import REWARD, Problem, score_fn, write_run

from agent.decisions.knobs import harness_knobs
from agent.decisions.reward_alignment import Check, fit_alignment
from agent.nodes.common import run_table
from agent.nodes.propose import probe_metrics
from agent.policies.alert_aims import critical_alerts
from agent.policies.explore import propose_probes
from diagnostics.report import build_report
from harness.manifest import Harness, load_harness
from skills.patches import apply_skill
from skills.score_checks import score_from_checks
from skills.templates import TemplateError

ROOT = Path(__file__).resolve().parents[2]


def _problems() -> list[Problem]:
    """Each group: a right program, two that go wrong from x = 30 on (6 of 8 tests: paid 0.75), a wrong one."""
    return [
        ("synth/mod", f"mod-{k}-{c}", lambda x, k=k, c=c: x % k + c,
         [f"x%{k}+{c}", f"x%{k}+{c}+x//30", f"x%{k}+{c}+x//30*2", f"x*{k}"])
        for k in range(3, 9) for c in (0, 1)
    ]  # fmt: skip


@pytest.fixture
def partial(tmp_path: Path) -> tuple[Harness, Path]:
    root = tmp_path / "h"
    shutil.copytree(ROOT / "examples" / "synth-fn-oracle", root)
    reward = root / REWARD
    source = reward.read_text()
    reward.write_text(re.sub(r"\nEVOTRAINER_KNOBS = \{.*?\n\}\n", "\n", source, count=1, flags=re.DOTALL))
    assert "EVOTRAINER_KNOBS = {" not in reward.read_text()
    run_dir = tmp_path / "run"
    write_run(run_dir, root, ROOT / "examples" / "synth-fn-oracle", _problems())
    return load_harness(root), run_dir


def test_partial_credit_is_answered_by_paying_only_what_the_checks_agree_on(partial: tuple[Harness, Path]) -> None:
    harness, run_dir = partial
    rows = run_table(run_dir, harness.manifest.answer).train
    knobs = harness_knobs(harness, "local", rows)
    assert not knobs.code and knobs.alignment is not None
    fit = knobs.alignment
    assert fit.reward_rewarded_wrong > 0.6 and fit.disagreement == 0.0, fit
    assert fit.checks == (Check("score", ">=", 1.0),)
    report = build_report(run_dir)
    metrics = probe_metrics(report.metrics, harness, knobs)
    [alert] = [a for a in critical_alerts(report.findings, metrics) if a.alert_id == "score.rewarded_wrong"]
    ranked = propose_probes(knobs, metrics, tried=(), blocked={}, max_candidates=3,
                            only=frozenset(s.name for s in alert.symptoms), evidence=alert.as_evidence())  # fmt: skip
    [aligned] = [p for p in ranked if p.probe and p.probe.probe_id.startswith("reward:checks:")]
    assert aligned.skill.factor == "reward" and "pay 1 when score >= 1" in aligned.hypothesis
    assert "67%" in aligned.hypothesis  # the reward's own rate of paid strict-wrong programs

    apply_skill(aligned.skill, harness.root, harness)
    after = score_fn(harness.root)
    truth = "6>0;9>0;13>1;17>2;22>1;28>1;33>0;40>1"
    assert after("synth/mod", "x%3", truth, {})["score"] == 1.0
    assert after("synth/mod", "x%3+x//30", truth, {})["score"] == 0.0  # paid 0.75 before
    assert after("synth/mod", "x%3+x//30", truth, {})["parsed"] == 1.0  # the components are still logged


def test_no_generic_candidate_where_a_specific_one_answers_or_nothing_disagrees(
    partial: tuple[Harness, Path], tmp_path: Path
) -> None:
    harness, run_dir = partial
    rows = run_table(run_dir, harness.manifest.answer).train
    knobs = harness_knobs(harness, "local", rows)
    calm = probe_metrics({"rewarded_wrong_rate": 0.2, "strict_acc_delta": 0.0}, harness, knobs)
    assert not [p for p in propose_probes(knobs, calm, tried=(), blocked={}, max_candidates=9)
                if p.probe and p.probe.probe_id.startswith("reward:checks:")]  # fmt: skip
    # the harness's own reward declares knobs that pay fewer wrong programs: the specific candidate comes first
    declared = tmp_path / "declared"
    shutil.copytree(ROOT / "examples" / "synth-fn-oracle", declared)
    with_knobs = load_harness(declared)
    knobs = harness_knobs(with_knobs, "local", rows)
    metrics = probe_metrics({"rewarded_wrong_rate": 0.67, "strict_acc_delta": 0.0}, with_knobs, knobs)
    probes = [
        p.probe.probe_id for p in propose_probes(knobs, metrics, tried=(), blocked={}, max_candidates=9) if p.probe
    ]
    assert probes and not [p for p in probes if p.startswith("reward:checks:")], probes


def test_too_few_rollouts_of_either_kind_fit_nothing(partial: tuple[Harness, Path]) -> None:
    harness, run_dir = partial
    rows = run_table(run_dir, harness.manifest.answer).train
    assert fit_alignment(rows.head(30)) is None  # 30 rows: fewer than 20 strict-right ones


@pytest.mark.parametrize(
    "checks",
    [[], [["score", ">", 1]], [["score", ">=", "1"]], [["score", ">=", float("nan")]], [["os.system('x')", ">=", 1]],
     [["a", ">=", 1]] * 5, "score >= 1"],
)  # fmt: skip
def test_malformed_checks_are_refused_never_written_as_code(checks: object) -> None:
    source = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n"
    with pytest.raises(TemplateError):
        score_from_checks(source, "compute_score", checks)  # type: ignore[arg-type]


def test_a_bare_number_reward_is_checked_on_its_score(tmp_path: Path) -> None:
    source = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.75\n"
    out = score_from_checks(source, "compute_score", [["score", ">=", 1.0]])
    namespace: dict[str, object] = {}
    exec(compile(out, "reward.py", "exec"), namespace)  # test code: the written text is what the sandbox runs
    assert namespace["compute_score"]("s", "x", "1") == {"score": 0.0}  # type: ignore[operator]
    with pytest.raises(TemplateError, match="already"):
        score_from_checks(out, "compute_score", [["score", ">=", 1.0]])


def test_no_generic_candidate_whose_backtest_could_not_show_each_critical_disagreement_fall(
    partial: tuple[Harness, Path],
) -> None:
    # one-turn-collapse at seed 0: the report calls the reward's paid-wrong critical (0.85: paid like the mean right
    # answer), while by the backtest's count it pays no strict-wrong response at all. A rule cannot make that
    # fall, so its candidate would fail its backtest (0 -> 50) and waste a slot: it is not drafted.
    import dataclasses

    from agent.decisions.reward_alignment import Alignment

    harness, run_dir = partial
    knobs = harness_knobs(harness, "local", run_table(run_dir, harness.manifest.answer).train)
    fit = Alignment((Check("score", ">=", 0.25), Check("efficiency", "<=", 0.5)), 0.0, 0.109, 0.0, 0.891, 835, 1725)
    knobs = dataclasses.replace(knobs, alignment=fit)

    def drafted(**metrics: float) -> list[str]:
        m = probe_metrics({"strict_acc_delta": 0.0, **metrics}, harness, knobs)
        return [p.probe.probe_id for p in propose_probes(knobs, m, tried=(), blocked={}, max_candidates=9)
                if p.probe and p.probe.probe_id.startswith("reward:checks:")]  # fmt: skip

    assert drafted(rewarded_wrong_rate=0.85, unrewarded_correct_rate=0.46) == []
    assert drafted(unrewarded_correct_rate=0.46, reward_hacking=1.0) == []
    assert drafted(unrewarded_correct_rate=0.46) == ["reward:checks:scorege0.25-efficiencyle0.5"]
