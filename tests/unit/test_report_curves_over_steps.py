"""Issue 26 §6: the report's curves over steps use the health report's own definitions.

`diagnostics.agentic.per_step` gives each step's turns, tool calls, tool failure rate and abandonment: on
every step they equal what `diagnose_agentic` reports for that step's episodes alone. `heldout_by_source`
gives each data source's strict held-out accuracy per validation step, and nothing for one source.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import agentic_episodes as E

from diagnostics.agentic import STEP_METRICS, diagnose_agentic, per_step
from diagnostics.schema import Rollout
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
