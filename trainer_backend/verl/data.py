"""Harness JSONL data → verl parquet (verl.md §6). Imports pyarrow lazily (the `verl` extra).

One harness row `{"id", "prompt", "ground_truth", "data_source", ...}` becomes one verl row:

    prompt        [{"role": "user", "content": <prompt>}]  (a list of messages is kept as is)
    data_source   row["data_source"], else the harness name
    ability       row["ability"], else the harness domain
    reward_model  {"style": "rule", "ground_truth": str(row["ground_truth"])}
    extra_info    {"index": <line index>, "split": "train"|"val", every other field of the row}

An agentic harness (manifest `env:`) adds `agent_name` (the agent loop verl runs for the row) and
`extra_info.tools_kwargs` (per tool, the row its environment is made from), see `agentic.row_fields`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from harness.atomic import atomic_path
from harness.env import EnvSpec
from harness.manifest import DataPaths, Harness
from harness.rows import check_row
from harness.splits import split_heldout
from trainer_backend.verl.agentic import row_fields
from trainer_backend.verl.config import DATA_DIR, VerlConfigError

_TOP_LEVEL = ("prompt", "ground_truth", "data_source", "ability")


def convert_row(
    row: dict[str, Any], index: int, split: str, default_source: str, default_ability: str, env: EnvSpec | None = None
) -> dict:
    """Map one harness data row to verl's columns (with the agent-loop fields when `env` is set).

    Raises:
        ValueError: the row breaks the row rules (`harness.rows`, with chat-message prompts allowed).
    """
    problem = check_row(row, "chat_data")
    if problem is not None:
        raise ValueError(problem)
    prompt = row["prompt"]
    if isinstance(prompt, str):
        messages = [{"role": "user", "content": prompt}]
    else:
        messages = [{"role": str(m["role"]), "content": str(m["content"])} for m in prompt]
    extra = {k: v for k, v in row.items() if k not in _TOP_LEVEL}
    extra.update(index=index, split=split)
    out = {
        "prompt": messages,
        "data_source": str(row.get("data_source") or default_source),
        "ability": str(row.get("ability") or default_ability),
        "reward_model": {"style": "rule", "ground_truth": str(row["ground_truth"])},
        "extra_info": extra,
    }
    if env is not None:
        agentic = row_fields(env, row)
        out["agent_name"] = agentic["agent_name"]
        extra["tools_kwargs"] = agentic["tools_kwargs"]
    return out


def convert_file(
    src: Path,
    dst: Path,
    split: str,
    default_source: str,
    default_ability: str,
    env: EnvSpec | None = None,
    skip_lines: frozenset[int] = frozenset(),
) -> int:
    """Convert one JSONL file to parquet atomically, leaving out the lines `skip_lines` numbers; return the rows.

    Raises:
        VerlConfigError: naming the file and line of a bad row, or a field whose type varies across rows.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    with open(src, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip() or number in skip_lines:
                continue
            try:
                rows.append(convert_row(orjson.loads(raw), len(rows), split, default_source, default_ability, env))
            except (orjson.JSONDecodeError, ValueError) as exc:
                raise VerlConfigError(f"{src}:{number}: {exc}; fix the data row") from None
    if not rows:
        raise VerlConfigError(f"{src}: no rows; a verl run needs at least one prompt per split")
    try:
        table = pa.Table.from_pylist(rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise VerlConfigError(
            f"{src}: rows cannot form one parquet table ({exc}); give each field one type in every row"
        ) from None
    dst.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(dst) as tmp:
        pq.write_table(table, tmp)
    return len(rows)


def convert_harness_data(harness: Harness, out_dir: Path) -> tuple[Path, Path]:
    """Write `<out_dir>/verl_data/{train,val}.parquet` from the harness data; return their absolute paths.

    `val` holds the held-out selection split only: the sealed rows (harness/splits.py) never reach verl's
    validation, so no decision reads them (a verl run does not score the sealed split).
    """
    folder = out_dir.resolve() / DATA_DIR
    paths = []
    m = harness.manifest
    for split, rel in (("train", m.data.train), ("val", m.data.val)):
        dst = folder / f"{split}.parquet"
        skip = sealed_lines(harness.path(rel), m.data) if split == "val" else frozenset()
        convert_file(harness.path(rel), dst, split, m.name, m.domain, m.env, skip)
        paths.append(dst)
    return paths[0], paths[1]


def sealed_lines(src: Path, data: DataPaths) -> frozenset[int]:
    """Line numbers of the held-out file's sealed rows (none when the manifest names a separate `test` file)."""
    if data.test is not None or data.sealed_fraction == 0:
        return frozenset()
    numbered: list[tuple[int, dict[str, Any]]] = []
    with open(src, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if raw.strip():
                try:
                    row = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue  # convert_file names the bad line
                if isinstance(row, dict):
                    numbered.append((number, {**row, "_line": number}))
    _, sealed = split_heldout([r for _, r in numbered], data.sealed_fraction, data.select_by)
    return frozenset(int(r["_line"]) for r in sealed)
