"""The framework-neutral rollout record, metric rows and the outcome classes every result carries.

This module owns the typed records that cross package boundaries: `Rollout` (one sampled response),
`MetricRow` (one step of metrics, verl's FileLogger line format). It also owns reading
and writing them as JSONL. It must not import torch, docker, git, SQL or LangGraph.

Readers are tolerant by design: a corrupt or half-written line becomes a `ReadProblem`
naming the file and line, and every other line is still returned.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict

import orjson

from harness.atomic import atomic_path

# The two metric names every decision reads, defined once (verl's names; verl.md §7): the per-step training
# reward before KL, and the greedy strict held-out (selection split) accuracy of a validation step.
TRAIN_REWARD_METRIC = "critic/score/mean"
STRICT_METRIC = "val/strict_acc"

Split = Literal["train", "val"]
SPLITS: tuple[Split, ...] = ("train", "val")

# A run folder's layout, defined once: every backend writes it, diagnostics, the agent and the benchmarks read
# it. ``rollouts/<split>/step_<N>.jsonl`` holds the neutral records (``rollout_file``, ``rollout_files``).
METRICS_FILE = "metrics.jsonl"  # one MetricRow per line
SUMMARY_FILE = "summary.json"  # the run's outcome, written last
CONFIG_FILE = "config.json"  # the settings the run used
LOG_FILE = "train.log"  # the trainer's human-readable log
SPEC_FILE = "spec.json"  # the RunSpec a run was submitted with (the local backend; progress reads its steps)
ROLLOUTS_DIR = "rollouts"
CHECKPOINTS_DIR = "checkpoints"
LAST_CHECKPOINT = Path(CHECKPOINTS_DIR) / "last.pt"  # the local trainer's final state (verl: global_step_<N>)
START_CHECKPOINT = Path(CHECKPOINTS_DIR) / "start.pt"  # a root run's step-0 state (a rollback target)
HEALTH_REPORT_FILE = "health_report.json"  # a diagnosed run's health report, written once next to its artefacts
ENV_REPLAY_FILE = "env_replay.json"  # an agentic run's replay check (diagnostics/env_replay.py), written once
# summary.json's memory fields (trainer_backend/local/memory.py writes them, the session's memory gate and the
# reports read them): the trainer process's peak resident memory, and its peak GPU allocation on a GPU.
PEAK_RSS_GB = "peak_rss_gb"
PEAK_GPU_MEMORY_GB = "peak_gpu_memory_gb"


class StopReason(enum.StrEnum):
    """Why one response (single-turn) or one trajectory (agentic episode) stopped."""

    EOS = "eos"  # the policy emitted end-of-sequence (single-turn)
    LENGTH = "length"  # hit the token cap (max_new_tokens, or an episode's per-turn budget): truncated
    ABORT = "abort"  # rollout aborted for another reason (eval failure, backend abort)
    ANSWER = "answer"  # agentic: the policy gave its final answer
    MAX_TURNS = "max_turns"  # agentic: the episode hit max_turns without a final answer
    ABANDON = "abandon"  # agentic: the policy stopped early without acting (no tool call, no answer)
    TOOL_ERROR = "tool_error"  # agentic: the environment ended the episode on a failed tool call
    ECHO_TRAP = "echo_trap"  # agentic: the policy repeated itself until the episode was cut


class RawTurn(TypedDict, total=False):
    """One turn of a trajectory in a rollout file, before validation."""

    text: str
    tool: str | None
    arguments: str
    result: str
    success: bool | None
    policy_tokens: int
    observation_tokens: int


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn of an agentic episode: what the policy wrote, the tool it called and what came back.

    `tool` is None for a turn without a tool call (the final answer, or text with no call); `success` is
    None when no tool ran. `policy_tokens` are the tokens the policy generated this turn (trained on);
    `observation_tokens` those the environment appended (context only, masked from the loss).
    """

    text: str
    tool: str | None = None
    arguments: str = ""
    result: str = ""
    success: bool | None = None
    policy_tokens: int = 0
    observation_tokens: int = 0


class RawRolloutRow(TypedDict, total=False):
    """One JSON line of a neutral rollout file, before validation."""

    run_id: str
    step: int
    split: str
    prompt_id: str
    group_id: str
    sample_index: int
    prompt: str
    response: str
    ground_truth: str | None
    reward: float
    reward_components: dict[str, float]
    strict_score: float | None
    response_tokens: int
    truncated: bool
    stop_reason: str
    num_turns: int
    tool_calls: int
    mean_logprob: float | None
    data_source: str
    turns: list[RawTurn]
    kept: bool | None


