"""Episodes of the lookup harnesses recorded the way the local trainer records them, with the harness's real env.

`record(harness, ...)` opens one environment per row in ONE batch through the same calls object the trainer
uses (`sandboxes.calls.open_calls`: a process sandbox worker), then runs one lookup per live episode per turn
(one `env_calls` request per turn, as `trainer_backend/local/episodes.py` does), and records each call as a
`Turn` (tool, the arguments text, the checked result, success). An episode looks up every key of its prompt
(`c+f=>`), then answers the sum of what it read; it is strict-right when that is the row's ground truth.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from diagnostics.schema import Rollout, StopReason, Turn, write_rollouts
from harness.env import validate_env_result
from harness.manifest import Harness
from sandboxes.calls import open_calls


def rows_of(harness: Harness, count: int, start: int = 0) -> list[dict[str, object]]:
    """`count` training rows of the harness, every 7th from `start` (the file is ordered by level)."""
    lines = harness.path("data/train.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines[start::7][:count]]


def record(harness: Harness, rows: list[dict[str, object]], step: int = 0, size: int = 2) -> list[Rollout]:
    """`size` episodes per row, all opened in one batch, one lookup per live episode per turn."""
    assert harness.env is not None
    entry = str(harness.env)
    batch = [row for row in rows for _ in range(size)]
    keys = [re.findall(r"[a-h]", str(row["prompt"])) for row in batch]
    turns: list[list[Turn]] = [[] for _ in batch]
    calls = open_calls(harness, "process")
    try:
        ids = calls.open_episodes([{k: v for k, v in r.items() if k != "ground_truth"} for r in batch])
        for turn in range(max(map(len, keys))):
            live = [i for i, k in enumerate(keys) if turn < len(k)]
            values = calls.env_calls([(ids[i], "lookup", {"key": keys[i][turn]}) for i in live])
            for i, value in zip(live, values, strict=True):
                result = validate_env_result(value, entry)
                turns[i].append(Turn(f"<call>lookup {keys[i][turn]}</call>", tool="lookup", arguments=keys[i][turn],
                                     result=result.result, success=result.success, policy_tokens=4,
                                     observation_tokens=3))  # fmt: skip
        calls.close_episodes(ids)
    finally:
        calls.close()
    out = []
    for n, (row, done) in enumerate(zip(batch, turns, strict=True)):
        total = sum(int(t.result) for t in done if t.success and t.result.isdigit())
        right = float(str(total) == row["ground_truth"])
        answer = Turn(f"<ans>{total}</ans>", policy_tokens=4)
        response = "".join(f"{t.text}<obs>{t.result}</obs>" for t in done) + answer.text
        out.append(
            Rollout(
                run_id="rec",
                step=step,
                split="train",
                prompt_id=str(row["prompt_id"]),
                group_id=f"{step}-{n // size}",
                sample_index=n % size,
                prompt=str(row["prompt"]),
                response=response,
                ground_truth=str(row["ground_truth"]),
                reward=right,
                strict_score=right,
                stop_reason=StopReason.ANSWER,
                num_turns=len(done) + 1,
                tool_calls=len(done),
                turns=(*done, answer),
            )
        )
    return out


def write_run(harness: Harness, run_dir: Path, steps: int = 2, rows: int = 12) -> list[Rollout]:
    """A run folder of `steps` recorded training steps (other rows each step); returns its rollouts."""
    every: list[Rollout] = []
    for step in range(steps):
        recorded = record(harness, rows_of(harness, rows, start=step), step=step)
        write_rollouts(run_dir / "rollouts" / "train" / f"step_{step}.jsonl", recorded)
        every += recorded
    return every
