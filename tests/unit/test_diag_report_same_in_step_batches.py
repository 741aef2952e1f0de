"""The per-group aggregations run over batches of whole steps (`query.group_batches`) to bound their
scratch memory on big runs; the report must not change with the batch size.

Every golden case (`diag_golden_runs.py`: together they fire every alert, with kept flags, strict scores,
data sources and agentic episodes) is reported once with one batch and once with batches of a few rows (a
batch still holds whole steps, so most steps become a batch of their own): metrics agree to float noise
(batched sums add up in another order), findings and their evidence ids exactly.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from diag_golden_runs import Case, build_cases

from diagnostics import query
from diagnostics import table as table_module
from diagnostics.findings import HealthReport
from diagnostics.query import group_batches
from diagnostics.report import build_report
from harness.answers import AnswerProtocol


def _report(case: Case) -> HealthReport:
    return build_report(case.run_dir, answer=AnswerProtocol(pattern=case.pattern) if case.pattern else None)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    return build_cases(tmp_path_factory.mktemp("batches"))


def test_every_golden_report_is_the_same_in_small_step_batches(
    cases: dict[str, Case], monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = {name: _report(case) for name, case in cases.items()}
    monkeypatch.setattr(query, "GROUP_BATCH_ROWS", 8)
    batched_somewhere = False
    for name, case in cases.items():
        rows = table_module.read_run_table(case.run_dir).train
        batched_somewhere |= len(list(group_batches(rows))) > 1
        new, old = _report(case), whole[name]
        assert set(new.metrics) == set(old.metrics), name
        for key, value in old.metrics.items():
            assert _same(new.metrics[key], value), f"{name}: {key} {new.metrics[key]!r} != {value!r}"
        assert [f.alert_id for f in new.findings] == [f.alert_id for f in old.findings], name
        for a, b in zip(new.findings, old.findings, strict=True):
            assert a.evidence_rollout_ids == b.evidence_rollout_ids, f"{name}: {a.alert_id}"
            assert a.severity == b.severity and _same(a.value, b.value), f"{name}: {a.alert_id}"
    assert batched_somewhere, "no case was cut into more than one batch: the test would not test batching"


def test_batches_are_zero_copy_slices_of_whole_steps_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(query, "GROUP_BATCH_ROWS", 5)
    rows = pl.DataFrame({"step": [1, 1, 1, 2, 2, 3, 3, 3, 3, 3, 3, 4, 5, 5]})
    batches = list(group_batches(rows))
    assert [(offset, batch["step"].to_list()) for offset, batch in batches] == [
        (0, [1, 1, 1, 2, 2]),
        (5, [3, 3, 3, 3, 3, 3]),  # a step longer than a batch stays whole
        (11, [4, 5, 5]),
    ]
    unsorted = pl.DataFrame({"step": [2, 2, 1, 1, 3, 3, 3]})
    assert [offset for offset, _ in group_batches(unsorted)] == [0]  # not sorted by step: one batch
