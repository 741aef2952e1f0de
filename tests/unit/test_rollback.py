"""agent/decisions/rollback.py: candidates restart from the incumbent's start only after its run collapsed held-out."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.decisions.rollback import rollback_point
from agent.state import VersionInfo
from diagnostics.schema import Rollout, write_rollouts

N = 200


def _run(tmp_path: Path, before: float, after: float) -> Path:
    """A run folder whose held-out rollouts score `before` at step 0 and `after` at step 40."""
    run = tmp_path / "run"
    for step, acc in ((0, before), (20, (before + after) / 2), (40, after)):
        rows = [
            Rollout("r", step, "val", f"p{i}", f"g{i}", 0, "1+1=>", "2", "2", 0.0, strict_score=float(i < acc * N))
            for i in range(N)
        ]
        write_rollouts(run / "rollouts" / "val" / f"step_{step}.jsonl", rows)
    return run


def _version(run: Path, start: str) -> VersionInfo:
    return VersionInfo(
        index=0, branch="b", commit="c", run_id="s-v0", run_dir=str(run), checkpoint=str(run / "last.pt"),
        strict_acc=0.0, train_reward=0.0, steps=40, start_checkpoint=start, start_steps=0,
    )  # fmt: skip


@pytest.fixture()
def start(tmp_path: Path) -> str:
    path = tmp_path / "start.pt"
    path.write_bytes(b"x")
    return str(path)


def test_a_held_out_collapse_restarts_candidates_from_the_start(tmp_path: Path, start: str) -> None:
    point = rollback_point(_version(_run(tmp_path, 0.70, 0.05), start), min_effect=0.05)
    assert point["checkpoint"] == start and point["steps"] == 0
    assert "held-out strict collapsed 0.700 -> 0.050" in point["reason"] and "s-v0" in point["reason"]
    assert rollback_point(_version(_run(tmp_path, 0.70, 0.35), start), min_effect=0.05)  # half lost: collapsed


@pytest.mark.parametrize(("before", "after"), [(0.70, 0.80), (0.70, 0.67), (0.70, 0.70), (0.70, 0.60), (0.70, 0.36)])
def test_no_rollback_when_held_out_rose_fell_by_less_than_the_effect_or_did_not_collapse(
    tmp_path: Path, start: str, before: float, after: float
) -> None:
    assert rollback_point(_version(_run(tmp_path, before, after), start), min_effect=0.05) == {}


def test_no_rollback_without_a_start_checkpoint_on_disk(tmp_path: Path) -> None:
    run = _run(tmp_path, 0.70, 0.05)
    assert rollback_point(_version(run, ""), min_effect=0.05) == {}
    assert rollback_point(_version(run, str(tmp_path / "gone.pt")), min_effect=0.05) == {}
