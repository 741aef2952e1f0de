"""Issue #14: every health report is built with the harness's declared answer protocol (`answer=`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from agent.commands.diagnose import run_answer_protocol
from agent.nodes import common
from harness.answers import AnswerProtocol

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "arithmetic"
LINE = AnswerProtocol(pattern=r"ANSWER: (\S+)", compare="exact")


def test_cached_report_passes_the_protocol_to_build_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_build(run_dir: Path, parent: object = None, siblings: object = (), answer: object = None) -> object:
        seen["answer"] = answer
        raise RuntimeError("stop here")

    import diagnostics.report

    monkeypatch.setattr(diagnostics.report, "build_report", fake_build)
    with pytest.raises(RuntimeError, match="stop here"):
        common.cached_report(tmp_path, None, LINE)
    assert seen["answer"] is LINE


def test_diagnose_finds_the_protocol_of_a_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    assert run_answer_protocol(run, None) is None  # nothing says: the report gets none
    (run / "config.json").write_text(json.dumps({"answer": LINE.model_dump(), "spec": {"harness_dir": str(DEMO)}}))
    assert run_answer_protocol(run, None) == LINE  # what the run recorded
    (run / "config.json").write_text(json.dumps({"answer": None, "spec": {"harness_dir": str(DEMO)}}))
    demo = run_answer_protocol(run, None)
    assert demo is not None and demo.pattern == "<ans>(.*?)</ans>"  # the harness it was trained from
    other = tmp_path / "h"
    shutil.copytree(DEMO, other)
    text = (other / "evotrainer.yaml").read_text()
    (other / "evotrainer.yaml").write_text(
        text.replace("pattern: '<ans>(.*?)</ans>', compare: integer", "pattern: 'ANSWER: (\\S+)', compare: exact")
    )
    found = run_answer_protocol(run, other)
    assert found is not None and found.pattern == r"ANSWER: (\S+)"  # --harness wins
    (other / "evotrainer.yaml").write_text("name: [")
    with pytest.raises(ValueError, match=r"evotrainer\.yaml"):
        run_answer_protocol(run, other)
