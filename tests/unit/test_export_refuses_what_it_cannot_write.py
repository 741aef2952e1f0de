"""`export` refuses, in one sentence, a run of the tiny model and a run that left no weights (nothing written)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnostics.schema import CONFIG_FILE, LAST_CHECKPOINT
from trainer_backend.local.export import ExportRefused, export_run


def _run(tmp_path: Path, config: dict[str, object], checkpoint: bool) -> Path:
    run = tmp_path / "run"
    (run / LAST_CHECKPOINT).parent.mkdir(parents=True)
    (run / CONFIG_FILE).write_text(json.dumps(config))
    if checkpoint:
        (run / LAST_CHECKPOINT).write_bytes(b"weights")
    return run


def test_a_tiny_model_run_is_refused_and_its_checkpoint_named(tmp_path: Path) -> None:
    run = _run(tmp_path, {"trainer": {"model": "tiny"}, "vocab": ["a"]}, checkpoint=True)
    with pytest.raises(ExportRefused, match="tiny character model") as caught:
        export_run(run, tmp_path / "out", "")
    assert str(run / LAST_CHECKPOINT) in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_a_run_without_weights_is_refused(tmp_path: Path) -> None:
    run = _run(tmp_path, {"trainer": {}, "policy": {"model": "m", "folder": str(tmp_path), "stop_ids": [2]}}, False)
    with pytest.raises(ExportRefused, match="left no weights"):
        export_run(run, tmp_path / "out", "")
    with pytest.raises(ExportRefused, match="never started"):
        export_run(tmp_path / "nothing", tmp_path / "out", "")
    assert not (tmp_path / "out").exists()
