"""Where the lines of rollout files are: byte pieces of big files, line numbers of parsed rows, bad-line messages.

The run table's reader (`diagnostics/table.py`) parses rows; this module answers "which file and line is row
i" and "why can this line not be read", so a bad line is reported as `path:line`. A span is
`(path, first_line, n_bytes)`: whole lines of one file inside a chunk of bytes, ending with a newline.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import orjson

from diagnostics.schema import RolloutFormatError
from diagnostics.schema import rollout_from_row as _validate_row

Span = tuple[Path, int, int]
_WS = np.frombuffer(b" \t\n\r\x0b\x0c", dtype=np.uint8)  # what bytes.strip() removes: a blank line


def file_pieces(path: Path, chunk_bytes: int) -> Iterator[tuple[int, bytes]]:
    """Yield `(first_line, bytes)` pieces of about `chunk_bytes` of whole lines, each ending with a newline.

    A half-written last line gets its newline here, so it cannot run into the next file's first line.
    """
    line, carry = 1, b""
    with open(path, "rb") as fh:
        while block := fh.read(chunk_bytes):
            data = carry + block if carry else block
            cut = data.rfind(b"\n") + 1
            piece, carry = (data, b"") if cut == len(data) else (data[:cut], data[cut:])
            if piece:
                yield line, piece
                line += piece.count(b"\n")
    if carry:
        yield line, carry + b"\n"


def whole_file(path: Path) -> tuple[bytes, list[Span]]:
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        data += b"\n"  # a half-written last line
    return data, [(path, 1, len(data))]


def sequential_lines(data: bytes, spans: Sequence[Span]) -> tuple[np.ndarray, np.ndarray]:
    """`(span index, line number)` of each line of `data` when none is blank (row i is line i of its span)."""
    starts = [0, *np.cumsum([n for *_, n in spans[:-1]]).tolist()]
    counts = [data.count(b"\n", start, start + n) for start, (_, _, n) in zip(starts, spans, strict=True)]
    span_of = np.repeat(np.arange(len(spans), dtype=np.int64), counts)
    first = np.repeat(np.array([line for _, line, _ in spans], dtype=np.int64), counts)
    return span_of, first + np.arange(len(span_of)) - np.repeat(np.cumsum([0, *counts[:-1]]), counts)


def line_numbers(data: bytes, spans: Sequence[Span]) -> tuple[np.ndarray, np.ndarray]:
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


def locate(paths: Sequence[Path], rows: int) -> tuple[np.ndarray, np.ndarray] | None:
    """`(file index, line number)` of every row scanned from `paths`, or None when rows and lines disagree."""
    files, lines = [], []
    for i, path in enumerate(paths):
        data, spans = whole_file(path)
        _, numbers = line_numbers(data, spans) if data else (None, np.zeros(0, dtype=np.int64))
        files.append(np.full(len(numbers), i, dtype=np.int64))
        lines.append(numbers)
    if sum(len(x) for x in lines) != rows:
        return None
    return np.concatenate(files), np.concatenate(lines)


def line_problem(text: bytes) -> str:
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
