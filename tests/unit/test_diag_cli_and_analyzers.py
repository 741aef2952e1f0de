"""`evotrainer diagnose` / `evotrainer backtest` commands, analyzer output contract, metric validation."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from diagnostics.analyzers import AnalyzerOutputError, parse_analyzer_output, validate_metric_retrospectively

sys.path.insert(0, str(Path(__file__).parent))
from test_backtest_run import LENIENT_REWARD, make_cached_run, make_harness

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "diagnostics"


def test_diagnose_json_and_text_warn_about_problems() -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["diagnose", str(FIXTURES / "corrupt_run"), "--json"])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.stdout)
    assert payload["metrics"]["num_groups"] == 4
    assert any(p["line"] == 4 for p in payload["problems"])
    text = runner.invoke(app, ["diagnose", str(FIXTURES / "corrupt_run"), "--parent", str(FIXTURES / "corrupt_run")])
    assert text.exit_code == 0
    assert "step_0.jsonl:4" in text.stderr
    assert "[version]" not in text.stdout  # a run compared with itself raises no version alert


def test_backtest_command_exit_code_follows_verdict(tmp_path: Path) -> None:
    cand = make_harness(tmp_path / "lenient", LENIENT_REWARD)
    run = make_cached_run(tmp_path / "run")
    res = CliRunner().invoke(
        app,
        [
            "backtest",
            "--harness",
            str(cand),
            "--rollouts",
            str(run),
            "--sandbox",
            "none",
            "--out",
            str(tmp_path / "bt"),
            "--json",
        ],
    )
    assert res.exit_code == 1, res.output
    assert json.loads(res.stdout)["verdict"] == "fail"
    assert (tmp_path / "bt" / "report.json").is_file()


def test_analyzer_output_contract() -> None:
    assert parse_analyzer_output({"metrics": {"first_edit_turn": 3, "echo_share": 0.25}}) == {
        "first_edit_turn": 3.0,
        "echo_share": 0.25,
    }
    for bad in (
        {"metric": {}},
        {"metrics": {"x": "1"}},
        {"metrics": {"x": math.nan}},
        {"metrics": {"bad name": 1}},
        {"metrics": {"x": True}},
        [1, 2],
    ):
        with pytest.raises(AnalyzerOutputError):
            parse_analyzer_output(bad)


def test_metric_validation_separates_kept_from_rejected() -> None:
    values = {"v1": 0.55, "v2": 0.50, "v3": 0.28, "v4": 0.27, "v5": 0.9}
    low = validate_metric_retrospectively(values, kept={"v3", "v4"}, rejected={"v1", "v2"})
    assert low.separates and low.direction == "lower_is_better" and low.margin == pytest.approx(0.22)
    mixed = validate_metric_retrospectively(values, kept={"v3", "v5"}, rejected={"v1", "v2"})
    assert not mixed.separates and mixed.margin < 0
    none = validate_metric_retrospectively(values, kept={"v3"}, rejected={"v9"})
    assert not none.separates and none.n_rejected == 0
    with pytest.raises(ValueError, match="both"):
        validate_metric_retrospectively(values, kept={"v1"}, rejected={"v1"})


def test_diagnose_reads_the_answer_protocol_of_the_harness_it_is_given() -> None:
    """Format rules read the declared protocol; without `--harness` the report says they were not run."""
    runner = CliRunner()
    examples = Path(__file__).resolve().parents[2] / "examples" / "arithmetic"
    declared = runner.invoke(app, ["diagnose", str(FIXTURES / "corrupt_run"), "--json", "--harness", str(examples)])
    assert declared.exit_code == 0, declared.output
    payload = json.loads(declared.stdout)
    assert payload["metrics"]["format_failure_rate"] == 0.0
    assert not any("answer protocol" in note for note in payload["notes"])  # other rules may lack data
    bare = runner.invoke(app, ["diagnose", str(FIXTURES / "corrupt_run")])
    assert "[not evaluated]" in bare.stdout and "no answer protocol declared" in bare.stdout
