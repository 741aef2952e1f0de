"""The agentic metrics ride the single-turn report's streaming path (`diagnostics/table.py`).

There is one way from rollouts to the agentic layer: the run table. `build_report` reads a run folder in
chunks (whole step files grouped, big files split at line ends) and `report_from_table` hands the table's
rows to `diagnose_agentic`; the tests' in-memory records go through the same parser in one piece
(`table_from_rollouts`). Reading a run in many small chunks, including chunks whose rows hold no turns (a
Null-typed `turns` column that must concatenate with trajectories), gives the same agentic metrics and
findings as reading it whole.
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import agentic_episodes as E

import diagnostics.table as table_module
from diagnostics.agentic import diagnose_agentic
from diagnostics.agentic_docs import is_agentic_metric
from diagnostics.findings import Finding
from diagnostics.report import build_report
from diagnostics.schema import Rollout, write_rollouts
from diagnostics.table import read_run_table, table_from_rollouts


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-12)


def _graded(findings: tuple[Finding, ...] | list[Finding]) -> list[tuple[str, str, float]]:
    return [(f.alert_id, f.severity.value, f.value) for f in findings if f.alert_id.startswith("agentic.")]


def _run(tmp_path: Path) -> list[Rollout]:
    """Three steps in three files: an echo trap, a step without recorded turns, tool spam."""
    loop = E.echo_trap()
    bare = [replace(r, step=1, turns=()) for r in E.abandonment()]  # num_turns / tool_calls only
    spam = [replace(r, step=2) for r in E.tool_spam()]
    for step, rows in enumerate((loop, bare, spam)):
        write_rollouts(tmp_path / "rollouts" / "train" / f"step_{step}.jsonl", rows)
    return loop + bare + spam


@pytest.mark.parametrize("chunk_bytes", [32 << 20, 4096])
def test_a_run_read_in_chunks_gets_the_agentic_metrics_of_the_whole_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_bytes: int
) -> None:
    rows = _run(tmp_path)
    monkeypatch.setattr(table_module, "CHUNK_BYTES", chunk_bytes)
    streamed = read_run_table(tmp_path).train
    assert streamed.height == len(rows)
    files = sorted((tmp_path / "rollouts" / "train").iterdir())
    chunks = len(list(table_module._plan(files)))
    assert chunks == 1 if chunk_bytes > 1 << 20 else chunks > 20  # the three files whole, or in many pieces
    whole = diagnose_agentic(table_from_rollouts(rows))
    report = build_report(tmp_path)
    agentic = {k: v for k, v in report.metrics.items() if is_agentic_metric(k)}
    assert set(agentic) == set(whole.metrics) and len(agentic) > 40
    differ = {k: (agentic[k], whole.metrics[k]) for k in agentic if not _same(agentic[k], whole.metrics[k])}
    assert not differ, differ
    assert _graded(report.findings) == _graded(whole.findings)
    # the numbers are the run's, not a default: the loops and the spam are both seen
    assert report.metrics["echo_trap_rate"] > 0 and report.metrics["paid_without_success_rate"] > 0
    assert {"agentic.echo_trap", "agentic.paid_without_success"} <= {f.alert_id for f in report.alerts()}


def test_repeated_calls_hash_alike_across_files_and_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The call hash that repetition counts on is the same for the same call wherever it is read."""
    rows = _run(tmp_path)
    monkeypatch.setattr(table_module, "CHUNK_BYTES", 4096)
    streamed = read_run_table(tmp_path).train
    whole = table_from_rollouts(rows)
    assert streamed["turns"].to_list() == whole["turns"].to_list()
