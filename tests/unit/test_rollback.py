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


def test_a_run_that_learned_to_exploit_its_reward_restarts_only_the_reward_repairs(tmp_path: Path, start: str) -> None:
    # synth-shown-tests, v0 at seed 0: 0.32 -> 0.218 while it learned lookup tables of the examples its prompts show
    run = _run(tmp_path, 0.32, 0.218)
    assert rollback_point(_version(run, start), min_effect=0.05) == {}  # no collapse
    point = rollback_point(_version(run, start), min_effect=0.05, hacked=True)
    assert point["checkpoint"] == start and point["steps"] == 0 and point["repairs_only"] is True
    assert "exploit its reward (score.reward_hacking)" in point["reason"] and "0.320 -> 0.220" in point["reason"]
    assert rollback_point(_version(_run(tmp_path, 0.70, 0.67), start), min_effect=0.05, hacked=True) == {}
    collapsed = rollback_point(_version(_run(tmp_path, 0.70, 0.05), start), min_effect=0.05, hacked=True)
    assert collapsed and "repairs_only" not in collapsed  # a collapse restarts every candidate


def test_after_an_exploited_reward_only_its_repair_pilots_from_the_start(tmp_path: Path, start: str) -> None:
    from agent.adapters.pilots import plan_pilot
    from agent.context import Context

    run = _run(tmp_path, 0.32, 0.218)
    version = _version(run, start)
    rollback = rollback_point(version, min_effect=0.05, hacked=True)
    ctx = Context(workdir=str(tmp_path))
    base = {"version": version, "iteration": 1, "session_id": "s", "rollback": rollback, "harness_dir": str(tmp_path)}
    repair = {"id": "s-v1.1-probe-reward-reads-public-tests", "worktree": str(tmp_path), "repairs_reward": True}
    other = {"id": "s-v1.2-probe-group-size-up-x2", "worktree": str(tmp_path)}
    assert plan_pilot(ctx, {**base, "candidate": repair}).init_checkpoint == start
    assert plan_pilot(ctx, {**base, "candidate": repair, "replicate": 1}).init_checkpoint == start
    assert plan_pilot(ctx, {**base, "candidate": other}).init_checkpoint == version["checkpoint"]
    assert plan_pilot(ctx, {**base, "candidate": None}).init_checkpoint == version["checkpoint"]  # the control
