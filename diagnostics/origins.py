"""Where a run-table row came from, so the few evidence ids a report shows are read back from the files.

Training rows do not carry their `prompt_id` strings (at 10 M rollouts the ids' dictionaries alone
were ~300 MB, kept by polars for the life of the process). Each row instead carries `origin` (UInt64): the
source it was read from (a registered file, or the texts of `table.table_from_rollouts`) in the high 32 bits
and its place there in the low 32, either its line number or, for files polars scanned whole, its index among
the file's non-blank lines (polars skips blank lines). `prompt_ids(rows)` reads the lines back, each source
once, and checks that the line still holds the row (same step, sample index and group key): a file
rewritten since it was read yields `?` rather than another rollout's id.

The registry is process-wide and append-only: one small entry per file read (a path and a flag), never per row.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
import polars as pl

from diagnostics.lines import line_numbers, whole_file

ORIGIN = "origin"
UNRESOLVED = "?"  # the prompt id of a row whose line no longer holds it


@dataclass(frozen=True, slots=True)
class Source:
    """A registered source: a file (`path`) whose rows are located by line number, or by their index among
    the non-blank lines when `by_index`; or in-memory lines (`texts`, located by line number)."""

    path: str
    by_index: bool = False
    texts: tuple[bytes, ...] | None = None


_SOURCES: list[Source] = []
_IDS: dict[Source, int] = {}
_LOCK = threading.Lock()  # chunks are parsed on two threads


def register(source: Source) -> int:
    """The id of `source`, registered on first use."""
    with _LOCK:
        found = _IDS.get(source)
        if found is None:
            found = _IDS[source] = len(_SOURCES)
            _SOURCES.append(source)
        return found


def origins(source_ids: np.ndarray, places: np.ndarray) -> pl.Series:
    """The `origin` column: source id in the high 32 bits, line number or index in the low 32."""
    return pl.Series(ORIGIN, (source_ids.astype(np.uint64) << np.uint64(32)) | places.astype(np.uint64))


def prompt_ids(rows: pl.DataFrame) -> list[str]:
    """The `prompt_id` of each row (`origin`, `step`, `sample_index`, `group_key`), read back from its source."""
    wanted = rows.select(ORIGIN, "step", "sample_index", "group_key").rows()
    by_source: dict[int, list[int]] = {}
    for origin, *_ in wanted:
        by_source.setdefault(int(origin) >> 32, []).append(int(origin) & 0xFFFFFFFF)
    lines: dict[tuple[int, int], bytes] = {}
    for source_id, places in by_source.items():
        for place, text in zip(places, _lines(_SOURCES[source_id], places), strict=True):
            lines[(source_id, place)] = text
    out = []
    for origin, step, sample, group in wanted:
        out.append(_prompt_id(lines[(int(origin) >> 32, int(origin) & 0xFFFFFFFF)], step, sample, group))
    return out


def _lines(source: Source, places: Sequence[int]) -> list[bytes]:
    """The text at each place of one source (b"" where the source no longer has it)."""
    if source.texts is not None:
        return [source.texts[p - 1] if 0 < p <= len(source.texts) else b"" for p in places]
    try:
        data, spans = whole_file(Path(source.path))
    except OSError:
        return [b"" for _ in places]
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == ord("\n"))
    starts = np.concatenate(([0], ends[:-1] + 1))
    if source.by_index:  # index among the non-blank lines -> line number
        _, numbers = line_numbers(data, spans) if data else (None, np.zeros(0, dtype=np.int64))
        places = [int(numbers[p]) if p < len(numbers) else 0 for p in places]
    return [bytes(data[starts[p - 1] : ends[p - 1]]) if 0 < p <= len(ends) else b"" for p in places]


def _prompt_id(text: bytes, step: object, sample_index: object, group_key: object) -> str:
    try:
        row = orjson.loads(text)
    except orjson.JSONDecodeError:
        return UNRESOLVED
    if not isinstance(row, dict) or row.get("step") != step or row.get("sample_index") != sample_index:
        return UNRESOLVED
    group, prompt = _text(row.get("group_id")), _text(row.get("prompt_id"))
    if group is None or prompt is None or pl.Series([group]).hash()[0] != group_key:  # as chunks._project keys it
        return UNRESOLVED
    return prompt


def _text(value: object) -> str | None:
    """A string field as the table reads it: a string, or the JSON text of another scalar."""
    return value if isinstance(value, str) else orjson.dumps(value).decode() if value is not None else None
