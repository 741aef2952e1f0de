"""Training rows carry no id strings; a report's evidence ids are still the real ones, read back from
the rollout files through each row's `origin`, and a file rewritten since it was read never yields another
rollout's id."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from diagnostics.query import refs
from diagnostics.schema import Rollout, write_rollouts
from diagnostics.table import read_run_table, table_from_rollouts


def _rows(step: int, split: str = "train") -> list[Rollout]:
    return [
        Rollout("r", step, split, f"{split}-{step}-{i // 2}", f"g{step}-{i // 2}", i % 2, "1+1=>", "2", "2", 1.0)  # type: ignore[arg-type]
        for i in range(6)
    ]


def test_training_rows_hold_no_id_strings_and_their_evidence_ids_are_the_real_ones(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for step in (1, 2):
        write_rollouts(run / "rollouts" / "train" / f"step_{step}.jsonl", _rows(step))
    write_rollouts(run / "rollouts" / "val" / "step_2.jsonl", _rows(2, "val"))
    table = read_run_table(run)
    assert table.train.schema["prompt_id"] == pl.Null and "group_id" not in table.train.columns
    assert table.train["group_key"].n_unique() == 3 * 2  # three groups a step (the key is per step with `step`)
    assert table.val["prompt_id"].cast(pl.String).to_list() == [r.prompt_id for r in _rows(2, "val")]
    expected = [f"r/{r.step}/{r.prompt_id}/{r.sample_index}" for step in (1, 2) for r in _rows(step)]
    assert refs(table.train, 12) == expected
    assert refs(table.train.filter(pl.col("step") == 2).tail(2), 2) == expected[-2:]
    assert refs(table.val, 2) == [f"r/2/val-2-0/{i}" for i in (0, 1)]


def test_a_rewritten_file_yields_an_unknown_id_not_another_rollouts(tmp_path: Path) -> None:
    run = tmp_path / "run"
    path = run / "rollouts" / "train" / "step_1.jsonl"
    write_rollouts(path, _rows(1))
    table = read_run_table(run)
    path.unlink()
    write_rollouts(path, list(reversed(_rows(1)))[:3])  # other rows on those lines, and fewer lines
    assert refs(table.train, 6) == [f"r/1/?/{i % 2}" for i in range(6)]
    # same step and sample index on the line, another group: still not taken for the row's id
    path.unlink()
    write_rollouts(path, [Rollout("r", 1, "train", "other", "other", i % 2, "1+1=>", "2", "2", 1.0) for i in range(6)])
    assert refs(table.train, 6) == [f"r/1/?/{i % 2}" for i in range(6)]


def test_tables_built_from_records_resolve_their_ids_too() -> None:
    rows = _rows(3)
    assert refs(table_from_rollouts(rows), 6) == [f"r/3/{r.prompt_id}/{r.sample_index}" for r in rows]
