"""The columnar health report reproduces the pre-columnar report, metric for metric, finding for finding.

`tests/fixtures/diagnostics/golden/golden.json` holds what the report built from one `Rollout` object per line
(commit d066ad5) said about every case of `diag_golden_runs.py`: synthetic runs that together fire every
alert, the corrupt-line fixture, a run with rows that break the schema in each way, and two recorded 20-step
runs of the demo harnesses. The new report gets the declared answer protocol `<ans>(.*?)</ans>` (the tag
those runs use) or, for the untagged case, none. Floats agree to 1e-9 (summation order differs).

Evidence ids are compared exactly, except where the old code picked among ties by an unstable sort (the
longest responses) or by float noise (the lowest-spread groups): there the picked rollouts must carry the
same lengths / group spreads as the old picks. One documented difference in the problems: a JSON number in a
string field (`turns[0].text: 3`) is read as its text, where the old reader refused the line.

The agentic rules moved to `diagnostics/agentic.py` with the paper's definitions (abandonment is
<= 3 turns without an action, not one turn; an echo trap is measured against the successful episodes, not
a fixed 60 turns) and many more metrics: their old and new metrics and findings are left out of the
comparison (they are tested in `test_diag_agentic_metrics_and_alerts.py`); everything else in the agentic
cases, and every single-turn case as a whole, must still match.

Metrics and rules added since are additions (reward against the evaluator's ranking, the filter's
kept and dropped groups, diversity, update size): they are listed below, and every other metric and finding
must still match the old report exactly.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from diag_golden_runs import GOLDEN_DIR, Case, build_cases

from diagnostics.agentic_docs import is_agentic_metric
from diagnostics.behaviour import NO_ANSWER_PROTOCOL
from diagnostics.findings import HealthReport, Severity, new_alerts
from diagnostics.report import build_report
from diagnostics.schema import read_run_rollouts
from diagnostics.signal import group_rollouts
from harness.answers import AnswerProtocol

GOLDEN: dict[str, Any] = orjson.loads((GOLDEN_DIR / "golden.json").read_bytes())
BY_LENGTH = {"behaviour.length_reward_corr", "behaviour.length_growth"}
BY_SPREAD = {"signal.low_spread"}
COERCED_STRING_LINES: set[tuple[str, str, int]] = set()


# Added after the golden report was recorded; their behaviour has tests of its own.
ADDED_METRICS = {
    "mixed_groups", "rank_pairs", "rank_violations", "rank_violation_rate", "misranked_group_rate",
    "reward_rank_agreement", "kept_group_ratio", "kept_live_ratio", "reward_spread_after_filter",
    "reward_spread_dropped", "filter_spread_gap", "train_strict_acc", "train_strict_acc_after_filter",
    "distinct_response_ratio", "identical_group_ratio", "dead_identical_share", "reward_discrete",
    "update_norm_mean", "update_norm_max", "no_update_share", "ref_distance", "kl_to_ref",
    "filter_reward_bias", "source_mix_gap", "dead_solved_share",
    "answer_written_rate", "answer_written_rate_first_steps", "runs_past_answer_rate",
}  # fmt: skip
ADDED_NUMBERS = {
    "signal.dead_groups": {"dead_unsolved_ratio"},  # the candidate gate's number (stats.py)
    "behaviour.length_reward_corr": {"length_reward_corr_given_tool_calls"},  # Where tool use varies
}
ADDED_PREFIXES = ("train_source_share/", "heldout_source_share/")  # per-source tables added with source_mix_gap
ADDED_ALERTS = {
    "score.misranked_groups", "signal.filter_drops_signal", "signal.filter_inverted", "signal.identical_groups",
    "signal.no_update", "signal.filter_biased", "signal.source_mix_gap",
    "behaviour.format_never_written", "behaviour.runs_past_answer",
}  # fmt: skip
_NOISE = re.compile(r"-?\d(?:\.\d+)?e-(?:1[3-9]|[2-9]\d)")  # |x| < 1e-12 printed by .2g: float noise
_ANSWER_RULES = {"behaviour.format_failure", "behaviour.multi_answer"}
# The pre-columnar report's agentic rules, now in diagnostics/agentic.py under `agentic.*` ids.
_OLD_AGENTIC_RULES = {
    "behaviour.abandonment",
    "behaviour.echo_trap",
    "behaviour.failed_turns",
    "behaviour.turns_rising",
}


def _not_agentic_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if not is_agentic_metric(k)}


def _not_agentic_findings(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in findings if f["alert_id"] not in _OLD_AGENTIC_RULES and not f["alert_id"].startswith("agentic.")]


def _message(text: str) -> str:
    return _NOISE.sub("0", text)


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None or (isinstance(a, float) and math.isnan(a)):
        return (a is None or math.isnan(a)) and (b is None or math.isnan(b))
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Case, HealthReport]]:
    cases = build_cases(tmp_path_factory.mktemp("golden"))
    assert set(cases) == set(GOLDEN), "every golden case is rebuilt"
    out: dict[str, tuple[Case, HealthReport]] = {}
    for name, case in cases.items():
        answer = AnswerProtocol(pattern=case.pattern) if case.pattern else None
        parent = out[case.parent][1] if case.parent else None
        siblings = tuple(out[s][1] for s in case.siblings)
        out[name] = (case, build_report(case.run_dir, parent=parent, siblings=siblings, answer=answer))
    return out


def _keys_of(run_dir: Path, ids: list[str], by: str) -> list[float]:
    """The response length of each referenced rollout, or the reward spread of its group."""
    rollouts = read_run_rollouts(run_dir).rollouts
    train = [r for r in rollouts if r.split == "train"] or rollouts
    index = {f"{r.run_id}/{r.step}/{r.prompt_id}/{r.sample_index}": r for r in train}
    if by == "length":
        return sorted(float(index[i].response_tokens or len(index[i].response.split())) for i in ids)
    groups = group_rollouts(train)
    spreads = []
    for i in ids:
        r = index[i]
        rewards = [x.reward for x in groups[(r.step, r.group_id)]]
        mean = sum(rewards) / len(rewards)
        spreads.append(round(math.sqrt(sum((x - mean) ** 2 for x in rewards) / len(rewards)), 9))
    return sorted(spreads)


def _added_new_critical(name: str, reports: dict[str, tuple[Case, HealthReport]]) -> list[str]:
    """The added alerts that are critical in this case and not in its parent: `version.new_critical` counts them."""
    case, report = reports[name]
    if case.parent is None:
        return []
    fresh = new_alerts(report.findings, reports[case.parent][1].findings, Severity.CRITICAL)
    return [f.alert_id for f in fresh if f.alert_id in ADDED_ALERTS]


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_metrics_match_the_old_report(name: str, reports: dict[str, tuple[Case, HealthReport]]) -> None:
    old = _not_agentic_metrics(GOLDEN[name]["metrics"])
    new = _not_agentic_metrics(reports[name][1].to_json()["metrics"])
    assert set(old) <= set(new), f"metrics missing: {set(old) - set(new)}"
    added = {k for k in set(new) - set(old) if not k.startswith(ADDED_PREFIXES)}
    assert added <= ADDED_METRICS, f"unlisted new metrics: {added - ADDED_METRICS}"
    if "new_critical_alerts" in old:  # a new critical alert of an added rule counts like any other
        old = {**old, "new_critical_alerts": old["new_critical_alerts"] + len(_added_new_critical(name, reports))}
    if new["reward_hacking"] is None and old["reward_hacking"] == 0.0:  # Unknown, not a silent 0
        assert any(n.startswith("score.reward_hacking: not evaluated: ") for n in reports[name][1].notes), name
        old = {**old, "reward_hacking": None}
    wrong = {k: (old[k], new[k]) for k in old if not _close(old[k], new[k])}
    assert not wrong, wrong


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_findings_match_the_old_report(name: str, reports: dict[str, tuple[Case, HealthReport]]) -> None:
    case, report = reports[name]
    old = _not_agentic_findings(GOLDEN[name]["findings"])
    new = [f for f in _not_agentic_findings(report.to_json()["findings"]) if f["alert_id"] not in ADDED_ALERTS]
    assert [f["alert_id"] for f in new] == [f["alert_id"] for f in old]
    added = _added_new_critical(name, reports)
    for a, b in zip(old, new, strict=True):
        where = f"{name}: {a['alert_id']}"
        if a["alert_id"] == "version.new_critical" and added:  # counts the added rules' critical alerts too
            assert b["value"] == a["value"] + len(added) and b["severity"] == "warning", where
            assert all(alert in b["message"] for alert in added), where
            continue
        if case.pattern is None and a["alert_id"] in _ANSWER_RULES:  # old: "no data"; new: says why
            assert a["message"].endswith(": no data") and b["message"].endswith(f": {NO_ANSWER_PROTOCOL}"), where
            a = {**a, "message": b["message"]}
        for key in ("layer", "severity", "rule"):
            assert a[key] == b[key], f"{where}: {key} {a[key]!r} != {b[key]!r}"
        assert _message(a["message"]) == _message(b["message"]), where
        assert _close(a["value"], b["value"]) and _close(a["threshold"], b["threshold"]), where
        assert set(a["numbers"]) == set(b["numbers"]) - ADDED_NUMBERS.get(a["alert_id"], set()), where
        assert all(_close(a["numbers"][k], b["numbers"][k]) for k in a["numbers"]), (where, a["numbers"], b["numbers"])
        if a["alert_id"] in BY_LENGTH | BY_SPREAD:
            by = "length" if a["alert_id"] in BY_LENGTH else "spread"
            assert len(b["evidence_rollout_ids"]) == len(a["evidence_rollout_ids"]), where
            if a["evidence_rollout_ids"]:
                got = _keys_of(case.run_dir, b["evidence_rollout_ids"], by)
                assert got == _keys_of(case.run_dir, a["evidence_rollout_ids"], by), where
        else:
            assert b["evidence_rollout_ids"] == a["evidence_rollout_ids"], where


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_read_problems_match_the_old_report(name: str, reports: dict[str, tuple[Case, HealthReport]]) -> None:
    case, report = reports[name]
    old = [(p["path"], p["line"], p["message"]) for p in GOLDEN[name]["problems"]]
    old = [p for p in old if (name, p[0], p[1]) not in COERCED_STRING_LINES]
    new = [
        (Path(p.path).relative_to(case.run_dir).as_posix() if p.line else "rollouts", p.line, p.message)
        for p in report.problems
    ]
    assert new == old


def test_single_turn_cases_hold_no_agentic_metric_or_finding(reports: dict[str, tuple[Case, HealthReport]]) -> None:
    single = [n for n, row in GOLDEN.items() if not any(k == "turns_mean" for k in row["metrics"])]
    assert len(single) >= 10
    for name in single:
        report = reports[name][1].to_json()
        assert report["metrics"] == _not_agentic_metrics(report["metrics"]), name
        assert report["findings"] == _not_agentic_findings(report["findings"]), name


def test_every_alert_of_the_report_fires_in_some_golden_case() -> None:
    fired = {f["alert_id"] for row in GOLDEN.values() for f in row["findings"] if f["severity"] != "ok"}
    families = {a if not a.startswith("signal.component.") else "signal.component" for a in fired}
    # the agentic alerts fire in test_diag_agentic_metrics_and_alerts.py
    expected = {
        "score.reward_hacking", "score.no_strict_score", "score.strict_regression", "score.rewarded_wrong",
        "score.unrewarded_correct", "signal.dead_groups", "signal.low_spread", "signal.coarse_reward",
        "signal.component", "signal.advantage_extreme", "signal.dead_training", "signal.dead_sources",
        "signal.update_too_large", "signal.train_score_collapse", "behaviour.truncation",
        "behaviour.length_reward_corr", "behaviour.length_growth", "behaviour.degeneration",
        "behaviour.format_failure", "behaviour.multi_answer", "behaviour.empty_response",
        "behaviour.exploration_collapse", "version.strict_regression", "version.reward_hacking",
        "version.new_critical",
    }  # fmt: skip
    assert expected <= families, expected - families
