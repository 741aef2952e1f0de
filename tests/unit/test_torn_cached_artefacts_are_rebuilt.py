"""A cached artefact a resume trusts is written atomically and, when found empty or torn, rebuilt.

A full disk once left an empty ``health_report.json`` that every later resume read as the run's report; the
merged ``train_all.jsonl`` of an analysis and a backtest's ``report.json`` have the same shape. Each is cut
short here (empty, then half) and read again through the function a resumed session calls: the result
equals the first one and the file is whole again.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from llm_session import copy_demo, fabricate_run

from agent.adapters.held_out import analysis_inputs
from agent.nodes import common
from diagnostics.table import RunTableCache
from harness.atomic import read_json, write_atomic
from sandboxes.backtest import REPORT_FILE, read_report, run_backtest


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, Path]:
    harness = copy_demo(tmp_path / "harness")
    run_dir = tmp_path / "run"
    fabricate_run(run_dir, "r-v0", harness)
    return harness, run_dir


def _cuts(path: Path) -> list[bytes]:
    whole = path.read_bytes()
    return [b"", whole[: len(whole) // 2]]


def test_a_torn_health_report_is_rebuilt(run: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    _, run_dir = run
    monkeypatch.setattr(common, "_TABLES", [RunTableCache()])
    first = common.cached_report(run_dir, None, None)
    path = run_dir / common.REPORT_FILE
    whole = path.read_bytes()
    for cut in _cuts(path):
        path.write_bytes(cut)
        again = common.cached_report(run_dir, None, None)
        assert again.to_json() == first.to_json()
        assert path.read_bytes() == whole
    path.write_text('{"run_id": "r-v0"}')  # valid JSON, not a report
    assert common.cached_report(run_dir, None, None).to_json() == first.to_json()


def test_a_torn_merged_training_file_is_written_again(run: tuple[Path, Path], tmp_path: Path) -> None:
    _, run_dir = run
    folder = tmp_path / "inputs"
    folder.mkdir()
    merged = analysis_inputs(run_dir, folder, all_steps=True)["train_all.jsonl"]
    whole = merged.read_bytes()
    assert whole.count(b"\n") == 3 * 16  # three steps of four prompts of four samples
    for cut in _cuts(merged):
        merged.write_bytes(cut)
        assert analysis_inputs(run_dir, folder, all_steps=True)["train_all.jsonl"].read_bytes() == whole


def test_a_torn_backtest_report_is_run_again(run: tuple[Path, Path], tmp_path: Path) -> None:
    harness, run_dir = run
    out = tmp_path / "backtest"
    first = run_backtest(harness, run_dir, out, mode="none")
    assert first.metrics is not None
    path = out / REPORT_FILE
    whole = path.read_bytes()
    for cut in _cuts(path):
        path.write_bytes(cut)
        assert read_report(out) is None
        assert run_backtest(harness, run_dir, out, mode="none").to_json() == first.to_json()
        assert path.read_bytes() == whole


def test_atomic_writes_reach_the_disk_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[bool] = []
    target = tmp_path / "summary.json"
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(target.exists())  # the data, then the folder after the rename
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    write_atomic(target, '{"outcome": "ok"}')
    assert synced == [False, True]
    assert read_json(target) == {"outcome": "ok"}
    for torn in (b"", b'{"outcome": "o', b"\xff\xfe"):
        target.write_bytes(torn)
        assert read_json(target) is None
    assert read_json(tmp_path / "missing.json") is None
