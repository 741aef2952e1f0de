"""The held-out rule, stated once: what of a run untrusted code may read.

Nothing a model tool returns, and nothing handed to a script the model wrote or to a harness's own analyzer,
carries a held-out prompt, response or reference answer, nor what the editable reward computed from them (it
may encode the answer). A held-out rollout reaches them as `HELD_OUT_SCORES` only: every tool reads held-out
rollouts through `held_out_scores`, and `analysis_inputs` builds every script's and analyzer's input files
(tests/integration/test_held_out_never_reaches_the_model.py calls every registered tool).

Model-written code run by a tool (`run_analysis`, `propose_diagnostic`, and the edited reward of
`request_backtest`) runs only in the Docker sandbox, which mounts nothing but its inputs (a harness without
its protected files): in `process` mode it runs as the controller's user and could open the harness's
held-out file by its path, and its failure text would carry what it read (`model_code_refusal`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

HELD_OUT_SPLIT: Final = "val"
HELD_OUT_SCORES = (
    "run_id", "step", "prompt_id", "group_id", "sample_index",
    "strict_score", "response_tokens", "truncated", "stop_reason", "num_turns", "tool_calls",
)  # fmt: skip
HELD_OUT_RULE = (
    "held-out (val) rollouts are shown as scores only (ids, step, the protected evaluator's strict_score, length "
    "and stop fields): never their prompt, response, reference answer or the editable reward's values"
)


def model_code_refusal(sandbox: str) -> str | None:
    """Why a script the model wrote may not run under the session's sandbox mode (None: it may, in Docker)."""
    if sandbox == "docker":
        return None
    return (
        f"code you write runs in a tool only in the docker sandbox; this session's sandbox is {sandbox!r}, where "
        "it runs as the controller's user and could read the held-out files, so run_analysis, propose_diagnostic "
        "and request_backtest are off: read the health report and sample_rollouts instead (the session's owner "
        "can choose --sandbox docker)"
    )


def held_out_scores(row: Mapping[str, Any]) -> dict[str, Any]:
    """Return the part of a held-out rollout row (JSON) that the model may see: `HELD_OUT_SCORES`."""
    return {key: row[key] for key in HELD_OUT_SCORES if key in row}


def analysis_inputs(run_dir: Path, folder: Path, *, all_steps: bool) -> dict[str, Path]:
    """Return the input files of a script the model wrote (or a harness analyzer): training rollouts, held-out
    scores only.

    ``train.jsonl`` is the latest training step and, with `all_steps`, ``train_all.jsonl`` every step;
    ``val_scores.jsonl`` is the latest held-out step through `held_out_scores` (a line that is not a JSON
    object is left out). The derived files are written under `folder`.
    """
    import orjson

    from diagnostics.schema import rollout_files
    from harness.atomic import write_atomic

    inputs: dict[str, Path] = {}
    if train := rollout_files(run_dir, "train"):
        inputs["train.jsonl"] = train[-1]
        if all_steps:
            merged = folder / "train_all.jsonl"  # one run's files never change: written once per folder
            if not merged.is_file() or merged.stat().st_size != sum(f.stat().st_size for f in train):
                write_atomic(merged, b"".join(f.read_bytes() for f in train))  # a short copy is written again
            inputs["train_all.jsonl"] = merged
    if held_out := rollout_files(run_dir, HELD_OUT_SPLIT):
        rows = []
        for line in held_out[-1].read_bytes().splitlines():
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(row, dict):
                rows.append(orjson.dumps(held_out_scores(row)) + b"\n")
        inputs["val_scores.jsonl"] = folder / "val_scores.jsonl"
        write_atomic(inputs["val_scores.jsonl"], b"".join(rows))
    return inputs
