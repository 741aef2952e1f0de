"""Read what verl writes: FileLogger metrics (tailed) and rollout/validation dumps → our artefacts.

- `MetricsTail` incrementally reads one `VERL_FILE_LOGGER_PATH` file (`{"step": N, "data": {...}}` lines).
  Its offset lives in a small JSON state file, so `poll` works from any process. A half-written last
  line is left for the next read; a file rewritten from the start (verl's FileLogger opens with "wb",
  so a restart truncates it) is detected by a changed prefix hash and read again from byte 0.
- `read_dump_file` maps one `<dump_dir>/<step>.jsonl` (V1 training: input, output, gts, score, step, uid;
  V1 validation: + reward and reward extras; V0 rows: no uid, reward extras) onto `Rollout` records.
- An agentic run's rows (`Agentic`) get their trajectory (turns, `num_turns`, `tool_calls`, stop reason) from
  `HarnessAgentLoop`'s record with the row's uid, else by splitting the decoded output at the tool-response
  markers of the format (`turns.py` says what each source holds).
- `derived_metrics` computes our names from a training dump: `rollout/dead_group_ratio` (group key
  `uid.rsplit("_", 2)[0]`) and `rollout/truncation_rate` (response tokens >= data.max_response_length;
  verl's own `response_length/clip_ratio` is wrong under V1, verl.md §1.6).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import orjson

from diagnostics.schema import ReadProblem, Rollout, Split, StopReason, iter_jsonl
from harness.atomic import write_atomic
from trainer_backend.verl import turns as turns_mod

TokenCounter = Callable[[str], int]

# Dump fields that are bookkeeping or the total reward, not reward components.
_NOT_COMPONENTS = {"input", "output", "gts", "score", "reward", "step", "uid", "request_id"}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class MetricsTail:
    """Incremental reader of one verl FileLogger file, state persisted in `state_path`."""

    path: Path
    state_path: Path
    offset: int = 0
    prefix_sha: str = _sha(b"")
    restarts: int = 0
    problems: list[ReadProblem] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.state_path.exists():
            state = json.loads(self.state_path.read_text())
            self.offset, self.prefix_sha, self.restarts = state["offset"], state["prefix_sha"], state["restarts"]

    def poll(self) -> list[dict[str, Any]]:
        """Return the complete `{"step", "data"}` rows written since the last poll."""
        try:
            blob = self.path.read_bytes()
        except FileNotFoundError:
            return []
        if len(blob) < self.offset or _sha(blob[: self.offset]) != self.prefix_sha:
            self.offset, self.restarts = 0, self.restarts + 1  # truncated and rewritten: start over
        end = blob.rfind(b"\n") + 1  # bytes after the last newline are a line still being written
        rows = []
        if end > self.offset:
            first_line = blob[: self.offset].count(b"\n") + 1
            for number, raw in enumerate(blob[self.offset : end].split(b"\n")[:-1], start=first_line):
                if not raw.strip():
                    continue
                try:
                    row = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    self.problems.append(ReadProblem(str(self.path), number, f"invalid JSON: {exc}"))
                    continue
                if isinstance(row, dict) and isinstance(row.get("step"), int) and isinstance(row.get("data"), dict):
                    rows.append(row)
                else:
                    self.problems.append(ReadProblem(str(self.path), number, "expected {'step': int, 'data': {...}}"))
            self.offset = end
            self.prefix_sha = _sha(blob[:end])
        self._save()
        return rows

    def pending_bytes(self) -> int:
        """Bytes after the last complete line (a half-written line), as of now."""
        try:
            return self.path.stat().st_size - self.offset
        except FileNotFoundError:
            return 0

    def _save(self) -> None:
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        state = {"offset": self.offset, "prefix_sha": self.prefix_sha, "restarts": self.restarts}
        write_atomic(self.state_path, json.dumps(state))


def dump_files(directory: Path) -> list[tuple[int, Path]]:
    """Return `(step, path)` of verl dump files `<step>.jsonl`, sorted by step."""
    if not directory.is_dir():
        return []
    found = [(int(p.stem), p) for p in directory.glob("*.jsonl") if p.stem.isdigit()]
    return sorted(found)


def group_key(row: dict[str, Any]) -> str:
    """GRPO group of a dump row: the prompt uuid of a V1 uid, else the prompt text (V0)."""
    uid = row.get("uid")
    return uid.rsplit("_", 2)[0] if isinstance(uid, str) else str(row.get("input", ""))


def _prompt_id(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Agentic:
    """How to read an agentic run's dump rows: the format's turn markers (None: not splittable) and the
    trajectory records of the dump's step, by uid."""

    markers: turns_mod.TurnMarkers | None
    records: dict[str, Any] = field(default_factory=dict)


