"""Per-source GRPO signal: dead groups concentrated in whole data sources point at the data selection."""

from __future__ import annotations

import json
import math
from pathlib import Path

from diagnostics.findings import HealthReport, Severity, render_text
from diagnostics.report import build_report
from diagnostics.schema import Rollout, Split, write_rollouts
from diagnostics.sources import diagnose_sources as diagnose_source_rows
from diagnostics.sources import per_source, source_metrics
from diagnostics.sources import source_stats as source_stats_of_rows
from diagnostics.table import table_from_rollouts


def source_stats(rollouts: list[Rollout]) -> list:  # type: ignore[type-arg]
    return source_stats_of_rows(table_from_rollouts(rollouts))


def diagnose_sources(rollouts: list[Rollout]):  # type: ignore[no-untyped-def]
    return diagnose_source_rows(table_from_rollouts(rollouts))


def _group(step: int, gid: str, source: str, rewards: list[float], *, split: Split = "train") -> list[Rollout]:
    truncated = source.endswith("5")  # the first sample of a level-5 group is cut
    return [
        Rollout(
            "r",
            step,
            split,
            f"p-{gid}",
            gid,
            i,
            "1+1=>",
            "x",
            "2",
            r,
            data_source=source,
            strict_score=r,
            truncated=truncated and i == 0,
        )
        for i, r in enumerate(rewards)
    ]


def _run(n_easy: int = 12, n_hard: int = 10, n_live: int = 10) -> list[Rollout]:
    """Level 1 always solved, level 5 never, level 3 mixed; one level-1 group is live."""
    out: list[Rollout] = []
    for g in range(n_easy):
        out += _group(g % 3, f"e{g}", "arithmetic/level1", [1.0, 1.0, 1.0, 0.0 if g == 0 else 1.0])
    for g in range(n_hard):
        out += _group(g % 3, f"h{g}", "arithmetic/level5", [0.0] * 4)
    for g in range(n_live):
        out += _group(g % 3, f"m{g}", "arithmetic/level3", [1.0, 0.0, 1.0, 0.0])
    return out


def test_per_source_table_counts_groups_dead_ratio_reward_and_truncation() -> None:
    stats = {s.data_source: s for s in source_stats(_run())}
    assert list(stats) == ["arithmetic/level1", "arithmetic/level3", "arithmetic/level5"]
    easy, live, hard = stats["arithmetic/level1"], stats["arithmetic/level3"], stats["arithmetic/level5"]
    assert (easy.num_groups, easy.dead_groups, easy.num_rollouts) == (12, 11, 48)
    assert math.isclose(easy.dead_ratio, 11 / 12) and easy.is_dead
    assert (hard.dead_ratio, hard.reward_mean, hard.strict_acc, hard.truncation_rate) == (1.0, 0.0, 0.0, 0.25)
    assert (live.dead_ratio, live.reward_mean, live.is_dead) == (0.0, 0.5, False)


def test_dead_source_share_and_flat_keys() -> None:
    metrics = source_metrics(source_stats(_run()))
    assert metrics["num_sources"] == 3 and metrics["dead_sources"] == 2
    assert metrics["dead_source_share"] == 22 / 32
    assert metrics["source_dead_ratio/arithmetic/level5"] == 1.0
    assert metrics["source_groups/arithmetic/level3"] == 10
    assert per_source(metrics, "source_dead_ratio/") == {
        "arithmetic/level1": 11 / 12,
        "arithmetic/level3": 0.0,
        "arithmetic/level5": 1.0,
    }


def test_too_few_groups_is_no_evidence_of_a_dead_source() -> None:
    metrics = source_metrics(source_stats(_run(n_easy=0, n_hard=7)))  # MIN_SOURCE_GROUPS = 8
    assert metrics["source_dead_ratio/arithmetic/level5"] == 1.0 and metrics["dead_source_share"] == 0.0


def test_only_labelled_training_rollouts_count() -> None:
    unlabelled = _group(0, "u", "", [1.0] * 4)
    val = _group(0, "v", "arithmetic/level2", [1.0] * 4, split="val")
    metrics = source_metrics(source_stats([*unlabelled, *val]))
    assert metrics["num_sources"] == 0 and math.isnan(metrics["dead_source_share"])
    out = diagnose_sources([*unlabelled, *val])
    assert out.findings[0].severity is Severity.OK and "no data" in out.findings[0].message


def test_finding_warns_when_dead_sources_fill_the_batch() -> None:
    fired = diagnose_sources(_run()).findings[0]
    assert fired.alert_id == "signal.dead_sources" and fired.severity is Severity.WARNING
    assert "arithmetic/level5 (100% dead)" in fired.message
    calm = diagnose_sources(_run(n_easy=0, n_hard=8, n_live=40)).findings[0]
    assert calm.severity is Severity.OK and calm.value == 8 / 48


def test_report_round_trips_the_per_source_keys(tmp_path: Path) -> None:
    run = tmp_path / "run"
    rollouts = _run()
    for step in range(3):
        write_rollouts(run / "rollouts" / "train" / f"step_{step}.jsonl", [r for r in rollouts if r.step == step])
    report = build_report(run)
    assert report.metrics["dead_source_share"] == 22 / 32
    assert report.finding("signal.dead_sources") is not None
    again = HealthReport.from_json(json.loads(json.dumps(report.to_json())))
    assert again.metrics["source_dead_ratio/arithmetic/level1"] == report.metrics["source_dead_ratio/arithmetic/level1"]
    text = render_text(again)
    assert "[training data sources]" in text and "source_dead_ratio/" not in text
    assert "  arithmetic/level5: dead_ratio=1 groups=10 reward_mean=0 strict_acc=0 truncation_rate=0.25" in text
