"""A run whose ``summary.json`` a full disk left empty is read again, not trusted and not trained again.

`ensure_run` collects a run whose summary exists; an empty or torn one made every later resume fail on it
(or trust it). Real local trainer on the tiny model: the run finishes, its summary is cut short, and the
next `ensure_run` sets the torn file aside, resumes the run from its last checkpoint (no step trained
twice) and returns the same outcome from the summary the trainer writes again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llm_session import copy_demo

from agent.adapters.runs import ensure_run
from harness.failures import Outcome
from trainer_backend.base import SUMMARY_FILE, RunSpec

pytestmark = pytest.mark.slow


def test_an_empty_summary_is_set_aside_and_written_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVOTRAINER_CACHE", str(tmp_path / "cache"))
    harness = copy_demo(tmp_path / "h")
    spec = RunSpec(run_id="t", harness_dir=harness, out_dir=tmp_path / "run", steps=4, seed=1)
    first = ensure_run(spec, "local")
    assert first.outcome is Outcome.OK and first.steps_done == 4, first.message
    summary = spec.out_dir / SUMMARY_FILE
    whole = json.loads(summary.read_text())
    for cut in (b"", summary.read_bytes()[:20]):
        summary.write_bytes(cut)
        again = ensure_run(spec, "local")
        assert again.outcome is Outcome.OK and again.steps_done == 4, again.message
        assert json.loads(summary.read_text())["steps_done"] == whole["steps_done"]
        assert (spec.out_dir / f"{SUMMARY_FILE}.corrupt").read_bytes() == cut
    log = (spec.out_dir / "train.log").read_text()
    assert log.count("step 0 |") == 1, log  # resumed from its checkpoint, never trained from the start again
