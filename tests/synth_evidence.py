"""Real evidence on the program-synthesis scenarios without training: programs scored by a scenario's own reward.

A run folder of train and val rollouts whose rewards are the defective reward's and whose strict scores are
the oracle reward's (what the protected evaluator computes), written with the rollout schema and read back
by the health report's own code. The programs are given per problem, so a test picks the behaviour whose
evidence it needs (right programs a gate stops, lookups of the shown examples a lenient reward pays).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REWARD = "harness/reward.py"
HIDDEN_INPUTS = (6, 9, 13, 17, 22, 28, 33, 40)
SHOWN_INPUTS = tuple(range(6))

Problem = tuple[str, str, Callable[[int], int], Sequence[str]]  # (data source, id, the function, a group's programs)


def score_fn(root: Path) -> Callable[..., Any]:
    """The `compute_score` of the harness at `root` (imported from its file: test code, never the product's path)."""
    spec = importlib.util.spec_from_file_location(f"reward_{abs(hash(str(root)))}", root / REWARD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.compute_score  # type: ignore[no-any-return]


def cases(fn: Callable[[int], int], inputs: Sequence[int]) -> str:
    return ";".join(f"{x}>{fn(x)}" for x in inputs)


def write_run(run_dir: Path, defective: Path, oracle: Path, problems: Sequence[Problem], steps: int = 2) -> None:
    """`steps` steps of train and val rollouts scored by the defective reward, strict-scored by the oracle's."""
    from diagnostics.schema import Rollout, append_metrics, write_rollouts

    reward, strict = score_fn(defective), score_fn(oracle)
    for step in range(1, steps + 1):
        for split in ("train", "val"):
            rows = []
            for source, pid, fn, programs in problems:
                truth, shown = cases(fn, HIDDEN_INPUTS), cases(fn, SHOWN_INPUTS)
                extra = {"public_tests": shown, "prompt": f"{shown}=>"}
                for i, program in enumerate(programs):
                    got = reward(source, program, truth, extra)
                    rows.append(
                        Rollout(
                            run_id="r", step=step, split=split, prompt_id=f"{split}-{pid}", group_id=f"{step}-{pid}",
                            sample_index=i, prompt=f"{shown}=>", response=program, ground_truth=truth,
                            reward=got["score"], reward_components={k: v for k, v in got.items() if k != "score"},
                            strict_score=float(strict(source, program, truth, extra)["score"] == 1.0),
                            response_tokens=len(program), data_source=source,
                        )
                    )  # fmt: skip
            write_rollouts(run_dir / "rollouts" / split / f"step_{step}.jsonl", rows)
        append_metrics(run_dir / "metrics.jsonl", step, {"critic/score/mean": 0.3, "val/strict_acc": 0.3})
    (run_dir / "config.json").write_text('{"max_new_tokens": 40}')
