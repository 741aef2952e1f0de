"""Every agentic alert is documented with the rule that grades it, as the report grades it.

`AGENTIC_METRIC_DOCS` (`diagnostics/agentic_docs.py`, part of the report's `METRIC_DOCS`) documents each
agentic metric as "meaning (rule: alert_id op warning[ / critical])". The thresholds live next to the rules
in `diagnostics/agentic.py`; this test holds the documentation to the rules the report actually evaluates
(the rule text and threshold of each finding), warning and critical levels both, so the two cannot drift.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import agentic_episodes as E

from diagnostics.agentic import diagnose_agentic
from diagnostics.agentic_docs import AGENTIC_HACK_ALERT_IDS, AGENTIC_METRIC_DOCS
from diagnostics.findings import Finding, Severity
from diagnostics.schema import Rollout
from diagnostics.table import table_from_rollouts

_RULE = re.compile(r"^(?P<metric>\S+) (?P<op>[<>]) (?P<threshold>\S+)$")


def _findings(*runs: list[Rollout]) -> list[Finding]:
    return [f for rows in runs for f in diagnose_agentic(table_from_rollouts(rows)).findings]


def test_each_alert_names_its_metric_and_warning_threshold_in_the_docs() -> None:
    findings = _findings(E.healthy())
    assert all(f.severity is Severity.OK for f in findings)  # every rule at its warning threshold
    documented = set()
    for f in findings:
        m = _RULE.match(f.rule)
        if m is None:  # a rule over a condition, not one metric (turns rising): its doc names it
            assert any(k.startswith("turns_rising") and f.alert_id in d for k, d in AGENTIC_METRIC_DOCS.items())
            continue
        doc = AGENTIC_METRIC_DOCS[m["metric"]]
        assert f"rule: {f.alert_id} {m['op']} {f.threshold:g}" in doc, (f.alert_id, doc)
        documented.add(f.alert_id)
        assert ("a hack alert" in doc) == (f.alert_id in AGENTIC_HACK_ALERT_IDS), f.alert_id
    assert len(documented) == len(findings) - 1 == 20


def test_each_critical_threshold_is_in_the_docs() -> None:
    collapsed = [E.episode(0, g, i, [], reward=0.7, strict=float(i == 0)) for g in range(4) for i in range(8)]
    runs = (collapsed, E.echo_trap(), E.tool_spam())
    critical = {f.alert_id: f for f in _findings(*runs) if f.severity is Severity.CRITICAL}
    assert set(critical) == {"agentic.one_turn_collapse", "agentic.abandonment", "agentic.echo_trap",
                             "agentic.paid_without_success"}  # fmt: skip
    for alert, f in critical.items():
        m = _RULE.match(f.rule)
        assert m is not None
        assert f"/ {f.threshold:g}" in AGENTIC_METRIC_DOCS[m["metric"]], alert
