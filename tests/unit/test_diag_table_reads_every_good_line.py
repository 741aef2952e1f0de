"""The columnar reader reports each bad line with its file and line and still reads every other line,
however the files fall into chunks (whole files scanned by path, big files split into byte pieces)."""

from __future__ import annotations

import math
from pathlib import Path

import orjson
import pytest

from diagnostics import table as table_module
from diagnostics.query import refs
from diagnostics.report import build_report
from diagnostics.schema import Rollout, write_rollouts
from diagnostics.table import read_run_table


def _rows(step: int, n: int) -> list[Rollout]:
    return [
        Rollout("r", step, "train", f"p{i // 4}", f"g{i // 4}", i % 4, "1+1=>", f"<ans>{i}</ans>", "2", float(i % 2))
        for i in range(n)
    ]


def _line(r: Rollout) -> bytes:
    return orjson.dumps(r.to_json())


def _run(tmp_path: Path) -> Path:
    """Three step files: one clean, one with bad lines, blank lines and a half-written end, one clean."""
    run = tmp_path / "run"
    write_rollouts(run / "rollouts" / "train" / "step_0.jsonl", _rows(0, 40))
    rows = [_line(r) for r in _rows(1, 40)]
    rows[5] = b'{"run_id": "r", "step": 1, oops'
    rows[12] = b""  # a blank line: later lines keep their numbers
    rows[13] = b"   "
    rows[20] = orjson.dumps({**orjson.loads(rows[20]), "split": "test"})
    rows[30] = orjson.dumps({**orjson.loads(rows[30]), "sample_index": 1.5})
    (run / "rollouts" / "train" / "step_1.jsonl").write_bytes(b"\n".join(rows) + b'\n{"run_id": "r", "st')
    write_rollouts(run / "rollouts" / "train" / "step_2.jsonl", _rows(2, 40))
    return run


@pytest.mark.parametrize("chunk_bytes", [32 << 20, 2000, 300], ids=["one-chunk", "files-per-chunk", "pieces"])
def test_bad_lines_are_problems_with_file_and_line_and_the_rest_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_bytes: int
) -> None:
    monkeypatch.setattr(table_module, "CHUNK_BYTES", chunk_bytes)
    table = read_run_table(_run(tmp_path))
    where = [(Path(p.path).name, p.line, p.message.split(":")[0]) for p in table.problems]
    assert where == [
        ("step_1.jsonl", 6, "invalid JSON"),
        ("step_1.jsonl", 21, "field 'split' must be one of ('train', 'val'), got 'test'"),
        ("step_1.jsonl", 31, "field 'sample_index' has type float"),
        ("step_1.jsonl", 41, "invalid JSON"),
    ]
    assert table.train.height == 40 + (40 - 2 - 3) + 40  # two blank lines and three bad ones
    assert sorted(set(table.train["step"].to_list())) == [0, 1, 2]
    # training rows carry no id strings: each evidence id is read back from the row's file and line
    good = [(step, i) for step in range(3) for i in range(40) if step != 1 or i not in {5, 12, 13, 20, 30}]
    assert refs(table.train, table.train.height) == [f"r/{step}/p{i // 4}/{i % 4}" for step, i in good]


def test_a_big_file_split_into_pieces_keeps_its_line_numbers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(table_module, "CHUNK_BYTES", 4096)
    run = tmp_path / "run"
    rows = [_line(r) for r in _rows(0, 400)]
    rows[350] = b"[1, 2]"
    (run / "rollouts" / "train").mkdir(parents=True)
    (run / "rollouts" / "train" / "step_0.jsonl").write_bytes(b"\n".join(rows) + b"\n")
    table = read_run_table(run)
    assert [(p.line, p.message) for p in table.problems] == [(351, "expected a JSON object, got list")]
    assert table.train.height == 399
    assert table.train["sample_index"].to_list()[:8] == [0, 1, 2, 3] * 2


def test_an_empty_run_and_empty_files_report_without_raising(tmp_path: Path) -> None:
    (tmp_path / "rollouts" / "train").mkdir(parents=True)
    (tmp_path / "rollouts" / "train" / "step_0.jsonl").write_bytes(b"")
    (tmp_path / "rollouts" / "train" / "step_1.jsonl").write_bytes(b"\n\n")
    table = read_run_table(tmp_path)
    assert table.height == 0 and table.problems == ()
    report = build_report(tmp_path)
    assert [p.message for p in report.problems] == ["no readable rollout records"]
    assert math.isnan(report.metrics["dead_group_ratio"]) and math.isnan(report.metrics["truncation_rate"])
    assert report.finding("signal.dead_groups") is not None
    assert [f.alert_id for f in report.alerts()] == ["score.no_strict_score"]  # said, not silent


def test_a_rollout_beyond_the_int32_range_is_refused_by_name(tmp_path: Path) -> None:
    run = tmp_path / "run"
    rows = [_line(r) for r in _rows(0, 4)]
    rows[1] = orjson.dumps({**orjson.loads(rows[1]), "num_turns": 2**40})
    (run / "rollouts" / "val").mkdir(parents=True)
    (run / "rollouts" / "val" / "step_0.jsonl").write_bytes(b"\n".join(rows) + b"\n")
    table = read_run_table(run)
    assert [(p.line, p.message) for p in table.problems] == [(2, "field 'num_turns' is out of range")]
    assert table.train.height == 4 - 1  # the rows' own split decides (they say train), not the folder
