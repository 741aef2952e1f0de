"""The agentic health metrics take the values the paper's definitions give, and each alert fires on
the failure mode it names (one-turn collapse, echo trap, tool spam, abandonment, cut successes, ...) and
stays quiet on a healthy run. Episodes come from `agentic_episodes.py` (realistic trajectories)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import agentic_episodes as E

from diagnostics.agentic import diagnose_agentic
from diagnostics.agentic_docs import AGENTIC_METRIC_DOCS, TRAJECTORY_MARK, is_agentic_metric
from diagnostics.findings import LayerOutput, Severity, render_text
from diagnostics.report import METRIC_DOCS, build_report
from diagnostics.schema import Rollout, StopReason, write_rollouts
from diagnostics.table import table_from_rollouts
from diagnostics.tool_roles import ToolRole, ToolRoles, tool_role
from harness.env import EnvSpec


def run(rows: list[Rollout], roles: ToolRoles | None = None) -> LayerOutput:
    table = table_from_rollouts(rows)
    return diagnose_agentic(table) if roles is None else diagnose_agentic(table, roles)


def sev(out: LayerOutput, alert: str) -> Severity:
    found = [f for f in out.findings if f.alert_id == alert]
    assert len(found) == 1, alert
    return found[0].severity


def fired(out: LayerOutput) -> set[str]:
    return {f.alert_id for f in out.findings if f.fired}


@pytest.mark.parametrize(
    ("name", "role"),
    [
        ("search_code", ToolRole.SEARCH), ("lookup", ToolRole.SEARCH), ("readFile", ToolRole.SEARCH),
        ("edit_file", ToolRole.ACT), ("search_replace", ToolRole.ACT), ("submit", ToolRole.ACT),
        ("run_tests", ToolRole.VERIFY), ("check_answer", ToolRole.VERIFY), ("pytest", ToolRole.VERIFY),
        ("python", ToolRole.OTHER), ("calculator", ToolRole.OTHER),
    ],
)  # fmt: skip
def test_tool_roles_come_from_the_words_of_the_name(name: str, role: ToolRole) -> None:
    assert tool_role(name) is role


def test_a_declared_description_classifies_a_tool_its_name_does_not() -> None:
    assert tool_role("calc", "Check a candidate answer against the tests") is ToolRole.VERIFY
    roles = ToolRoles(overrides={"python": ToolRole.ACT})
    assert roles.role("python") is ToolRole.ACT and roles.role("lookup") is ToolRole.SEARCH


def test_single_turn_rows_get_no_agentic_metric_or_finding() -> None:
    rows = [
        Rollout("r", 0, "train", f"p{g}", f"g{g}", i, "q", "<ans>1</ans>", "1", float(i % 2))
        for g in range(3)
        for i in range(4)
    ]
    out = run(rows)
    assert out.findings == () and dict(out.metrics) == {}


def test_a_healthy_search_edit_test_run_fires_no_agentic_alert() -> None:
    out = run(E.healthy())
    assert fired(out) == set()
    m = out.metrics
    # 6 of 8 episodes: 3 calls + answer (4 turns); 2 of 8: 2 calls + answer (3 turns)
    assert m["turns_mean"] == pytest.approx((6 * 4 + 2 * 3) / 8)
    assert m["turns_mean_success"] == 4.0 and m["turns_mean_failed"] == 3.0
    assert m["tool_calls_mean"] == pytest.approx((6 * 3 + 2 * 2) / 8)
    assert m["first_action_turn"] == 2.0  # the edit is the second turn
    assert m["search_before_act_rate"] == 1.0 and m["act_then_verify_rate"] == pytest.approx(0.75)
    assert m["act_ratio"] == pytest.approx(8 / 22) and m["verify_ratio"] == pytest.approx(6 / 22)
    assert m["repeated_call_rate"] == 0.0 and m["call_bigram_repetition"] == 0.0 and m["max_same_tool_run_p90"] == 1
    assert m["act_by_answer"] == 0.0 and m["cut_rate"] == 0.0 and m["abandon_rate"] == 0.0


def test_one_turn_collapse_under_an_efficiency_reward() -> None:
    out = run(E.one_turn_collapse())
    m = out.metrics
    assert m["one_turn_rate"] == pytest.approx(7 / 8) and m["abandon_rate"] == pytest.approx(7 / 8)
    assert m["turns_mean"] == pytest.approx((7 * 1 + (4 + 7 + 10) * 4 / 12) / 8)
    assert m["turns_p90_failed"] == 1.0
    assert sev(out, "agentic.one_turn_collapse") is Severity.WARNING
    assert sev(out, "agentic.abandonment") is Severity.CRITICAL
    # the efficiency factor pays the one-turn exits 0.7 (strict 0): 7 of 8 paid without success
    assert m["paid_without_success_rate"] == pytest.approx(7 / 8)
    assert sev(out, "agentic.paid_without_success") is Severity.CRITICAL
    # and among successes fewer turns earn more: corr(turns, reward) = -1
    assert m["turns_reward_corr"] == pytest.approx(-1.0)
    assert sev(out, "agentic.reward_pays_fewer_turns") is Severity.WARNING


def test_echo_trap_long_repetitive_failures() -> None:
    out = run(E.echo_trap())
    m = out.metrics
    # successes take 4 turns: echo traps are failures beyond max(1.6 x 4, 6) = 6.4 turns; half the episodes loop
    assert m["echo_trap_turns"] == pytest.approx(6.4) and m["echo_trap_rate"] == 0.5
    assert sev(out, "agentic.echo_trap") is Severity.CRITICAL
    assert m["max_same_tool_run_p90"] == 14.0 and sev(out, "agentic.same_tool_run") is Severity.WARNING
    # each loop repeats its first call 13 times: 13/14 of its calls; successes repeat nothing
    assert m["repeated_call_rate"] == pytest.approx((13 / 14) / 2) and sev(out, "agentic.tool_spam") is Severity.WARNING
    assert m["call_bigram_repetition"] == pytest.approx((1 - 1 / 13) / 2)
    assert m["failed_turns_ratio"] == pytest.approx(14 / 9) and sev(out, "agentic.failed_turns") is Severity.WARNING
    # cut at the cap, but as a loop, not as work in progress: the cap is not the problem
    assert m["max_turns_rate"] == 0.5 and m["turn_cap"] == 14 and m["cut_progress_rate"] == 0.0
    assert m["success_at_cap_rate"] == 0.0 and sev(out, "agentic.cut_successes") is Severity.OK


def test_acting_without_searching_first() -> None:
    out = run(E.blind_edits())
    assert out.metrics["search_before_act_rate"] == pytest.approx(2 / 8)
    assert out.metrics["act_then_verify_rate"] == 1.0
    assert sev(out, "agentic.search_before_act") is Severity.WARNING


def test_a_reward_paying_tool_calls_shows_as_paid_failures_and_a_call_reward_correlation() -> None:
    out = run(E.tool_spam())
    m = out.metrics
    assert m["tool_calls_reward_corr"] == pytest.approx(1.0)
    assert sev(out, "agentic.reward_pays_tool_calls") is Severity.WARNING
    # successes earn 1.3: a failure is paid like one from 0.65, i.e. 7+ calls (i = 5, 6, 7 of each group)
    assert m["paid_without_success_rate"] == pytest.approx(3 / 8)
    assert sev(out, "agentic.paid_without_success") is Severity.CRITICAL
    assert m["tool_share/search_code"] == pytest.approx((2 + 39) / (6 + 39))  # 2 + (4 + ... + 9) of 6 + 39 calls


def test_abandonment_is_three_turns_or_fewer_without_an_action() -> None:
    out = run(E.abandonment())
    assert out.metrics["abandon_rate"] == pytest.approx(5 / 8)  # one search, then an answer: 2 turns, no edit
    assert out.metrics["one_turn_rate"] == 0.0
    assert sev(out, "agentic.abandonment") is Severity.CRITICAL


def test_a_low_turn_cap_cuts_work_in_progress_and_binds_on_successes() -> None:
    out = run(E.cut_successes())
    m = out.metrics
    cut = 3 * 8 + 3 * 2  # the odd groups whole, two samples of each even group
    assert m["max_turns_rate"] == pytest.approx(cut / 48) and m["cut_rate"] == m["max_turns_rate"]
    assert m["turn_cap"] == 4.0 and m["success_at_cap_rate"] == 1.0 and m["cut_progress_rate"] == 1.0
    assert m["cut_solvable_rate"] == pytest.approx(6 / cut)
    assert sev(out, "agentic.episode_cut") is Severity.WARNING
    assert sev(out, "agentic.cut_successes") is Severity.WARNING
    assert sev(out, "agentic.echo_trap") is Severity.OK


def test_a_failing_tool_is_named_by_the_per_tool_failure_rate() -> None:
    out = run(E.failing_edits())
    m = out.metrics
    assert m["tool_failure_rate/edit_file"] == pytest.approx(3 / 8) and m["tool_failure_rate/run_tests"] == 0.0
    assert m["tool_failure_rate"] == pytest.approx(12 / 96) and m["tool_failure_rate_max"] == pytest.approx(3 / 8)
    finding = next(f for f in out.findings if f.alert_id == "agentic.tool_failure")
    assert finding.severity is Severity.WARNING and "edit_file" in finding.message


def test_a_lookup_only_harness_acts_by_answering() -> None:
    out = run(E.lookup_only())
    m = out.metrics
    assert m["act_by_answer"] == 1.0 and math.isnan(m["first_action_turn"])
    assert m["abandon_rate"] == pytest.approx(3 / 8)  # answered without a lookup
    assert m["search_before_act_rate"] == pytest.approx(5 / 8)  # looked up before answering
    assert math.isnan(m["act_then_verify_rate"])  # no verify tool: not graded
    assert sev(out, "agentic.abandonment") is Severity.WARNING
    assert sev(out, "agentic.act_then_verify") is Severity.OK


def test_declared_tools_decide_the_act_mode_and_grade_an_unused_verify_tool() -> None:
    """A harness declaring run_tests that the policy never calls is lazy (self-test 0 < 50%), not unmeasured."""
    rows = [
        E.episode(0, g, i, E.SOLVE[:2], reward=float(i % 2), strict=float(i % 2)) for g in range(4) for i in range(8)
    ]
    unknown = run(rows)
    assert math.isnan(unknown.metrics["act_then_verify_rate"])
    env = EnvSpec.model_validate(
        {"entry": "harness/env.py:make_env", "call_pattern": r"<call>(\w+) (.*?)</call>", "call_end": "</call>",
         "tools": [{"name": "search_code"}, {"name": "edit_file"}, {"name": "run_tests"}]}
    )  # fmt: skip
    declared = run(rows, ToolRoles.from_env(env))
    assert declared.metrics["act_then_verify_rate"] == 0.0
    assert sev(declared, "agentic.act_then_verify") is Severity.WARNING


def test_template_collapse_on_one_tool_and_late_actions() -> None:
    rows = []
    for g in range(4):
        for i in range(8):
            if i == 0:
                calls = [("search_code", "a", True), ("edit_file", "e", True), ("run_tests", "t", True)]
            else:  # seven searches with fresh arguments, then one edit at the end
                calls = [("search_code", f"q{k}", True) for k in range(7)] + [("edit_file", "e", True)]
            rows.append(E.episode(0, g, i, calls, reward=float(i == 0), strict=float(i == 0)))
    out = run(rows)
    m = out.metrics
    assert m["first_action_position"] == pytest.approx((1 / 3 + 7 * 7 / 8) / 8)
    assert sev(out, "agentic.action_timidity") is Severity.WARNING
    # entropy of {7 searches, 1 edit}: 0.5436 bits; of {search, edit, test}: log2(3)
    h = -(7 / 8) * math.log2(7 / 8) - (1 / 8) * math.log2(1 / 8)
    assert m["tool_type_entropy"] == pytest.approx((math.log2(3) + 7 * h) / 8)
    assert m["tool_type_entropy_norm"] == pytest.approx(m["tool_type_entropy"] / math.log2(3))
    collapsed = [E.episode(0, g, i, [("search_code", f"q{k}", True) for k in range(5)], reward=0.0, strict=0.0)
                 for g in range(4) for i in range(7)]  # fmt: skip
    out = run(collapsed + rows[:4])
    assert out.metrics["tool_type_entropy_norm"] < 0.2 and sev(out, "agentic.tool_diversity") is Severity.WARNING


def test_repeated_call_pairs_fire_the_bigram_rule() -> None:
    pair = [("search_code", "q", True), ("edit_file", "e", False)] * 4
    rows = [E.episode(0, g, i, pair, reward=0.0, strict=0.0) for g in range(3) for i in range(4)]
    out = run(rows)
    assert out.metrics["call_bigram_repetition"] == pytest.approx(1 - 2 / 7)  # 7 bigrams, 2 distinct
    assert sev(out, "agentic.call_repetition") is Severity.WARNING


def test_rising_turns_fire_the_echo_trap_precursor() -> None:
    rising = [
        E.episode(s, g, i, [("search_code", f"q{k}", True) for k in range(2 + s)], reward=1.0, strict=1.0)
        for s in range(5) for g in range(2) for i in range(4)
    ]  # fmt: skip
    out = run(rising)
    assert out.metrics["turns_rising"] == 1.0 and sev(out, "agentic.turns_rising") is Severity.WARNING
    steady = [E.episode(s, g, i, E.SOLVE, reward=1.0, strict=1.0) for s in range(5) for g in range(2) for i in range(4)]
    assert run(steady).metrics["turns_rising"] == 0.0


def test_marked_trajectories_are_counted() -> None:
    rows = E.abandonment()
    marked = [r if r.reward > 0 else replace(r, reward=TRAJECTORY_MARK) for r in rows]
    out = run(marked)
    assert out.metrics["marked_rate"] == pytest.approx(5 / 8)
    assert sev(out, "agentic.level1_marked") is Severity.WARNING


def test_episodes_without_recorded_turns_get_the_turn_metrics_only() -> None:
    rows = [
        Rollout("r", 0, "train", f"p{g}", f"g{g}", i, "q", "x", "1", float(i > 1), strict_score=float(i > 1),
                num_turns=20 if i < 2 else 4, tool_calls=2, stop_reason=StopReason.ANSWER)
        for g in range(4) for i in range(8)
    ]  # fmt: skip
    out = run(rows)
    assert out.metrics["failed_turns_ratio"] == pytest.approx(20 / 8)
    assert math.isnan(out.metrics["repeated_call_rate"]) and math.isnan(out.metrics["search_before_act_rate"])
    assert next(f for f in out.findings if f.alert_id == "agentic.tool_spam").message.endswith("no data")


def test_episodes_with_and_without_turns_in_one_run_keep_their_own_evidence() -> None:
    """A reader that records turns for some episodes only: the others count by their call numbers."""
    with_turns = E.abandonment()[:8]  # 5 abandon (one search, no edit), 3 solve
    bare = [replace(r, turns=(), sample_index=r.sample_index + 8) for r in E.abandonment()[:8]]
    out = run(with_turns + bare)
    # with turns: 5 of 8 abandon (no edit); without: every episode made a call, none abandons
    assert out.metrics["abandon_rate"] == pytest.approx(5 / 16)
    assert out.metrics["search_before_act_rate"] == 1.0  # over the 3 recorded acting episodes
    assert out.metrics["max_same_tool_run_mean"] == 1.0


ScenarioBuilder = Callable[[], list[Rollout]]


def test_every_agentic_alert_fires_in_some_scenario_and_every_metric_is_documented() -> None:
    scenarios: list[ScenarioBuilder] = [
        E.one_turn_collapse, E.echo_trap, E.tool_spam, E.abandonment, E.cut_successes, E.failing_edits, E.lookup_only,
        E.blind_edits, lambda: E.lookups("h"), lambda: E.limited_lookups(2),
    ]  # fmt: skip
    outs = [run(build()) for build in scenarios]
    marked = [replace(r, reward=TRAJECTORY_MARK) for r in E.healthy()]
    outs.append(run(marked))
    pair = [("search_code", "q", True), ("edit_file", "e", True)] * 4
    outs.append(run([E.episode(0, g, i, pair, reward=0.0, strict=0.0) for g in range(3) for i in range(4)]))
    late = [("search_code", f"q{k}", True) for k in range(7)] + [("edit_file", "e", True)]
    outs.append(run([E.episode(0, g, i, late, reward=float(i % 2), strict=0.0) for g in range(3) for i in range(4)]))
    rising = [E.episode(s, 0, i, [("lookup", f"{k}", True) for k in range(1 + s)], reward=1.0, strict=1.0)
              for s in range(5) for i in range(4)]  # fmt: skip
    outs.append(run(rising))
    one_tool = [E.episode(0, g, i, [("search_code", f"{k}", True) for k in range(5)], reward=0.0, strict=0.0)
                for g in range(4) for i in range(7)] + E.healthy(1)[:1]  # fmt: skip
    outs.append(run(one_tool))
    every = {f.alert_id for f in outs[0].findings}
    assert len(every) == 21
    assert set().union(*(fired(o) for o in outs)) == every
    keys = {k for o in outs for k in o.metrics}
    assert all(is_agentic_metric(k) for k in keys)
    documented = {k for k in AGENTIC_METRIC_DOCS if "<" not in k}
    assert keys - {k for k in keys if "/" in k} == documented
    assert set(AGENTIC_METRIC_DOCS) <= set(METRIC_DOCS)


def test_the_health_report_of_an_agentic_run_lists_the_agentic_metrics_and_alerts(tmp_path: Path) -> None:
    rows = E.echo_trap()
    write_rollouts(tmp_path / "rollouts" / "train" / "step_0.jsonl", rows)
    report = build_report(tmp_path)
    assert report.metrics["echo_trap_rate"] == 0.5
    text = render_text(report)
    assert "agentic.echo_trap" in text and "echo_trap_rate = 0.5" in text
    assert {"agentic.echo_trap", "agentic.tool_spam"} <= {f.alert_id for f in report.alerts()}
    assert report.to_json()["metrics"]["turns_mean"] == 9.0


def test_identical_calls_share_a_hash_and_single_turn_tables_keep_no_turns() -> None:
    calls = [("lookup", "k1", True), ("lookup", "k1", False), ("lookup", "k2", True), ("check", "k1", True)]
    table = table_from_rollouts([E.episode(0, 0, 0, calls, reward=1.0, strict=1.0)])
    hashes = [t["call"] for t in table["turns"][0]]
    assert hashes[0] == hashes[1] and len(set(hashes[:4])) == 3 and hashes[4] is None
    assert table.schema["turns"] == pl.List(
        pl.Struct({"tool": pl.String, "success": pl.Boolean, "policy_tokens": pl.Int64,
                   "observation_tokens": pl.Int64, "call": pl.UInt32})
    )  # fmt: skip
    single = table_from_rollouts([Rollout("r", 0, "train", "p", "g", 0, "q", "x", "1", 1.0, turns=())])
    assert single.schema["turns"] == pl.Null
    assert [t.tool for t in E.episode(0, 0, 0, calls, reward=0.0, strict=None).turns] == [
        "lookup",
        "lookup",
        "lookup",
        "check",
        None,
    ]
