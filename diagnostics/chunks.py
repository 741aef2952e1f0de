"""One chunk of rollout JSONL parsed into run-table columns (`diagnostics/table.py` plans the chunks and
assembles the table; its docstring lists the columns).

A chunk is whole files scanned by path (`chunk_files`) or bytes with the spans of the files and lines they
hold (`chunk`). Each is parsed against `READ_SCHEMA` straight into the table's compact columns, the first
value rule a row breaks is noted, the text features (`diagnostics/features.py`) are computed while the line
is parsed, and the text is dropped before the chunk is returned.

Bad input stays a warning with file and line: a chunk polars refuses is re-read line by line in
blocks, so a corrupt or half-written line becomes a `ReadProblem` and every other line is still read;
messages name the field (`schema.rollout_from_row` words them). String fields take the JSON text of a
non-string scalar (polars' reader does that); numbers, booleans, lists and enumerations are checked strictly.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import orjson
import polars as pl

from diagnostics.features import NEEDS_TEXT, complete_features, native_features
from diagnostics.lines import line_numbers, line_problem, locate, sequential_lines, whole_file
from diagnostics.origins import ORIGIN, Source, origins, register
from diagnostics.schema import SPLITS, ReadProblem, StopReason
from harness.answers import AnswerProtocol

_ENGINE: Literal["streaming"] = "streaming"  # parse and projection spread over the cores
_BLOCK_LINES = 1024  # a chunk that fails to parse is retried in blocks of this many lines

# The trajectory fields the table reads; the turn's text and result are not parsed at all, its arguments only
# into the `call` hash (`_turns`).
TURN_FIELDS: dict[str, pl.DataType] = {
    "tool": pl.String(),
    "arguments": pl.String(),
    "success": pl.Boolean(),
    "policy_tokens": pl.Int64(),
    "observation_tokens": pl.Int64(),
}
KEPT_TURN_FIELDS = ("tool", "success", "policy_tokens", "observation_tokens", "call")
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
    "kept": pl.Boolean(),
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
_FILE, _LINE, _PATH, _RULE, _BAD = "__file", "__line", "__path", "__broken", "__bad"
_SHRUNK = ("step", "sample_index", "num_turns", "tool_calls", "length")
_SCORES = ("reward", "strict_score")  # with the components: Int8 in a chunk where they are small integers
_CHECKED = (*REQUIRED, "stop_reason", "reward_components", "num_turns", "tool_calls", "response_tokens")


def concat(parts: Sequence[pl.DataFrame]) -> pl.DataFrame:
    """Concatenate table chunks: components one chunk lacks are null there; `turns` is Null-typed until some
    chunk holds a trajectory."""
    return pl.concat(parts, how="diagonal_relaxed") if parts else empty_table()


def empty_table() -> pl.DataFrame:
    """A table with every fixed column and no rows."""
    return _finish(_project(pl.DataFrame(schema=READ_SCHEMA).lazy(), None), None).with_columns(
        pl.Series(ORIGIN, [], dtype=pl.UInt64)
    )


def chunk_files(paths: list[Path], answer: AnswerProtocol | None, problems: list[ReadProblem]) -> pl.DataFrame:
    """Whole files scanned by path; their bytes are read only to locate a bad line, or to read around one."""
    try:
        scan = pl.scan_ndjson(paths, schema=READ_SCHEMA, include_file_paths=_PATH)
        frame: pl.DataFrame | None = _project(scan, answer)
    except pl.exceptions.PolarsError:
        frame = None
    if frame is not None and not (frame[_RULE].any() or _bad_components(frame["reward_components"]).any()):
        return _finish(_with_row_origins(frame).drop(_RULE, _BAD), answer)
    located = locate(paths, frame.height) if frame is not None else None
    if frame is None or located is None:
        return concat([chunk(*whole_file(path), answer, problems) for path in paths])
    spans = [(path, 1, 0) for path in paths]
    return _finish(_drop_bad(_with_lines(frame.drop(_PATH), *located), spans, problems), answer)


def _with_row_origins(frame: pl.DataFrame) -> pl.DataFrame:
    """`origin` of rows scanned from whole files: the file and the row's index among its non-blank lines (the
    scan keeps file order and skips blank lines, so row k of a file is its k-th non-blank line)."""
    files = frame.group_by(_PATH, maintain_order=True).len()
    counts = files["len"].to_numpy()
    ids = np.array([register(Source(path, by_index=True)) for path in files[_PATH].to_list()], dtype=np.uint64)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    index = np.arange(frame.height, dtype=np.uint64) - starts.astype(np.uint64)
    return frame.drop(_PATH).with_columns(origins(np.repeat(ids, counts), index))


def chunk(
    data: bytes,
    spans: Sequence[tuple[Path, int, int]],
    answer: AnswerProtocol | None,
    problems: list[ReadProblem],
    sources: Sequence[int] | None = None,
) -> pl.DataFrame:
    """Parse whole lines (bytes) straight into table columns; report each bad line with its file and line.

    `sources` are the spans' registered origins (`origins.register`; by default each span's file, by line)."""
    try:
        frame: pl.DataFrame | None = _project(pl.scan_ndjson(data, schema=READ_SCHEMA), answer)
    except pl.exceptions.PolarsError:
        frame = None
    if frame is not None and frame.height == data.count(b"\n"):  # no blank line: row i is line i of its span
        frame = _with_lines(frame, *sequential_lines(data, spans))
    else:
        span_of, lines = line_numbers(data, spans)
        if frame is not None and frame.height == len(lines):
            frame = _with_lines(frame, span_of, lines)
        else:
            frame = _project(_parse_tolerantly(data, span_of, lines, spans, problems).lazy(), answer)
    return _finish(_drop_bad(frame, spans, problems, sources), answer)


def _read(data: bytes) -> pl.DataFrame | None:
    """Parse JSON lines against `READ_SCHEMA`, or None when polars refuses them."""
    try:
        return pl.read_ndjson(data, schema=READ_SCHEMA)
    except pl.exceptions.PolarsError:
        return None


def _with_lines(frame: pl.DataFrame, spans: np.ndarray, lines: np.ndarray) -> pl.DataFrame:
    return frame.with_columns(pl.Series(_FILE, spans, dtype=pl.UInt32), pl.Series(_LINE, lines, dtype=pl.UInt32))


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
                problems.append(ReadProblem(str(spans[int(span_of[i])][0]), int(lines[i]), line_problem(texts[i])))
    if not parts:
        return _with_lines(pl.DataFrame(schema=READ_SCHEMA), span_of[:0], lines[:0])
    return pl.concat(parts)


def _rules() -> list[tuple[pl.Expr, str]]:
    """The value checks a parsed row must pass, in order, each with its message (the first broken is reported)."""
    checks: list[tuple[pl.Expr, str]] = [(pl.col(name).is_null(), f"missing field '{name}'") for name in REQUIRED]
    checks += [
        (
            pl.col("split").cast(SPLIT_DTYPE, strict=False).is_null(),
            "field 'split' must be one of {splits}, got {split!r}",
        ),
        (pl.lit(False), _COMPONENTS_MESSAGE),  # checked per distinct text after parsing (`_bad_components`)
        (
            pl.col("stop_reason").is_not_null() & pl.col("stop_reason").cast(STOP_DTYPE, strict=False).is_null(),
            "field 'stop_reason': {stop_reason!r} is not a valid StopReason",
        ),
    ]
    checks += [
        (pl.col(c).is_not_null() & ~pl.col(c).is_between(-(2**31), 2**31 - 1), f"field '{c}' is out of range")
        for c in _INT32
    ]
    return checks


_COMPONENTS_MESSAGE = "field 'reward_components' must map names to numbers"
_RULES = _rules()
_COMPONENTS_RULE = next(i for i, (_, m) in enumerate(_RULES) if m == _COMPONENTS_MESSAGE)


def _project(lf: pl.LazyFrame, answer: AnswerProtocol | None) -> pl.DataFrame:
    """Parse and reduce to the table's columns, the native text features, the first broken rule, and the text
    that `complete_features` and the component reader still need (only on the rows that need it)."""
    rule = pl.any_horizontal(bad for bad, _ in _RULES)
    needs = pl.col(NEEDS_TEXT)
    passthrough = [c for c in (_FILE, _LINE, _PATH) if c in lf.collect_schema()]
    broken = pl.col(_RULE)
    return (
        lf.with_columns(*native_features(answer), rule.alias(_RULE))
        .select(
            *passthrough,
            pl.col("run_id").cast(pl.Categorical),
            pl.col("step").cast(pl.Int32, strict=False),
            pl.col("split").cast(SPLIT_DTYPE, strict=False),
            pl.when(pl.col("split") == "val").then(pl.col("prompt_id")).alias("prompt_id"),  # see `_finish`
            pl.col("group_id").hash().alias("group_key"),
            pl.col("sample_index").cast(pl.Int32, strict=False),
            "reward",
            "strict_score",
            pl.col("truncated").fill_null(False),
            pl.col("stop_reason").fill_null(StopReason.EOS.value).cast(STOP_DTYPE, strict=False),
            pl.col("num_turns").fill_null(1).cast(pl.Int32, strict=False),
            pl.col("tool_calls").fill_null(0).cast(pl.Int32, strict=False),
            "mean_logprob",
            pl.col("data_source").fill_null("").cast(pl.Categorical),
            _turns(),
            "kept",
            "length",
            "empty",
            "bigram_rep",
            "degenerate",
            pl.col("answers").clip(upper_bound=255).cast(pl.UInt8),  # "several" is all the rules ask
            "answer_ok",
            "answer_ends",
            "response_hash",
            "reward_components",
            needs,
            pl.when(needs).then(pl.col("response")).alias("response"),
            pl.when(needs).then(pl.col("response_tokens")).alias("response_tokens"),
            _RULE,
            pl.when(broken).then(pl.struct(*_CHECKED)).alias(_BAD),
        )
        .collect(engine=_ENGINE)
    )


def _turns() -> pl.Expr:
    """The kept turn fields, with the arguments reduced to the `call` hash of tool and arguments."""
    el = pl.element().struct
    call = pl.concat_str(el.field("tool"), pl.lit("\x00"), el.field("arguments").fill_null(""))
    return pl.col("turns").list.eval(
        pl.struct(
            el.field("tool"),
            el.field("success"),
            el.field("policy_tokens"),
            el.field("observation_tokens"),
            pl.when(el.field("tool").is_not_null()).then((call.hash() % (1 << 32)).cast(pl.UInt32)).alias("call"),
        )
    )


def _drop_bad(
    frame: pl.DataFrame,
    spans: Sequence[tuple[Path, int, int]],
    problems: list[ReadProblem],
    sources: Sequence[int] | None = None,
) -> pl.DataFrame:
    """Report and drop the rows that broke a rule (with the chunk's file and line of each); the others get their
    `origin` (span file and line)."""
    bad_components = _bad_components(frame["reward_components"])
    broken = frame[_RULE] | bad_components
    if broken.any():
        bad = frame.filter(broken).select(
            _FILE, _LINE, _RULE, pl.col(_BAD).struct.unnest(), components=bad_components.filter(broken)
        )
        checks = [pl.col("components") if i == _COMPONENTS_RULE else check for i, (check, _) in enumerate(_RULES)]
        first = pl.coalesce(pl.when(check).then(pl.lit(i, dtype=pl.UInt32)) for i, check in enumerate(checks))
        # a row only its components broke had no other field checked while parsing
        index = pl.when(pl.col(_RULE)).then(first).otherwise(pl.lit(_COMPONENTS_RULE, dtype=pl.UInt32))
        for span, line, rule, split, stop in bad.select(_FILE, _LINE, index, "split", "stop_reason").iter_rows():
            message = _RULES[rule][1].format(splits=SPLITS, split=split, stop_reason=stop)
            problems.append(ReadProblem(str(spans[span][0]), line, message))
    kept = frame.filter(~broken)
    ids = np.array(sources if sources is not None else [register(Source(str(p))) for p, *_ in spans], dtype=np.uint64)
    origin = origins(ids[kept[_FILE].to_numpy()], kept[_LINE].to_numpy())
    return kept.drop(_FILE, _LINE, _RULE, _BAD).with_columns(origin)


def _finish(frame: pl.DataFrame, answer: AnswerProtocol | None) -> pl.DataFrame:
    """Complete the text features of the rows that need it, spread the components, drop the text."""
    needs = frame[NEEDS_TEXT].arg_true()
    if needs.len():
        done = complete_features(frame[needs].select("response", "response_tokens"), answer)
        frame = frame.with_columns(frame[c].scatter(needs, done[c]) for c in done.columns)
    components = _components(frame["reward_components"])
    turns = frame["turns"]
    if turns.null_count() == turns.len():  # no trajectory in this chunk: a Null column costs no memory
        frame = frame.with_columns(pl.Series("turns", [None] * frame.height, dtype=pl.Null))
    ids = frame["prompt_id"]  # validation rows' ids, as Categorical; none of a training-only chunk's is kept
    prompt = ids.cast(pl.Categorical) if ids.null_count() < ids.len() else pl.Series("prompt_id", [None] * ids.len())
    frame = frame.drop("reward_components", NEEDS_TEXT, "response", "response_tokens").with_columns(prompt)
    # the smallest integer type that holds this chunk's values (chunks are widened to agree when concatenated)
    frame = frame.with_columns(frame[name].shrink_dtype() for name in _SHRUNK)
    frame = frame if components is None else pl.concat([frame, components], how="horizontal")
    scores = [c for c in frame.columns if c in _SCORES or c.startswith(COMPONENT_PREFIX)]
    return frame.with_columns(_small_integers(frame[c]) for c in scores)


def _small_integers(values: pl.Series) -> pl.Series:
    """A Float64 column whose values are all integers in [-64, 63] (0/1 rewards, counts) as Int8: the same
    numbers in an eighth of the memory. Polars sums them as Int64 and takes means, spreads and comparisons in
    Float64, so every aggregate is the same number; a difference of two still fits in Int8."""
    known = values.drop_nulls()
    if values.dtype != pl.Float64 or not known.len():
        return values
    if not ((known == known.round(0)) & known.is_between(-64, 63)).all():  # NaN is never equal to itself
        return values
    return values.cast(pl.Int8)


def _skeletons(texts: pl.Series) -> pl.Series:
    return texts.str.replace_all(_VALUE, ":")


def _bad_components(texts: pl.Series) -> pl.Series:
    """True where `reward_components` is not an object of numbers (checked once per distinct key layout)."""
    distinct = texts.drop_nulls().unique()
    bad = [
        t for t, s in zip(distinct.to_list(), _skeletons(distinct).to_list(), strict=True) if not _SKELETON_RE.match(s)
    ]
    return texts.is_in(bad).fill_null(False) if bad else pl.repeat(False, texts.len(), eager=True)


def _components(texts: pl.Series) -> pl.DataFrame | None:
    """One Float64 column `component/<name>` per component key (the texts are validated objects of numbers).

    Each distinct object is read once; a value is cut out of the object's text by its key, which follows `{`
    or `,` in valid JSON.
    """
    distinct = texts.drop_nulls().unique()
    firsts = distinct.filter(_skeletons(distinct).is_first_distinct())  # one object per key layout
    keys = sorted({k for text in firsts.to_list() for k in re.findall(_KEY + r"(?=\s*:)", text)}, key=orjson.loads)
    if not keys:
        return None
    names = [COMPONENT_PREFIX + orjson.loads(key) for key in keys]
    source = distinct if distinct.len() * 4 < texts.len() else texts  # few distinct objects: read those, join back
    values = source.to_frame("text").select(
        pl.col("text"),
        *(
            pl.col("text")
            .str.extract(rf"(?:^\{{|,)\s*{re.escape(key)}\s*:\s*({_NUMBER})", 1)
            .cast(pl.Float64)
            .alias(name)
            for key, name in zip(keys, names, strict=True)
        ),
    )
    if source is texts:
        return values.drop("text")
    return texts.to_frame("text").join(values, on="text", how="left", maintain_order="left").drop("text")
