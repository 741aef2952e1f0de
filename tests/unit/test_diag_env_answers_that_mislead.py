"""An environment that answers some calls wrongly is seen from the rollouts alone.

`agentic.tool_result_misleads` compares, for each call the environment answered successfully (a tool and its
arguments), the success of the episodes that got that answer with the success of those that did not. Here a
lookup environment answers key `h` wrongly: every episode that read it fails, whatever else it did, while a
healthy environment's episodes fail at the same rate whatever key they read.
"""

from __future__ import annotations

import agentic_episodes as E
import pytest

from diagnostics.agentic import diagnose_agentic
from diagnostics.findings import Finding, Severity
from diagnostics.schema import Rollout
from diagnostics.table import table_from_rollouts
from diagnostics.tool_results import RESULT_GAP_CRITICAL


def _finding(rows: list[Rollout]) -> tuple[Finding, dict[str, float]]:
    out = diagnose_agentic(table_from_rollouts(rows))
    return next(f for f in out.findings if f.alert_id == "agentic.tool_result_misleads"), dict(out.metrics)


def test_a_key_the_environment_answers_wrongly_is_critical_with_the_episodes_it_misled() -> None:
    rows = E.lookups("h")
    finding, metrics = _finding(rows)
    assert finding.severity is Severity.CRITICAL and finding.value > RESULT_GAP_CRITICAL, finding
    assert metrics["tool_result_gap_episodes"] >= 20
    assert finding.evidence_rollout_ids
    by_ref = {f"{r.run_id}/{r.step}/{r.prompt_id}/{r.sample_index}": r for r in rows}
    for ref in finding.evidence_rollout_ids:  # each one read key h and failed
        episode = by_ref[ref]
        assert episode.strict_score == 0.0 and any(t.arguments == "key=h" for t in episode.turns)
    assert "lookup" in finding.message


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_failures_that_do_not_depend_on_the_answer_raise_nothing(seed: int) -> None:
    finding, metrics = _finding(E.lookups(None, seed=seed))
    assert finding.severity is Severity.OK and metrics["tool_result_gap"] < 0.3, finding


def test_calls_too_rare_to_compare_leave_the_rule_without_data() -> None:
    rows = [E.episode(0, g, i, [("search", f"q={g}-{i}", True)], reward=1.0, strict=float(i % 2))
            for g in range(8) for i in range(8)]  # fmt: skip
    finding, metrics = _finding(rows)
    assert finding.severity is Severity.OK and "no data" in finding.message, finding
    assert metrics["tool_result_gap"] != metrics["tool_result_gap"]  # NaN: no call had enough episodes