@dataclass(frozen=True, slots=True)
class Rollout:
    """One sampled response with its reward breakdown (framework-neutral).

    `group_id` identifies the GRPO group (all samples of one prompt at one step); `reward` is the
    training reward the harness gave; `strict_score` comes from the protected evaluator where it was
    computed (validation rollouts always, training rollouts when the backend computes it). An agentic
    episode carries its trajectory in `turns` (empty for single-turn responses); `response` then holds the
    whole trajectory text and `num_turns` / `tool_calls` summarise it. `kept` says whether the group filter let
    the rollout's group into the policy update (training rollouts; None where the trainer did not record it).
    """

    run_id: str
    step: int
    split: Split
    prompt_id: str
    group_id: str
    sample_index: int
    prompt: str
    response: str
    ground_truth: str | None
    reward: float
    reward_components: Mapping[str, float] = field(default_factory=dict)
    strict_score: float | None = None
    response_tokens: int = 0
    truncated: bool = False
    stop_reason: StopReason = StopReason.EOS
    num_turns: int = 1
    tool_calls: int = 0
    mean_logprob: float | None = None
    data_source: str = ""
    turns: tuple[Turn, ...] = ()
    kept: bool | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the JSON-ready dict (the `RawRolloutRow` shape; `turns` and `kept` only when there are some)."""
        row = asdict(self)
        if self.kept is None:
            del row["kept"]
        row["stop_reason"] = self.stop_reason.value
        row["reward_components"] = dict(self.reward_components)
        if self.turns:
            row["turns"] = [asdict(t) for t in self.turns]
        else:
            del row["turns"]
        return row


class RolloutFormatError(ValueError):
    """A rollout row that does not fit the schema; the message names the field."""


_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "run_id": str,
    "step": int,
    "split": str,
    "prompt_id": str,
    "group_id": str,
    "sample_index": int,
    "prompt": str,
    "response": str,
    "reward": (int, float),
}


def rollout_from_row(row: Mapping[str, Any]) -> Rollout:
    """Validate one raw row and convert it to a `Rollout`.

    Raises:
        RolloutFormatError: a required field is missing or has the wrong type, or a value is invalid.
    """
    if not isinstance(row, Mapping):
        raise RolloutFormatError(f"expected a JSON object, got {type(row).__name__}")
    for name, kind in _REQUIRED.items():
        if name not in row:
            raise RolloutFormatError(f"missing field '{name}'")
        value = row[name]
        if isinstance(value, bool) or not isinstance(value, kind):
            raise RolloutFormatError(f"field '{name}' has type {type(value).__name__}")
    if row["split"] not in SPLITS:
        raise RolloutFormatError(f"field 'split' must be one of {SPLITS}, got {row['split']!r}")
    reward = float(row["reward"])
    if not math.isfinite(reward):
        raise RolloutFormatError("field 'reward' is not finite")
    components = row.get("reward_components") or {}
    if not isinstance(components, Mapping) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in components.values()
    ):
        raise RolloutFormatError("field 'reward_components' must map names to numbers")
    try:
        stop = StopReason(row.get("stop_reason", "eos"))
    except ValueError as exc:
        raise RolloutFormatError(f"field 'stop_reason': {exc}") from None
    strict = row.get("strict_score")
    logprob = row.get("mean_logprob")
    turns = _turns_from_row(row.get("turns"))
    kept = row.get("kept")
    if kept is not None and not isinstance(kept, bool):
        raise RolloutFormatError(f"field 'kept' must be a bool or null, got {type(kept).__name__}")
    gt = row.get("ground_truth")
    return Rollout(
        run_id=row["run_id"],
        step=row["step"],
        split=row["split"],
        prompt_id=row["prompt_id"],
        group_id=row["group_id"],
        sample_index=row["sample_index"],
        prompt=row["prompt"],
        response=row["response"],
        ground_truth=None if gt is None else str(gt),
        reward=reward,
        reward_components={str(k): float(v) for k, v in components.items()},
        strict_score=None if strict is None else float(strict),
        response_tokens=int(row.get("response_tokens", 0)),
        truncated=bool(row.get("truncated", False)),
        stop_reason=stop,
        num_turns=int(row.get("num_turns", 1)),
        tool_calls=int(row.get("tool_calls", 0)),
        mean_logprob=None if logprob is None else float(logprob),
        data_source=str(row.get("data_source", "")),
        turns=turns,
        kept=kept,
    )


def _turns_from_row(raw: Any) -> tuple[Turn, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise RolloutFormatError("field 'turns' must be a list of turn objects")
    turns = []
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping) or not isinstance(item.get("text", ""), str):
            raise RolloutFormatError(f"field 'turns[{i}]' must be an object with 'text' (str)")
        tool = item.get("tool")
        success = item.get("success")
        if (tool is not None and not isinstance(tool, str)) or (success is not None and not isinstance(success, bool)):
            raise RolloutFormatError(f"field 'turns[{i}]': 'tool' must be a string or null, 'success' a bool or null")
        turns.append(
            Turn(
                text=item.get("text", ""),
                tool=tool,
                arguments=str(item.get("arguments", "")),
                result=str(item.get("result", "")),
                success=success,
                policy_tokens=int(item.get("policy_tokens", 0)),
                observation_tokens=int(item.get("observation_tokens", 0)),
            )
        )
    return tuple(turns)


@dataclass(frozen=True, slots=True)
class ReadProblem:
    """A line that could not be read; reported, never silently dropped."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass(slots=True)
