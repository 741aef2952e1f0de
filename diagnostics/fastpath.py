"""Streaming health metrics straight from verl rollout dumps (V1 rows: `input, output, gts, score, step, uid`).

The neutral-schema path (`report.build_report`) builds one `Rollout` object per line; on million-row verl
dumps that costs memory and time. This fast path reads each line once through the tolerant schema reader
(`schema.iter_jsonl`, orjson), keeps only a few numbers per row in flat lists, and computes the signal and
behaviour headline metrics with vectorised numpy (`np.bincount` over group codes). Group key: the prompt
part of `uid` (`uid.rsplit("_", 2)[0]`, verl.md §8) within a step.

Metric names and thresholds are the ones `signal` and `behaviour` use, so skill triggers read either path.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from diagnostics.schema import ReadProblem, iter_jsonl
from diagnostics.score import trend
from diagnostics.signal import DEAD_STD

_TAGS = ("<ans>", "<answer>", "\\boxed", "####")  # the tags behaviour.ANSWER_RE knows


def dump_files(directory: Path) -> list[Path]:
    """Return verl's `<dir>/<global_step>.jsonl` dump files sorted by step."""
    return sorted((p for p in directory.glob("*.jsonl") if p.stem.isdigit()), key=lambda p: int(p.stem))


def verl_dump_metrics(paths: Iterable[Path], problems: list[ReadProblem]) -> dict[str, float]:
    """Compute health metrics over verl dump files; unreadable or malformed lines go to `problems`."""
    group_index: dict[tuple[int, str], int] = {}
    codes: list[int] = []
    scores: list[float] = []
    lengths: list[int] = []
    steps: list[int] = []
    tagged = 0
    empty = 0
    for path in paths:
        for number, row in iter_jsonl(path, problems):
            try:
                uid, output, score, step = row["uid"], row["output"], row["score"], row["step"]
            except (KeyError, TypeError):
                problems.append(ReadProblem(str(path), number, "expected a verl dump row with uid/output/score/step"))
                continue
            if not isinstance(score, (int, float)) or not isinstance(output, str) or not isinstance(uid, str):
                problems.append(ReadProblem(str(path), number, "uid/output must be strings and score a number"))
                continue
            key = (step, uid.rsplit("_", 2)[0])
            code = group_index.get(key)
            if code is None:
                code = group_index[key] = len(group_index)
            codes.append(code)
            scores.append(score)
            lengths.append(len(output))
            steps.append(step)
            if not output.strip():
                empty += 1
            elif any(tag in output for tag in _TAGS):
                tagged += 1
    return _summarise(
        np.asarray(codes),
        np.asarray(scores, dtype=np.float64),
        np.asarray(lengths, dtype=np.float64),
        np.asarray(steps),
        len(group_index),
        tagged,
        empty,
    )


def _summarise(
    codes: np.ndarray,
    scores: np.ndarray,
    lengths: np.ndarray,
    steps: np.ndarray,
    n_groups: int,
    tagged: int,
    empty: int,
) -> dict[str, float]:
    n = scores.size
    if n == 0:
        return {"num_rows": 0.0, "num_groups": 0.0}
    count = np.bincount(codes, minlength=n_groups).astype(np.float64)
    mean = np.bincount(codes, weights=scores, minlength=n_groups) / count
    centred = scores - mean[codes]  # two-pass variance: exact zero for constant groups
    std = np.sqrt(np.bincount(codes, weights=centred * centred, minlength=n_groups) / count)
    corr = float(np.corrcoef(lengths, scores)[0, 1]) if lengths.std() > 0 and scores.std() > 0 else math.nan
    uniq_steps, step_codes = np.unique(steps, return_inverse=True)
    step_means = np.bincount(step_codes, weights=scores) / np.bincount(step_codes)
    _, _, delta = trend(step_means.tolist())
    return {
        "num_rows": float(n),
        "num_groups": float(n_groups),
        "num_steps": float(uniq_steps.size),
        "dead_group_ratio": float((std < DEAD_STD).mean()),
        "reward_spread": float(std.mean()),
        "train_reward_mean": float(step_means[-1]),
        "train_reward_delta": delta,
        "score_mean": float(scores.mean()),
        "score_std": float(scores.std()),
        "response_chars_mean": float(lengths.mean()),
        "length_reward_corr": corr,
        "format_failure_rate": 1.0 - tagged / n,
        "empty_response_rate": empty / n,
    }
