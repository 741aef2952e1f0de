"""`build_report` reads a run folder tolerantly and assembles the four layers."""

from __future__ import annotations

import random
from pathlib import Path

import orjson
import pytest

from diagnostics.findings import HealthReport, Severity, render_text
from diagnostics.report import build_report
from diagnostics.schema import Rollout, append_metrics, write_rollouts

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "diagnostics"


def make_run(root: Path, run_id: str, p_correct: list[float], lenient_share: list[float], seed: int = 0) -> Path:
    """Write a run folder: train rollouts (lenient reward pays spam), val rollouts with strict scores, metrics."""
    rng = random.Random(seed)
    run = root / run_id
    for step, (p, spam) in enumerate(zip(p_correct, lenient_share, strict=True)):
        train, val, rewards = [], [], []
        for g in range(10):
            for i in range(8):
                u = rng.random()
                correct = u < p
                spammed = not correct and u < p + spam
                response = "33 " * 12 if spammed else f"12+21 => <ans>{33 if correct else 34}</ans>"
                reward = 1.0 if correct or spammed else 0.0
                rewards.append(reward)
                train.append(
                    Rollout(
                        run_id,
                        step,
                        "train",
                        f"p{g}",
                        f"g{g}",
                        i,
                        "12+21=>",
                        response,
                        "33",
                        reward,
                        strict_score=float(correct),
                        response_tokens=len(response.split()),
                    )
                )
            val.append(
                Rollout(
                    run_id,
                    step,
                    "val",
                    f"v{g}",
                    f"vg{g}",
                    0,
                    "12+21=>",
                    "<ans>33</ans>",
                    "33",
                    float(g < 10 * p),
                    strict_score=float(g < 10 * p),
                )
            )
        write_rollouts(run / "rollouts" / "train" / f"step_{step}.jsonl", train)
        write_rollouts(run / "rollouts" / "val" / f"step_{step}.jsonl", val)
        append_metrics(run / "metrics.jsonl", step, {"critic/score/mean": sum(rewards) / len(rewards)})
    return run


def test_corrupt_and_truncated_lines_become_problems_with_file_and_line() -> None:
    report = build_report(FIXTURES / "corrupt_run")
    where = {(Path(p.path).name, p.line) for p in report.problems}
    assert ("step_0.jsonl", 4) in where  # corrupt line in the middle
    assert ("step_1.jsonl", 9) in where  # half-written last line
    assert ("metrics.jsonl", 2) in where  # non-numeric metric value
    assert report.metrics["num_groups"] == 4.0  # 2 groups x 2 steps still read
    assert report.metrics["strict_acc"] == pytest.approx(0.5)
    assert "step_0.jsonl:4" in render_text(report)


def test_hacking_run_gets_critical_alarm_and_healthy_run_does_not(tmp_path: Path) -> None:
    hacked = build_report(make_run(tmp_path, "hacked", [0.4] * 5, [0.0, 0.1, 0.2, 0.3, 0.4]))
    assert hacked.metrics["reward_hacking"] == 1.0
    assert hacked.finding("score.reward_hacking").severity is Severity.CRITICAL  # type: ignore[union-attr]
    assert hacked.finding("score.rewarded_wrong").fired  # type: ignore[union-attr]
    assert hacked.finding("behaviour.degeneration").evidence_rollout_ids  # type: ignore[union-attr]
    healthy = build_report(make_run(tmp_path, "healthy", [0.3, 0.35, 0.4, 0.45, 0.5], [0.0] * 5))
    assert healthy.metrics["reward_hacking"] == 0.0
    assert healthy.alerts() == []


def test_report_json_round_trip(tmp_path: Path) -> None:
    report = build_report(make_run(tmp_path, "r", [0.4] * 3, [0.0, 0.2, 0.4]))
    again = HealthReport.from_json(orjson.loads(orjson.dumps(report.to_json())))
    assert again.to_json() == report.to_json()
    assert again.worst is report.worst


def test_parent_comparison_flags_regression_and_cross_version_hacking(tmp_path: Path) -> None:
    parent = build_report(make_run(tmp_path, "v1", [0.5] * 3, [0.0] * 3))
    child = build_report(make_run(tmp_path, "v2", [0.3] * 3, [0.5] * 3, seed=1), parent=parent)
    assert child.metrics["vs_parent/strict_acc"] < -0.05
    assert child.finding("version.strict_regression").severity is Severity.CRITICAL  # type: ignore[union-attr]
    assert child.finding("version.reward_hacking").fired  # type: ignore[union-attr]
    assert child.metrics["reward_hacking"] == 1.0


def test_empty_folder_reports_a_problem(tmp_path: Path) -> None:
    report = build_report(tmp_path)
    assert report.problems and "no readable rollout" in report.problems[0].message
