"""What a valid data row is: one definition, read by the trainers and by the session's preflight.

A harness's data files are JSONL, one object per line (blank lines skipped; docs/harness.md "Data rows"):

- training and held-out rows (`data.train`, `data.val`): `prompt` (text; verl also takes a list of
  `{"role", "content"}` messages), `ground_truth` (any JSON value), optional `data_source` (text, default
  `""`) and `prompt_id` (non-empty text, default `<file stem>-<line index>`); any other field goes to the
  reward's `extra_info`;
- warm-start rows (the local backend's `warmstart_data`): `prompt` and `response`, both text.

`iter_rows` streams a file and raises `RowError` naming the file, the line and the field at the first bad
row; `read_rows` is the trainers' read (with the defaults filled in). `check_selection` is the data
selection's rule: the weights of `harness/data.yaml` must draw at least one training row.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from harness.failures import BadInput, shown

RowKind = Literal["data", "chat_data", "warmstart"]  # chat_data: a prompt may be chat messages (verl)


class RowError(BadInput):
    """A data row breaks the row rules; the message names the file, the line and the field.

    Attributes:
        path: the data file, as the message names it.
    """

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


def check_row(row: object, kind: RowKind = "data") -> str | None:
    """Return what is wrong with one parsed row (naming the field), or None when it is valid."""
    if not isinstance(row, dict):
        return f"expected a JSON object, got {shown(row)}"
    prompt = row.get("prompt")
    if kind == "warmstart":
        for name in ("prompt", "response"):
            if not isinstance(row.get(name), str):
                return _field(row, name, "text", "warm-start rows are {'prompt': str, 'response': str}")
        return None
    if not (isinstance(prompt, str) or (kind == "chat_data" and _is_messages(prompt))):
        what = "text or a list of {'role', 'content'} messages" if kind == "chat_data" else "text"
        return _field(row, "prompt", what, "every row needs one")
    if "ground_truth" not in row:
        return _field(row, "ground_truth", "", "every row needs the answer it is scored against")
    if "data_source" in row and not isinstance(row["data_source"], str):
        return _field(row, "data_source", "text", "or leave it out (default '')")
    if "prompt_id" in row and not (isinstance(row["prompt_id"], str) and row["prompt_id"]):
        return _field(row, "prompt_id", "non-empty text", "or leave it out (default <file stem>-<index>)")
    return None


def iter_rows(path: Path, kind: RowKind = "data", *, label: str | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Stream `(line number, row)` of a JSONL data file, checking each row as it is read.

    `label` is how messages name the file (default: its path).

    Raises:
        RowError: a line is not JSON or breaks the row rules (file, line and field named), or the file
            holds no row.
        OSError: the file cannot be read.
    """
    name = label or str(path)
    seen = False
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise RowError(f"{name}:{number}: not UTF-8 ({exc.reason}); save the file as UTF-8", name) from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RowError(f"{name}:{number}: not valid JSON ({exc.msg}); one JSON object per line", name) from None
            problem = check_row(row, kind)
            if problem is not None:
                raise RowError(f"{name}:{number}: {problem}", name)
            seen = True
            yield number, row
    if not seen:
        raise RowError(f"{name}: no rows; a data file needs at least one JSON object per line", name)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Read a training or held-out data file, with `prompt_id` and `data_source` defaults filled in.

    Raises:
        RowError: a row is malformed (file, line and field named), or the file holds none.
    """
    return [with_defaults(row, path, number) for number, row in iter_rows(path)]


def with_defaults(row: dict[str, Any], path: Path, number: int) -> dict[str, Any]:
    """Fill in a valid row's optional fields: `prompt_id` (`<file stem>-<line index>`) and `data_source` ("")."""
    row.setdefault("prompt_id", f"{path.stem}-{number - 1}")
    row.setdefault("data_source", "")
    return row


def check_selection(
    counts: Mapping[str, int],
    weights: Mapping[str, float],
    field: str,
    where: str = "",
    weights_file: str = "harness/data.yaml",
) -> None:
    """Refuse data-selection weights that draw no training row.

    `counts` maps each value of the selection `field` that training rows hold (as text) to its row count;
    `where` names the training file (when known), `weights_file` the weights' file. Values without a positive weight are
    never drawn.

    Raises:
        RowError: no positively weighted value is held by any training row.
    """
    if any(weights[v] > 0 and counts.get(v, 0) > 0 for v in weights):
        return
    have = sorted(counts)
    listed = ", ".join(shown(v) for v in have[:12]) + (f", ... ({len(have)} values)" if len(have) > 12 else "")
    held = f"its rows hold {listed}" if have else f"no row has the field '{field}'"
    prefix = f"{where}: " if where else ""
    raise RowError(
        f"{prefix}data selection weights {shown(dict(weights))} ({weights_file}) match no row's field '{field}' "
        f"(the manifest's data.select_by); {held}; weigh values the rows hold, or name another field",
        where,
    )


def _is_messages(prompt: object) -> bool:
    return isinstance(prompt, list) and all(isinstance(m, dict) and {"role", "content"} <= m.keys() for m in prompt)


def _field(row: dict[str, Any], name: str, what: str, fix: str) -> str:
    if name not in row:
        return f"field '{name}' is missing (fields: {_names(row)}); {fix}"
    return f"field '{name}' must be {what}, got {shown(row[name])}; {fix}"


def _names(row: dict[str, Any]) -> str:
    if not row:
        return "none"
    return ", ".join(shown(str(k)) for k in list(row)[:12]) + (", ..." if len(row) > 12 else "")