def load_records(folder: Path, problems: list[ReadProblem]) -> dict[str, Any]:
    """The trajectory records under `folder` (`<trajectory dir>/<step>/`), by uid; bad lines become problems."""
    rows = [row for path in sorted(folder.glob("*.jsonl")) for _, row in iter_jsonl(path, problems)]
    return turns_mod.index_records(rows)


def read_dump_file(
    path: Path,
    split: Split,
    run_id: str,
    max_response_length: int,
    count_tokens: TokenCounter | None,
    agentic: Agentic | None = None,
) -> tuple[list[Rollout], list[ReadProblem]]:
    """Map one verl dump file onto `Rollout` records (tolerant: bad lines become problems)."""
    problems: list[ReadProblem] = []
    rollouts: list[Rollout] = []
    seen: dict[str, int] = defaultdict(int)
    for number, row in iter_jsonl(path, problems):
        try:
            rollouts.append(_rollout(row, split, run_id, max_response_length, count_tokens, seen, agentic))
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(ReadProblem(str(path), number, f"not a verl dump row ({type(exc).__name__}: {exc})"))
    return rollouts, problems


def _trajectory(
    row: dict[str, Any], agentic: Agentic, count_tokens: TokenCounter | None
) -> turns_mod.Trajectory | None:
    record = agentic.records.get(row.get("uid")) if isinstance(row.get("uid"), str) else None
    if record is not None:
        return turns_mod.from_record(record)
    if agentic.markers is not None:
        return turns_mod.split_turns(str(row["output"]), agentic.markers, count_tokens)
    return None


def _rollout(
    row: dict[str, Any],
    split: Split,
    run_id: str,
    max_len: int,
    count_tokens: TokenCounter | None,
    seen: dict[str, int],
    agentic: Agentic | None = None,
) -> Rollout:
    prompt, response, step = str(row["input"]), str(row["output"]), int(row["step"])
    group = group_key(row)
    uid = row.get("uid")
    sample_index = int(uid.rsplit("_", 2)[1]) if isinstance(uid, str) and uid.count("_") >= 2 else seen[group]
    seen[group] += 1
    components = {
        k: float(v)
        for k, v in row.items()
        if k not in _NOT_COMPONENTS and isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    tokens = count_tokens(response) if count_tokens is not None else 0
    truncated = count_tokens is not None and tokens >= max_len
    stop = StopReason.LENGTH if truncated else StopReason.EOS
    trajectory = None if agentic is None else _trajectory(row, agentic, count_tokens)
    if trajectory is not None:
        truncated = truncated or trajectory.stop_reason is StopReason.LENGTH
        stop = StopReason.LENGTH if truncated else (trajectory.stop_reason or StopReason.ANSWER)
    gts = row.get("gts")
    return Rollout(
        run_id=run_id,
        step=step,
        split=split,
        prompt_id=_prompt_id(prompt),
        group_id=f"{step}/{group if isinstance(uid, str) else _prompt_id(group)}",
        sample_index=sample_index,
        prompt=prompt,
        response=response,
        ground_truth=None if gts is None else str(gts),
        reward=float(row["score"]),
        reward_components=components,
        response_tokens=tokens,
        truncated=truncated,
        stop_reason=stop,
        num_turns=len(trajectory.turns) if trajectory else 1,
        tool_calls=trajectory.tool_calls if trajectory else 0,
        turns=trajectory.turns if trajectory else (),
    )


def dead_group_ratio(rows: Sequence[dict[str, Any]]) -> float:
    """Share of prompt groups whose samples all have the same score (zero GRPO advantage)."""
    groups: dict[str, set[float]] = defaultdict(set)
    for row in rows:
        groups[group_key(row)].add(float(row["score"]))
    return sum(len(s) == 1 for s in groups.values()) / max(1, len(groups))


def derived_metrics(path: Path, max_response_length: int, count_tokens: TokenCounter | None) -> dict[str, float]:
    """Our metrics from one training dump file (truncation only when tokens can be counted)."""
    rows = [row for _, row in iter_jsonl(path, []) if isinstance(row, dict) and "score" in row]
    if not rows:
        return {}
    out = {"rollout/dead_group_ratio": dead_group_ratio(rows)}
    if count_tokens is not None:
        hits = sum(count_tokens(str(r.get("output", ""))) >= max_response_length for r in rows)
        out["rollout/truncation_rate"] = hits / len(rows)
    return out


def strict_acc(data: dict[str, float]) -> float | None:
    """`val/strict_acc` from verl's `val-core/<ds>/acc/mean@1` (mean over data sources when several)."""
    values = [v for k, v in data.items() if k.startswith("val-core/") and k.endswith("/acc/mean@1")]
    return sum(values) / len(values) if values else None


@lru_cache(maxsize=4)
def load_token_counter(model_path: str) -> TokenCounter | None:
    """Count response tokens with the policy's tokenizer, from local files only; None when unavailable."""
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
    except (OSError, ValueError, ImportError):
        return None
    return lambda text: len(tok.encode(text, add_special_tokens=False))
