"""The run table: a run's rollout files read once, column by column, into one compact polars DataFrame.

This is the health report's only way into rollouts (issue #16). `read_run_table(run_dir, answer)` streams
`rollouts/{train,val}/step_<N>.jsonl` in chunks of about `CHUNK_BYTES` (small files batched together, big
files split at line ends); each chunk is parsed by polars against `READ_SCHEMA`, validated, given its text
features (`diagnostics/features.py`) and reduced to the compact columns below before the next chunk is read,
so memory grows with the numbers kept per row, not with the text.

Bad input stays a warning with file and line (issue #4): a chunk that does not parse is re-read in blocks,
and a block that does not parse line by line, so a corrupt or half-written line becomes a `ReadProblem` and
every other line is still read. Messages name the field (`schema.rollout_from_row` words them). String
fields take the JSON text of a non-string scalar (polars' reader does that); numbers, booleans, lists and
enumerations are checked strictly.

Columns (one row per rollout, train files first, then validation, each in step order, lines in file order):

| column | type | meaning |
|---|---|---|
| `run_id`, `prompt_id`, `group_id`, `data_source` | Categorical | as in the rollout record (`data_source` "" when absent) |
| `step`, `sample_index`, `num_turns`, `tool_calls` | Int64 / Int32 | as in the record (`num_turns` 1, `tool_calls` 0 when absent) |
| `split` | Enum(train, val) | |
| `reward`, `strict_score`, `mean_logprob` | Float64 | `strict_score`, `mean_logprob` null when not computed |
| `truncated` | Boolean | the record's flag; `is_truncated()` adds `stop_reason == "length"` |
| `stop_reason` | Enum(StopReason) | |
| `turns` | List(Struct(tool, success, policy_tokens, observation_tokens)) | the trajectory without its text (empty when single-turn) |
| `component/<name>` | Float64 | one column per reward component seen in the run; null where a row lacks it |
| `length`, `empty`, `bigram_rep`, `degenerate`, `answers`, `answer_ok` | | text features, `diagnostics/features.py` |

`RunTableCache` keeps recently read tables of one process keyed by the files' names, sizes and mtimes, so
the session's steps (diagnose, evaluate, confirm, rollback) read each run's rollouts once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson
import polars as pl

from diagnostics.features import text_features
from diagnostics.schema import SPLITS, ReadProblem, Rollout, RolloutFormatError, Split, StopReason, rollout_files
from diagnostics.schema import rollout_from_row as _validate_row
from harness.answers import AnswerProtocol

CHUNK_BYTES = 32 << 20  # bytes of JSONL parsed at once: bounds the text held in memory
_BLOCK_LINES = 1024  # a chunk that fails to parse is retried in blocks of this many lines

TURN_FIELDS: dict[str, pl.DataType] = {
    "text": pl.String(),
    "tool": pl.String(),
    "arguments": pl.String(),
    "result": pl.String(),
    "success": pl.Boolean(),
    "policy_tokens": pl.Int64(),
    "observation_tokens": pl.Int64(),
}
KEPT_TURN_FIELDS = ("tool", "success", "policy_tokens", "observation_tokens")
READ_SCHEMA: dict[str, pl.DataType] = {
    "run_id": pl.String(),
    "step": pl.Int64(),
    "split": pl.String(),
    "prompt_id": pl.String(),
    "group_id": pl.String(),
    "sample_index": pl.Int64(),
    "prompt": pl.String(),
    "response": pl.String(),
    "reward": pl.Float64(),
    "reward_components": pl.String(),  # the object's JSON text; validated and spread into component/<name>
    "strict_score": pl.Float64(),
    "response_tokens": pl.Int64(),
    "truncated": pl.Boolean(),
    "stop_reason": pl.String(),
    "num_turns": pl.Int64(),
    "tool_calls": pl.Int64(),
    "mean_logprob": pl.Float64(),
    "data_source": pl.String(),
    "turns": pl.List(pl.Struct(TURN_FIELDS)),
}
REQUIRED = ("run_id", "step", "split", "prompt_id", "group_id", "sample_index", "prompt", "response", "reward")
SPLIT_DTYPE = pl.Enum(list(SPLITS))
STOP_DTYPE = pl.Enum([s.value for s in StopReason])
COMPONENT_PREFIX = "component/"
_INT32 = ("step", "sample_index", "num_turns", "tool_calls", "response_tokens")
_NUMBER = r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?"
_KEY = r'"(?:[^"\\]|\\.)*"'
_VALUE = rf":\s*{_NUMBER}"  # a number in a value position (the texts are polars' serialisation: valid JSON)
# An object whose values are all numbers, once each value is cut to its colon: its "skeleton".
_SKELETON_RE = re.compile(rf"^\{{\s*(?:{_KEY}\s*:\s*(?:,\s*{_KEY}\s*:\s*)*)?\}}$")
_WS = np.frombuffer(b" \t\n\r\x0b\x0c", dtype=np.uint8)  # what bytes.strip() removes: a blank line
_FILE, _LINE, _RULE = "__file", "__line", "__rule"


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
        return _concat([self.train, self.val])


def is_truncated() -> pl.Expr:
    """True where the response hit the length cap (the flag, or stop reason `length`)."""
    return pl.col("truncated") | (pl.col("stop_reason") == StopReason.LENGTH.value)


def ref() -> pl.Expr:
    """The evidence id of each row, `run_id/step/prompt_id/sample_index` (as `findings.rollout_ref`)."""
    return pl.concat_str(
        pl.col("run_id").cast(pl.String), pl.col("step"), pl.col("prompt_id").cast(pl.String), pl.col("sample_index"),
        separator="/",
    )  # fmt: skip


REF_COLUMNS = ("run_id", "step", "prompt_id", "sample_index")


def refs(rows: pl.DataFrame, limit: int) -> list[str]:
    """Evidence ids of the first `limit` rows of `rows`."""
    return rows.head(limit).select(ref()).to_series().to_list()


def where(rows: pl.DataFrame, predicate: pl.Expr | str, *columns: str) -> pl.DataFrame:
    """The rows matching `predicate`, with the evidence columns and `columns` only (no copy of the others)."""
    return rows.lazy().filter(predicate).select(*REF_COLUMNS, *columns).collect()


def _concat(parts: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """Concatenate table chunks: components one chunk lacks are null there; `turns` is Null-typed until some
    chunk holds a trajectory."""
    return pl.concat(parts, how="diagonal_relaxed") if parts else empty_table()


def empty_table() -> pl.DataFrame:
    """A table with every fixed column and no rows."""
    return _compact(pl.DataFrame(schema=READ_SCHEMA), None)


def read_run_table(run_dir: Path, answer: AnswerProtocol | None = None, splits: Iterable[Split] = SPLITS) -> RunTable:
    """Read every rollout file of a run folder into a `RunTable`; never raises on bad lines (they become problems)."""
    paths = [p for split in splits for p in rollout_files(run_dir, split)]
    return read_table(paths, answer)


def read_table(paths: Sequence[Path], answer: AnswerProtocol | None = None) -> RunTable:
    """Read neutral rollout JSONL files (in this order) into a `RunTable`."""
    problems: list[ReadProblem] = []
    train: list[pl.DataFrame] = []
    val: list[pl.DataFrame] = []
    for raw in _raw_chunks(paths, problems):
        part = _compact(raw, answer)
        is_val = part["split"] == "val"
        if is_val.any():
            val.append(part.filter(is_val))
            part = part.filter(~is_val)
        if part.height:
            train.append(part)
        del raw, part  # the chunk's text goes before the next chunk is read
    order = {str(p): i for i, p in enumerate(paths)}
    problems.sort(key=lambda p: (order.get(p.path, -1), p.line))
    return RunTable(_concat(train), _concat(val), tuple(problems), answer)


def table_from_rollouts(rollouts: Iterable[Rollout], answer: AnswerProtocol | None = None) -> pl.DataFrame:
    """The run table of typed records, through the same parser as files (for tests and small consumers)."""
    data = b"".join(orjson.dumps(r.to_json()) + b"\n" for r in rollouts)
    if not data:
        return empty_table()
    problems: list[ReadProblem] = []
    raw = _parse(data, [(Path("<rollouts>"), 1, len(data))], problems)
    assert not problems, problems
    return _compact(raw, answer)


# --- reading --------------------------------------------------------------------------------------------------


def _raw_chunks(paths: Sequence[Path], problems: list[ReadProblem]) -> Iterator[pl.DataFrame]:
    """Yield parsed, validated frames of about `CHUNK_BYTES` of input each."""
    for data, spans in _byte_chunks(paths):
        raw = _parse(data, spans, problems)
        if raw.height:
            yield raw


def _byte_chunks(paths: Sequence[Path]) -> Iterator[tuple[bytes, list[tuple[Path, int, int]]]]:
    """Yield `(bytes, spans)`: whole lines of one or more files; a span is `(path, first_line, n_bytes)`."""
    parts: list[bytes] = []
    spans: list[tuple[Path, int, int]] = []
    size = 0
    for path in paths:
        for line, data in _file_pieces(path):
            parts.append(data)
            spans.append((path, line, len(data)))
            size += len(data)
            if size >= CHUNK_BYTES:
                yield b"".join(parts), spans
                parts, spans, size = [], [], 0
    if parts:
        yield b"".join(parts), spans


def _file_pieces(path: Path) -> Iterator[tuple[int, bytes]]:
    """Yield `(first_line, bytes)` pieces of about `CHUNK_BYTES` of whole lines, each ending with a newline.

    A half-written last line gets its newline here, so it cannot run into the next file's first line.
    """
    line, carry = 1, b""
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK_BYTES):
            data = carry + block if carry else block
            cut = data.rfind(b"\n") + 1
            piece, carry = (data, b"") if cut == len(data) else (data[:cut], data[cut:])
            if piece:
                yield line, piece
                line += piece.count(b"\n")
    if carry:
        yield line, carry + b"\n"


def _line_numbers(data: bytes, spans: Sequence[tuple[Path, int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """`(span index, line number)` of every non-blank line of `data` (every span ends with a newline)."""
    buf = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(buf == ord("\n"))
    starts = np.concatenate(([0], ends[:-1] + 1)).astype(np.int64)
    # A line is blank when bytes.strip() leaves nothing; one whose first byte is not whitespace is not blank.
    has_text = ends > starts
    has_text[has_text] = ~np.isin(buf[starts[has_text]], _WS)
    for i in np.flatnonzero((ends > starts) & ~has_text):
        has_text[i] = bool(data[starts[i] : ends[i]].strip())
    span_end = np.cumsum([n for _, _, n in spans])
    span = np.searchsorted(span_end, ends, side="right")
    first_index = np.searchsorted(span, np.arange(len(spans)))  # index of each span's first line
    first_line = np.array([line for _, line, _ in spans], dtype=np.int64)
    numbers = first_line[span] + np.arange(len(ends)) - first_index[span]
    return span[has_text], numbers[has_text]


def _read(data: bytes) -> pl.DataFrame | None:
    """Parse JSON lines against `READ_SCHEMA`, or None when polars refuses them."""
    try:
        return pl.read_ndjson(data, schema=READ_SCHEMA)
    except pl.exceptions.PolarsError:
        return None


def _with_lines(frame: pl.DataFrame, spans: np.ndarray, lines: np.ndarray) -> pl.DataFrame:
    return frame.with_columns(pl.Series(_FILE, spans, dtype=pl.UInt32), pl.Series(_LINE, lines, dtype=pl.UInt32))


def _parse(data: bytes, spans: Sequence[tuple[Path, int, int]], problems: list[ReadProblem]) -> pl.DataFrame:
    """Parse whole lines into a validated raw frame (the columns of `READ_SCHEMA`, plus span and line)."""
    frame = _read(data)
    if frame is not None and frame.height == data.count(b"\n"):  # no blank line: row i is line i of its span
        counts = [data.count(b"\n", start, start + n) for start, n in zip(_offsets(spans), (n for *_, n in spans), strict=True)]
        span_of = np.repeat(np.arange(len(spans), dtype=np.int64), counts)
        first = np.repeat(np.array([line for _, line, _ in spans], dtype=np.int64), counts)
        lines = first + np.arange(len(span_of)) - np.repeat(np.cumsum([0, *counts[:-1]]), counts)
        return _validate(_with_lines(frame, span_of, lines), spans, problems)
    span_of, lines = _line_numbers(data, spans)
    if frame is not None and frame.height == len(lines):
        frame = _with_lines(frame, span_of, lines)
    else:
        frame = _parse_tolerantly(data, span_of, lines, spans, problems)
    return _validate(frame, spans, problems)


def _offsets(spans: Sequence[tuple[Path, int, int]]) -> list[int]:
    return [0, *np.cumsum([n for *_, n in spans[:-1]]).tolist()]


def _parse_tolerantly(
    data: bytes,
    span_of: np.ndarray,
    lines: np.ndarray,
    spans: Sequence[tuple[Path, int, int]],
    problems: list[ReadProblem],
) -> pl.DataFrame:
    """Parse block by block, and a block that fails line by line, reporting each line that does not parse."""
    texts = [t for t in data.split(b"\n") if t.strip()]
    assert len(texts) == len(lines), "blank-line accounting disagrees with the line split"
    parts = []
    for start in range(0, len(texts), _BLOCK_LINES):
        stop = min(start + _BLOCK_LINES, len(texts))
        block = _read(b"\n".join(texts[start:stop]))
        if block is not None and block.height == stop - start:
            parts.append(_with_lines(block, span_of[start:stop], lines[start:stop]))
            continue
        for i in range(start, stop):
            one = _read(texts[i])
            if one is not None and one.height == 1:
                parts.append(_with_lines(one, span_of[i : i + 1], lines[i : i + 1]))
            else:
                problems.append(ReadProblem(str(spans[int(span_of[i])][0]), int(lines[i]), _line_problem(texts[i])))
    if not parts:
        return _with_lines(pl.DataFrame(schema=READ_SCHEMA), span_of[:0], lines[:0])
    return pl.concat(parts)


def _line_problem(text: bytes) -> str:
    """Why one line cannot be read, worded by the record validator where it names the field."""
    try:
        row = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return f"invalid JSON: {exc}"
    try:
        _validate_row(row)
    except RolloutFormatError as exc:
        return str(exc)
    except (TypeError, ValueError) as exc:
        return f"does not fit the rollout schema: {exc}"
    return "does not fit the rollout schema (a field has the wrong type)"


def _validate(frame: pl.DataFrame, spans: Sequence[tuple[Path, int, int]], problems: list[ReadProblem]) -> pl.DataFrame:
    """Drop rows whose values break the schema, each reported with its file and line (first rule broken)."""
    checks: list[tuple[pl.Expr, str]] = [(pl.col(name).is_null(), f"missing field '{name}'") for name in REQUIRED]
    checks += [
        (pl.col("split").cast(SPLIT_DTYPE, strict=False).is_null(), "field 'split' must be one of {splits}, got {split!r}"),
        (_bad_components(frame["reward_components"]), "field 'reward_components' must map names to numbers"),
        (
            pl.col("stop_reason").is_not_null() & pl.col("stop_reason").cast(STOP_DTYPE, strict=False).is_null(),
            "field 'stop_reason': {stop_reason!r} is not a valid StopReason",
        ),
    ]
    checks += [
        (pl.col(c).is_not_null() & ~pl.col(c).is_between(-(2**31), 2**31 - 1), f"field '{c}' is out of range")
        for c in _INT32
    ]
    rule = pl.lit(None, dtype=pl.UInt32)
    for i, (bad, _) in reversed(list(enumerate(checks))):
        rule = pl.when(bad).then(pl.lit(i, dtype=pl.UInt32)).otherwise(rule)
    frame = frame.with_columns(rule.alias(_RULE))
    bad_rows = frame.filter(pl.col(_RULE).is_not_null()).select(_FILE, _LINE, _RULE, "split", "stop_reason")
    for row in bad_rows.iter_rows(named=True):
        message = checks[row[_RULE]][1].format(splits=SPLITS, split=row["split"], stop_reason=row["stop_reason"])
        problems.append(ReadProblem(str(spans[row[_FILE]][0]), row[_LINE], message))
    return frame.filter(pl.col(_RULE).is_null()).drop(_RULE)


# --- compact form ---------------------------------------------------------------------------------------------


def _compact(raw: pl.DataFrame, answer: AnswerProtocol | None) -> pl.DataFrame:
    """Add the text features, spread the components, and keep the table's columns (module docstring)."""
    featured = text_features(raw, answer)
    table = featured.select(
        pl.col("run_id").cast(pl.Categorical),
        pl.col("step").cast(pl.Int32),
        pl.col("split").cast(SPLIT_DTYPE),
        pl.col("prompt_id").cast(pl.Categorical),
        pl.col("group_id").cast(pl.Categorical),
        pl.col("sample_index").cast(pl.Int32),
        "reward",
        "strict_score",
        pl.col("truncated").fill_null(False),
        pl.col("stop_reason").fill_null(StopReason.EOS.value).cast(STOP_DTYPE),
        pl.col("num_turns").fill_null(1).cast(pl.Int32),
        pl.col("tool_calls").fill_null(0).cast(pl.Int32),
        "mean_logprob",
        pl.col("data_source").fill_null("").cast(pl.Categorical),
        _turns(featured["turns"]),
        pl.col("length").cast(pl.Int32),
        "empty",
        "bigram_rep",
        "degenerate",
        pl.col("answers").clip(upper_bound=255).cast(pl.UInt8),  # "several" is all the rules ask
        "answer_ok",
    )
    components = _components(raw["reward_components"])
    return table if components is None else pl.concat([table, components], how="horizontal")


