"""Issue #4: the streaming verl-dump fast path agrees with the neutral-schema layers on the same data."""

from __future__ import annotations

import random
from pathlib import Path

import orjson
import pytest

from diagnostics.fastpath import dump_files, verl_dump_metrics
from diagnostics.schema import ReadProblem, Rollout
from diagnostics.signal import diagnose_dead_groups


def write_dump(directory: Path, steps: int = 3, groups: int = 20, seed: int = 0) -> list[Rollout]:
    rng = random.Random(seed)
    neutral = []
    directory.mkdir(parents=True)
    for step in range(steps):
        lines = []
        for g in range(groups):
            dead = g % 4 == 0
            for k in range(8):
                score = 0.0 if dead else float(rng.random() < 0.5)
                out = f"<ans>{int(score)}</ans>" if k else "spam spam"
                lines.append(
                    orjson.dumps(
                        {
                            "input": "q",
                            "output": out,
                            "gts": "1",
                            "score": score,
                            "step": step,
                            "uid": f"uuid-{step}-{g}_{k}_0",
                        }
                    )
                )
                neutral.append(
                    Rollout("r", step, "train", f"uuid-{step}-{g}", f"uuid-{step}-{g}", k, "q", out, "1", score)
                )
        (directory / f"{step}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return neutral


def test_fastpath_matches_signal_layer(tmp_path: Path) -> None:
    neutral = write_dump(tmp_path / "dump")
    problems: list[ReadProblem] = []
    fast = verl_dump_metrics(dump_files(tmp_path / "dump"), problems)
    slow = diagnose_dead_groups(neutral).metrics
    assert problems == []
    assert fast["num_rows"] == 480 and fast["num_groups"] == slow["num_groups"] == 60
    assert fast["dead_group_ratio"] == pytest.approx(slow["dead_group_ratio"])
    assert fast["dead_group_ratio"] >= 0.25
    assert fast["reward_spread"] == pytest.approx(slow["reward_spread"])
    assert fast["format_failure_rate"] == pytest.approx(1 / 8)


def test_fastpath_reports_bad_lines(tmp_path: Path) -> None:
    write_dump(tmp_path / "dump", steps=1)
    with open(tmp_path / "dump" / "0.jsonl", "ab") as fh:
        fh.write(b'{"uid": "x_0_0", "output": "o"}\n{"broken\n')
    problems: list[ReadProblem] = []
    fast = verl_dump_metrics(dump_files(tmp_path / "dump"), problems)
    assert [p.line for p in problems] == [161, 162]
    assert fast["num_rows"] == 160
