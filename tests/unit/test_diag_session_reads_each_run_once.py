"""The session's steps share one run table per run instead of re-reading the validation rollouts.

evaluate builds a pilot's health report and its per-prompt strict scores, confirm reads the scores again and
diagnose/rollback read the held-out steps: all through `agent.nodes.common.run_table`, which reads the files
once per process and again only after they change.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.decisions.evidence import final_strict_scores
from agent.decisions.rollback import rollback_point
from agent.nodes import common
from agent.state import VersionInfo
from diagnostics import table as table_module
from diagnostics.schema import Rollout, write_rollouts
from diagnostics.table import RunTableCache
from harness.answers import AnswerProtocol

ANSWER = AnswerProtocol(pattern="<ans>(.*?)</ans>")


def _run(root: Path, accuracy: list[float]) -> Path:
    for step, acc in zip((0, 20, 40), accuracy, strict=True):
        val = [
            Rollout(
                "r", step, "val", f"p{i}", f"v{i}", 0, "q", "<ans>1</ans>", "1", 1.0, strict_score=float(i < acc * 50)
            )
            for i in range(50)
        ]
        write_rollouts(root / "rollouts" / "val" / f"step_{step}.jsonl", val)
    train = [
        Rollout("r", 1, "train", f"t{i // 4}", f"g{i // 4}", i % 4, "q", "<ans>1</ans>", "1", float(i % 2))
        for i in range(16)
    ]
    write_rollouts(root / "rollouts" / "train" / "step_1.jsonl", train)
    return root


@pytest.fixture()
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    seen: list[Path] = []
    real = table_module.read_run_table

    def counting(run_dir: Path, *args: object, **kwargs: object) -> table_module.RunTable:
        seen.append(run_dir)
        return real(run_dir, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(table_module, "read_run_table", counting)
    monkeypatch.setattr(common, "_TABLES", [RunTableCache()])
    return seen


def test_report_scores_and_rollback_of_one_run_read_its_rollouts_once(tmp_path: Path, reads: list[Path]) -> None:
    run = _run(tmp_path / "run", [0.8, 0.4, 0.1])
    report = common.cached_report(run, None, ANSWER)  # evaluate: the report ...
    scores = final_strict_scores(common.run_table(run, ANSWER).val)  # ... and the paired scores
    again = final_strict_scores(common.run_table(run, ANSWER).val)  # confirm
    start = tmp_path / "start.pt"
    start.write_bytes(b"x")
    version = VersionInfo(
        index=0, branch="b", commit="c", run_id="r", run_dir=str(run), checkpoint="", strict_acc=0.0,
        train_reward=0.0, steps=40, start_checkpoint=str(start), start_steps=0,
    )  # fmt: skip
    point = rollback_point(version, 0.05, common.run_table(run, ANSWER).val)  # diagnose
    assert reads == [run]
    assert report.metrics["strict_acc"] == pytest.approx(0.1) and report.metrics["format_failure_rate"] == 0.0
    assert scores == again and sum(scores.values()) == 5
    assert "0.800 -> 0.100" in point["reason"]


def test_a_run_whose_files_changed_is_read_again(tmp_path: Path, reads: list[Path]) -> None:
    run = _run(tmp_path / "run", [0.5, 0.5, 0.5])
    before = final_strict_scores(common.run_table(run, ANSWER).val)
    path = run / "rollouts" / "val" / "step_40.jsonl"
    rows = [Rollout("r", 40, "val", f"p{i}", f"v{i}", 0, "q", "x", "1", 0.0, strict_score=1.0) for i in range(50)]
    write_rollouts(path, rows)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10_000_000))
    after = final_strict_scores(common.run_table(run, ANSWER).val)
    assert reads == [run, run]
    assert sum(before.values()) == 25 and sum(after.values()) == 50


def test_the_cache_keeps_at_most_its_row_budget(tmp_path: Path, reads: list[Path]) -> None:
    cache = RunTableCache(max_rows=200)
    a, b = _run(tmp_path / "a", [0.5] * 3), _run(tmp_path / "b", [0.5] * 3)  # 166 rows each
    cache.get(a)
    cache.get(b)  # a is evicted to keep the budget
    cache.get(b)
    cache.get(a)
    assert reads == [a, b, a]
