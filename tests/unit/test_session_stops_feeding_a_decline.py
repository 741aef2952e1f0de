"""A control-only iteration that makes the incumbent significantly worse ends the session.

The rule (`agent/decisions/evidence.py: decline_stop`) compares the continued version's per-prompt strict scores with
its continuation's; `record` applies it only when the iteration had no candidate to decide on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.context import Context
from agent.decisions.evidence import decline_stop
from agent.nodes.record import _decline
from diagnostics.schema import Rollout, write_rollouts

ROOT = Path(__file__).resolve().parents[2]


def _scores(solved: set[int], n: int = 100) -> dict[str, float]:
    return {f"p{i}": 1.0 if i in solved else 0.0 for i in range(n)}


def test_a_significant_decline_gives_a_reason_with_the_evidence_and_the_budget_left() -> None:
    reason, cmp = decline_stop(_scores(set(range(90))), _scores(set(range(75))), steps_left=240, max_steps=600)
    assert cmp is not None and cmp.ci_high < 0
    assert "declined with no candidate" in reason
    assert "0.900 → 0.750" in reason and "95% CI" in reason
    assert "240 of 600 training steps unused" in reason


def test_noise_or_a_gain_does_not_stop() -> None:
    # 3 prompts lost, 2 gained: the CI spans zero
    noisy, cmp = decline_stop(_scores(set(range(90))), _scores(set(range(87)) | {95, 96}), 100, 600)
    assert noisy == "" and cmp is not None and cmp.ci_low < 0 < cmp.ci_high
    gain, _ = decline_stop(_scores(set(range(50))), _scores(set(range(70))), 100, 600)
    assert gain == ""


def test_too_few_shared_prompts_give_no_verdict() -> None:
    reason, cmp = decline_stop({"a": 1.0}, {"a": 0.0, "b": 0.0}, 100, 600)
    assert (reason, cmp) == ("", None)


def _run(root: Path, name: str, solved: set[int]) -> str:
    rollouts = [
        Rollout(name, 20, "val", f"p{i}", f"p{i}", 0, "q", "a", "a", 0.0, strict_score=1.0 if i in solved else 0.0)
        for i in range(100)
    ]
    write_rollouts(root / name / "rollouts" / "val" / "step_20.jsonl", rollouts)
    return str(root / name)


def _version(run_dir: str, index: int) -> dict[str, Any]:
    return {"index": index, "run_id": Path(run_dir).name, "run_dir": run_dir}


def test_record_stops_a_scripted_declining_incumbent(tmp_path: Path) -> None:
    ctx = Context(max_train_steps=600, base_steps=20)
    v1 = _run(tmp_path, "s-v1.1-fix", set(range(90)))
    state: Any = {"harness_dir": str(ROOT / "examples" / "arithmetic-oracle"), "version": _version(v1, 1)}
    declined = _run(tmp_path, "s-v2.0-control", set(range(72)))
    reason = _decline(ctx, state, _version(declined, 2), steps_used=400)  # type: ignore[arg-type]
    assert "declined with no candidate" in reason and "200 of 600 training steps unused" in reason
    steady = _run(tmp_path, "s-v2.0-control-b", set(range(89)) | {95})
    assert _decline(ctx, state, _version(steady, 2), steps_used=400) == ""  # type: ignore[arg-type]
    missing = {"index": 2, "run_id": "gone", "run_dir": str(tmp_path / "gone")}
    assert _decline(ctx, state, missing, steps_used=400) == ""  # type: ignore[arg-type]
