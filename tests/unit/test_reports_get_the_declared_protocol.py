"""Every health report is built with the harness's declared answer protocol (`answer=`)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from agent.commands.diagnose import run_answer_protocol
from agent.nodes import common
from diagnostics.schema import Rollout, write_rollouts
from harness.answers import AnswerProtocol

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "arithmetic"
LINE = AnswerProtocol(pattern=r"ANSWER: (\S+)", compare="exact")


def _run(folder: Path) -> Path:
    rows = [
        Rollout(folder.name, 1, "train", f"p{i}", f"g{i // 4}", i % 4, "q", f"ANSWER: {i % 2}", "1", float(i % 2))
        for i in range(16)
    ]
    write_rollouts(folder / "rollouts" / "train" / "step_1.jsonl", rows)
    return folder


def test_cached_report_reads_the_declared_protocol(tmp_path: Path) -> None:
    declared = common.cached_report(_run(tmp_path / "a"), None, LINE)
    assert declared.metrics["format_failure_rate"] == 0.0  # every response writes 'ANSWER: x'
    assert not any("answer protocol" in note for note in declared.notes)
    undeclared = common.cached_report(_run(tmp_path / "b"), None, None)
    assert math.isnan(undeclared.metrics["format_failure_rate"])  # not evaluated, never a silent 0
    assert any("no answer protocol declared" in note for note in undeclared.notes)


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
