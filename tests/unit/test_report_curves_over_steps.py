"""The report's curves over steps use the health report's own definitions.

`diagnostics.agentic.per_step` gives each step's turns, tool calls, tool failure rate and abandonment: on
every step they equal what `diagnose_agentic` reports for that step's episodes alone. `heldout_by_source`
gives each data source's strict held-out accuracy per validation step, and nothing for one source.
`stop_shares_per_step` gives the share of each stop reason per training step (the token cap's share is
what a wrong stop id shows as), the report draws it, and `evotrainer diagnose` prints stops and lengths per
training step.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import agentic_episodes as E

from diagnostics.agentic import STEP_METRICS, diagnose_agentic, per_step
from diagnostics.behaviour import stop_shares_per_step
from diagnostics.schema import Rollout, StopReason
from diagnostics.sources import heldout_by_source
from diagnostics.table import table_from_rollouts


def _steps() -> list[Rollout]:
    """Three steps of different behaviour: abandonment, then a failing edit tool, then healthy episodes."""
    kinds = (E.abandonment(), E.failing_edits(), E.healthy(steps=1))
    return [replace(r, step=s) for s, rows in enumerate(kinds) for r in rows]


def test_each_step_gets_the_run_level_definitions() -> None:
    rows = _steps()
    curves = per_step(table_from_rollouts(rows))
    assert set(curves) == set(STEP_METRICS)
    for step in range(3):
        alone = diagnose_agentic(table_from_rollouts([r for r in rows if r.step == step])).metrics
        for name in STEP_METRICS:
            assert dict(curves[name])[step] == pytest.approx(alone[name]), (name, step)
    assert dict(curves["abandon_rate"])[0] == pytest.approx(5 / 8)


def test_single_turn_rows_have_no_agentic_curves() -> None:
    rows = [Rollout("r", s, "train", f"p{i}", f"g{i}", 0, "1+1=>", "2", "2", 1.0) for s in range(2) for i in range(4)]
    assert per_step(table_from_rollouts(rows)) == {}


def test_held_out_accuracy_per_data_source_and_step() -> None:
    rows = [
        Rollout("r", step, "val", f"p{n}", f"p{n}", 0, "x", "y", "1", 0.0, strict_score=float(n < hits),
                data_source=source)
        for step, hits in ((0, 1), (5, 3))
        for source in ("easy", "hard")
        for n in range(4 if source == "easy" else 2)
    ]  # fmt: skip
    table = table_from_rollouts(rows)
    assert heldout_by_source(table) == {"easy": [(0, 0.25), (5, 0.75)], "hard": [(0, 0.5), (5, 1.0)]}
    one = table_from_rollouts([r for r in rows if r.data_source == "easy"])
    assert heldout_by_source(one) == {}


def test_stop_reason_shares_per_step() -> None:
    cap, eos = StopReason.LENGTH, StopReason.EOS
    rows = [
        Rollout("r", step, "train", f"p{i}", f"g{i}", 0, "x", "y", "1", 0.0, stop_reason=cap if i < capped else eos)
        for step, capped in ((1, 3), (2, 1), (3, 0))
        for i in range(4)
    ]
    shares = stop_shares_per_step(table_from_rollouts(rows))
    assert shares == {"eos": [(1, 0.25), (2, 0.75), (3, 1.0)], "length": [(1, 0.75), (2, 0.25), (3, 0.0)]}
    one = table_from_rollouts([replace(r, stop_reason=eos) for r in rows])
    assert stop_shares_per_step(one) == {}  # a single reason draws no curve


def test_the_report_draws_the_stop_reason_shares(tmp_path: Path) -> None:
    from agent.reporting.artefacts import STOP_PREFIX, read_curves
    from agent.reporting.html import _rollout_curves
    from diagnostics.schema import METRICS_FILE, rollout_file, write_rollouts

    rows = [
        Rollout("r", step, "train", f"p{i}", f"g{i}", 0, "x", "y", "1", 0.0,
                stop_reason=StopReason.LENGTH if i < 2 else StopReason.EOS)
        for step in (1, 2)
        for i in range(4)
    ]  # fmt: skip
    for step in (1, 2):
        write_rollouts(rollout_file(tmp_path, "train", step), [r for r in rows if r.step == step])
    (tmp_path / METRICS_FILE).write_text('{"step": 1, "data": {"critic/score/mean": 0.5}}\n')
    summary = {"kind": "full", "steps": 2, "outcome": "ok", "strict_acc": None, "train_reward": 0.5, "wall_time_s": 1.0}
    curves = read_curves("r", str(tmp_path), "v0", **summary)
    assert curves.series[STOP_PREFIX + "length"] == [(1, 0.5), (2, 0.5)]
    page = _rollout_curves([curves], "v0", "main", False)
    assert 'id="stops-main"' in page and "stopped by length" in page


def test_diagnose_prints_stops_and_lengths_per_training_step(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agent.cli import app
    from diagnostics.behaviour import stops_by_step
    from diagnostics.schema import METRICS_FILE, rollout_file, write_rollouts

    rows = [
        Rollout("r", step, "train", f"p{i}", f"g{i}", 0, "x", "y " * (4 + step), "1", 0.0,
                stop_reason=StopReason.LENGTH if i < step % 4 else StopReason.EOS, response_tokens=4 + step)
        for step in range(1, 31)
        for i in range(4)
    ]  # fmt: skip
    picked = stops_by_step(table_from_rollouts(rows), limit=5)
    assert [s.step for s in picked] == [1, 8, 15, 23, 30]  # spread over the run, first and last included
    assert picked[0].n == 4 and picked[0].length_mean == 5.0 and picked[0].shares == {"eos": 0.75, "length": 0.25}
    assert picked[-1].shares == {"eos": 0.5, "length": 0.5}
    for step in range(1, 31):
        write_rollouts(rollout_file(tmp_path, "train", step), [r for r in rows if r.step == step])
    (tmp_path / METRICS_FILE).write_text('{"step": 1, "data": {"critic/score/mean": 0.5}}\n')
    done = CliRunner().invoke(app, ["diagnose", str(tmp_path)])
    assert done.exit_code == 0, done.output
    section = done.output.split("[stops per training step]", 1)[1].splitlines()
    assert section[1].strip() == "step 1: 4 responses · mean length 5.0 · eos 0.75 · length 0.25", section[:3]
    assert len([line for line in section if line.strip().startswith("step ")]) == 12