KEPT_TURN = pl.List(pl.Struct({name: TURN_FIELDS[name] for name in KEPT_TURN_FIELDS}))


def _turns(turns: pl.Series) -> pl.Series:
    """The trajectories without their text (empty lists for single-turn rows)."""
    if turns.null_count() == turns.len():  # no trajectory in this chunk: a Null column costs no memory
        return pl.Series("turns", [None] * turns.len(), dtype=pl.Null)
    kept = pl.struct(
        pl.element().struct.field("tool"),
        pl.element().struct.field("success"),
        pl.element().struct.field("policy_tokens").fill_null(0),
        pl.element().struct.field("observation_tokens").fill_null(0),
    )
    return turns.to_frame().select(pl.col("turns").fill_null([]).list.eval(kept)).to_series()


def _skeletons(texts: pl.Series) -> pl.Series:
    return texts.str.replace_all(_VALUE, ":")


def _bad_components(texts: pl.Series) -> pl.Series:
    """True where `reward_components` is not an object of numbers (checked once per distinct key layout)."""
    distinct = texts.drop_nulls().unique()
    bad = [t for t, s in zip(distinct.to_list(), _skeletons(distinct).to_list(), strict=True) if not _SKELETON_RE.match(s)]
    return texts.is_in(bad).fill_null(False) if bad else pl.repeat(False, texts.len(), eager=True)


def _components(texts: pl.Series) -> pl.DataFrame | None:
    """One Float64 column `component/<name>` per component key (the texts are validated objects of numbers).

    Each value is cut out of the object's text by its key, which follows `{` or `,` in valid JSON.
    """
    distinct = texts.drop_nulls().unique()
    firsts = distinct.filter(_skeletons(distinct).is_first_distinct())  # one object per key layout
    keys = {k for text in firsts.to_list() for k in re.findall(_KEY + r"(?=\s*:)", text)}
    if not keys:
        return None
    columns = [
        texts.str.extract(rf"(?:^\{{|,)\s*{re.escape(key)}\s*:\s*({_NUMBER})", 1)
        .cast(pl.Float64)
        .alias(COMPONENT_PREFIX + orjson.loads(key))
        for key in sorted(keys, key=orjson.loads)
    ]
    return pl.DataFrame(columns)


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