class ReadResult:
    """Rollouts read from one or more files, plus the problems met on the way."""

    rollouts: list[Rollout] = field(default_factory=list)
    problems: list[ReadProblem] = field(default_factory=list)


def iter_jsonl(path: Path, problems: list[ReadProblem]) -> Iterator[tuple[int, Any]]:
    """Yield `(line_number, parsed_object)` for each readable JSON line of `path`.

    Undecodable lines (corrupt, or a half-written last line) are appended to `problems`.
    """
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                yield number, orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                problems.append(ReadProblem(str(path), number, f"invalid JSON: {exc}"))


def read_rollout_file(path: Path, result: ReadResult | None = None) -> ReadResult:
    """Read one neutral rollout JSONL file, collecting problems instead of raising."""
    result = result if result is not None else ReadResult()
    for number, row in iter_jsonl(path, result.problems):
        try:
            result.rollouts.append(rollout_from_row(row))
        except RolloutFormatError as exc:
            result.problems.append(ReadProblem(str(path), number, str(exc)))
    return result


def rollout_file(run_dir: Path, split: str, step: int) -> Path:
    """The rollout file of one step of one split: `run_dir/rollouts/<split>/step_<step>.jsonl`."""
    return run_dir / ROLLOUTS_DIR / split / f"step_{step}.jsonl"


def rollout_files(run_dir: Path, split: str) -> list[Path]:
    """Return `run_dir/rollouts/<split>/step_<N>.jsonl` files sorted by step number."""
    folder = run_dir / ROLLOUTS_DIR / split
    if not folder.is_dir():
        return []
    return sorted(folder.glob("step_*.jsonl"), key=lambda p: int(p.stem.split("_", 1)[1]))


def read_run_rollouts(run_dir: Path, splits: Iterable[Split] = SPLITS) -> ReadResult:
    """Read every neutral rollout file of a run's artefact folder."""
    result = ReadResult()
    for split in splits:
        for path in rollout_files(run_dir, split):
            read_rollout_file(path, result)
    return result


def write_rollouts(path: Path, rollouts: Iterable[Rollout]) -> None:
    """Write rollouts as JSONL atomically (temp file + rename) so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        for rollout in rollouts:
            fh.write(orjson.dumps(rollout.to_json()))
            fh.write(b"\n")


@dataclass(frozen=True, slots=True)
class MetricRow:
    """One step of metrics, with verl's metric names (`critic/score/mean`, `actor/entropy`, ...)."""

    step: int
    data: Mapping[str, float]


def read_metrics(path: Path, problems: list[ReadProblem] | None = None) -> list[MetricRow]:
    """Read a metrics JSONL file in verl's FileLogger format: `{"step": N, "data": {...}}` per line.

    Non-numeric values are reported as problems (not silently skipped). When a step appears twice
    (a restarted run appended it again) the later line wins.
    """
    problems = problems if problems is not None else []
    by_step: dict[int, MetricRow] = {}
    if not path.exists():
        return []
    for number, row in iter_jsonl(path, problems):
        if not isinstance(row, dict) or not isinstance(row.get("step"), int) or not isinstance(row.get("data"), dict):
            problems.append(ReadProblem(str(path), number, "expected {'step': int, 'data': {...}}"))
            continue
        data: dict[str, float] = {}
        for key, value in row["data"].items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                problems.append(ReadProblem(str(path), number, f"metric '{key}' is not a number"))
                continue
            data[str(key)] = float(value)
        by_step[row["step"]] = MetricRow(step=row["step"], data=data)
    return [by_step[s] for s in sorted(by_step)]


def append_metrics(path: Path, step: int, data: Mapping[str, float]) -> None:
    """Append one metric line (verl FileLogger format) and flush it to disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as fh:
        fh.write(orjson.dumps({"step": step, "data": dict(data)}))
        fh.write(b"\n")
