"""The run table: a run's rollout files read once, column by column, into compact polars tables.

This is the health report's only way into rollouts. `read_run_table(run_dir, answer)` hands
polars whole step files (grouped up to `CHUNK_BYTES`, scanned by path; a bigger file in byte pieces split at
line ends). Each chunk is parsed by `diagnostics/chunks.py` against `READ_SCHEMA` straight into the compact
columns below, the text features (`diagnostics/features.py`) are computed while the line is parsed, and the
text is dropped before the table grows: memory follows the numbers kept per row. Bad input stays a warning
with file and line: a corrupt or half-written line becomes a `ReadProblem` and every other line is
still read.

Columns, one row per rollout, in file order (training and validation rows in `RunTable.train` / `.val`):

- `run_id`, `data_source` (one-byte Enum when the run has at most 255 of them, else Categorical;
  `data_source` "" when absent);
- `group_key` (UInt64): a 64-bit hash of the row's `group_id`, the GRPO group with `step` (the strings are
  not kept: at 10 M rollouts their dictionaries alone were ~300 MB; two group ids of one step
  share a key with probability ~2^-64 per pair);
- `prompt_id` (Categorical) on validation rows, whose ids the paired evaluation compares prompt by prompt;
  null on training rows (Null-typed in a chunk without validation rows): `query.refs` reads a training row's id
  back from its file through `origin` (`diagnostics/origins.py`), so evidence ids stay the real ones;
- `origin` (UInt64): the file and line (or row index) the row was read from (`diagnostics/origins.py`);
- `step`, `sample_index`, `num_turns`, `tool_calls` (Int32; `num_turns` 1, `tool_calls` 0 when absent);
- `split` (Enum train/val), `stop_reason` (Enum of `StopReason`), `truncated` (the record's flag;
  `query.is_truncated()` adds stop reason `length`);
- `reward`, `strict_score`, `mean_logprob` (Float64; the last two null when not computed; `reward` and
  `strict_score` are Int8 in a chunk whose values are all integers in [-64, 63]: the same numbers, an eighth
  of the memory, and the same aggregates; chunks of both kinds concatenate to Float64);
- `turns`: List(Struct(tool, success, policy_tokens, observation_tokens, call)), the trajectory without its
  text: `call` is a 32-bit hash of the turn's tool and arguments (null without a call), so repeated calls can
  be told apart from new ones without keeping the arguments (Null-typed in a chunk where no row has a
  trajectory, so single-turn runs pay nothing for it);
- `component/<name>` (Float64, or Int8 as `reward`): one per reward component seen in the run, null where a
  row lacks it;
- `kept` (Boolean): the group filter kept the rollout's group for the update (null where not recorded);
- `length`, `empty`, `bigram_rep`, `degenerate`, `answers`, `answer_ok`, `answer_ends`,
  `response_hash`: text features
  (`features.py`).

`RunTableCache` keeps recently read tables of one process keyed by the files' names, sizes and mtimes, so
the session's steps (diagnose, evaluate, confirm, rollback) read each run's rollouts once.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import polars as pl

from diagnostics.chunks import (
    COMPONENT_PREFIX,
    KEPT_TURN_FIELDS,
    READ_SCHEMA,
    REQUIRED,
    SPLIT_DTYPE,
    STOP_DTYPE,
    TURN_FIELDS,
    chunk,
    chunk_files,
    concat,
    empty_table,
)
from diagnostics.lines import file_pieces
from diagnostics.origins import Source, register
from diagnostics.schema import SPLITS, ReadProblem, Rollout, Split, rollout_files
from harness.answers import AnswerProtocol

__all__ = [
    "CHUNK_BYTES",
    "COMPONENT_PREFIX",
    "KEPT_TURN_FIELDS",
    "READ_SCHEMA",
    "REQUIRED",
    "SPLIT_DTYPE",
    "STOP_DTYPE",
    "TURN_FIELDS",
    "RunTable",
    "RunTableCache",
    "Work",
    "empty_table",
    "read_run_table",
    "read_table",
    "table_from_rollouts",
]

CHUNK_BYTES = 32 << 20  # bytes of JSONL parsed at once: bounds the text held in memory
_IN_FLIGHT = 2  # chunks parsed at once (see `_chunks`)
_FEW_LABELS = ("run_id", "data_source")


@dataclass(frozen=True, slots=True)
class RunTable:
    """A run's rollouts as compact tables (training and validation rows apart, so no layer copies the table to
    split it), the problems met reading them, and the answer protocol their features used."""

    train: pl.DataFrame
    val: pl.DataFrame
    problems: tuple[ReadProblem, ...] = ()
    answer: AnswerProtocol | None = None

    @property
    def height(self) -> int:
        """Number of rollouts read."""
        return self.train.height + self.val.height

    @property
    def run_id(self) -> str | None:
        """The run id of the first rollout (training first), None when there is none."""
        rows = self.train if self.train.height else self.val
        return str(rows["run_id"][0]) if rows.height else None

    @property
    def frame(self) -> pl.DataFrame:
        """Every row, training first (a concatenation: prefer `train` / `val` on large runs)."""
        return concat([self.train, self.val])


def read_run_table(run_dir: Path, answer: AnswerProtocol | None = None, splits: Iterable[Split] = SPLITS) -> RunTable:
    """Read every rollout file of a run folder into a `RunTable`; never raises on bad lines (they become problems)."""
    paths = [p for split in splits for p in rollout_files(run_dir, split)]
    return read_table(paths, answer)


def read_table(paths: Sequence[Path], answer: AnswerProtocol | None = None) -> RunTable:
    """Read neutral rollout JSONL files (in this order) into a `RunTable`."""
    problems: list[ReadProblem] = []
    train: list[pl.DataFrame] = []
    val: list[pl.DataFrame] = []
    for part in _chunks(paths, answer, problems):
        is_val = part["split"] == "val"
        if is_val.any():
            val.append(part.filter(is_val))
            part = part.filter(~is_val)
        if part.height:  # a chunk's training rows never hold ids (`chunks._finish`): no column of nulls for them
            train.append(part.with_columns(pl.Series("prompt_id", [None] * part.height, dtype=pl.Null)))
        del part
    order = {str(p): i for i, p in enumerate(paths)}
    problems.sort(key=lambda p: (order.get(p.path, -1), p.line))
    return RunTable(_narrow_labels(concat(train)), _narrow_labels(concat(val)), tuple(problems), answer)


def table_from_rollouts(rollouts: Iterable[Rollout], answer: AnswerProtocol | None = None) -> pl.DataFrame:
    """The run table of typed records, through the same parser as files (for tests and small consumers)."""
    lines = tuple(orjson.dumps(r.to_json()) for r in rollouts)
    if not lines:
        return empty_table()
    data = b"".join(line + b"\n" for line in lines)
    problems: list[ReadProblem] = []
    source = register(Source("<rollouts>", texts=lines))
    frame = chunk(data, [(Path("<rollouts>"), 1, len(data))], answer, problems, [source])
    assert not problems, problems
    return frame


# --- reading --------------------------------------------------------------------------------------------------


Work = tuple[list[Path], bytes, list[tuple[Path, int, int]]]  # whole files to scan by path, or bytes and spans


def _chunks(
    paths: Sequence[Path], answer: AnswerProtocol | None, problems: list[ReadProblem]
) -> Iterator[pl.DataFrame]:
    """Yield the table of each chunk of about `CHUNK_BYTES` of input, in order.

    Two chunks are in flight at a time: polars parses one (without the GIL) while Python finishes the other,
    which keeps both cores of a small box busy; memory holds at most two chunks of text.
    """
    with ThreadPoolExecutor(max_workers=_IN_FLIGHT) as pool:
        pending: deque[Future[tuple[pl.DataFrame, list[ReadProblem]]]] = deque()
        for work in _plan(paths):
            pending.append(pool.submit(_chunk_alone, work, answer))
            if len(pending) >= _IN_FLIGHT:
                yield from _take(pending.popleft(), problems)
        while pending:
            yield from _take(pending.popleft(), problems)


def _plan(paths: Sequence[Path]) -> Iterator[Work]:
    """Group whole files up to `CHUNK_BYTES` (scanned by path, never read here); split bigger files into pieces."""
    group: list[Path] = []
    size = 0
    for path in paths:
        n = path.stat().st_size
        if n <= CHUNK_BYTES:
            group.append(path)
            size += n
            if size >= CHUNK_BYTES:
                yield group, b"", []
                group, size = [], 0
            continue
        if group:
            yield group, b"", []
            group, size = [], 0
        for line, data in file_pieces(path, CHUNK_BYTES):
            yield [], data, [(path, line, len(data))]
    if group:
        yield group, b"", []


def _chunk_alone(work: Work, answer: AnswerProtocol | None) -> tuple[pl.DataFrame, list[ReadProblem]]:
    found: list[ReadProblem] = []
    files, data, spans = work
    part = chunk_files(files, answer, found) if files else chunk(data, spans, answer, found)
    return part, found


def _take(
    future: Future[tuple[pl.DataFrame, list[ReadProblem]]], problems: list[ReadProblem]
) -> Iterator[pl.DataFrame]:
    part, found = future.result()
    problems.extend(found)
    if part.height:
        yield part


def _narrow_labels(frame: pl.DataFrame) -> pl.DataFrame:
    """Labels with few distinct values (run ids, data sources) as one-byte enumerations instead of categoricals."""
    narrow = []
    for name in _FEW_LABELS:
        values = frame[name].unique().drop_nulls().cast(pl.String).sort().to_list()
        if len(values) <= 255:
            narrow.append(pl.col(name).cast(pl.String).cast(pl.Enum(values)))
    return frame.with_columns(narrow) if narrow else frame


# --- cache ----------------------------------------------------------------------------------------------------


@dataclass
class RunTableCache:
    """Recently read run tables of one process, keyed by folder, protocol and the files' names, sizes and mtimes.

    A table is served again only while none of its files changed; `max_rows` bounds the rows kept (least
    recently used tables go first; a table larger than the bound is returned but not kept).
    """

    max_rows: int = 4_000_000
    _tables: OrderedDict[tuple[object, ...], RunTable] = field(default_factory=OrderedDict)

    def get(self, run_dir: Path, answer: AnswerProtocol | None = None) -> RunTable:
        """The run's table, read only when it is not cached or its files changed."""
        key = (str(run_dir.resolve()), answer.model_dump_json() if answer else "", _fingerprint(run_dir))
        table = self._tables.get(key)
        if table is not None:
            self._tables.move_to_end(key)
            return table
        table = read_run_table(run_dir, answer)
        if table.height <= self.max_rows:
            self._tables[key] = table
            while sum(t.height for t in self._tables.values()) > self.max_rows:
                self._tables.popitem(last=False)
        return table


def _fingerprint(run_dir: Path) -> tuple[tuple[str, int, int], ...]:
    out = []
    for split in SPLITS:
        for path in rollout_files(run_dir, split):
            stat = path.stat()
            out.append((path.name, stat.st_size, stat.st_mtime_ns))
    return tuple(out)
