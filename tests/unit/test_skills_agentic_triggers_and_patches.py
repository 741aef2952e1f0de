"""The agentic seed skills fire on the failure modes they fix (triggers over the real agentic metrics
of synthetic runs) and their patches do what they say on a small agentic harness (`agentic_harness.py`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
import agentic_episodes as E
from agentic_harness import EFFICIENCY, PAYS_CALLS, make_agentic_harness

from agent.cli import app
from diagnostics.agentic import (
    CUT_PROGRESS_SHARE,
    CUT_SUCCESS_WARNING,
    CUT_WARNING,
    ECHO_TRAP_WARNING,
    diagnose_agentic,
)
from diagnostics.agentic_docs import TRAJECTORY_MARK
from diagnostics.findings import Severity
from diagnostics.schema import write_rollouts
from diagnostics.table import table_from_rollouts
from harness.calls import load_function, validate_reward
from harness.manifest import load_harness
from skills.context import count_terms, filter_drops_marked, length_terms, trigger_context
from skills.patches import NO_ENV, GuardSkillError, SkillPatchError, apply_skill, skill_fits
from skills.seeds import SEED_SKILLS
from skills.triggers import evaluate, parse, unknown_names

SEEDS = {s.name: s for s in SEED_SKILLS}
AGENTIC = ("trajectory-filter", "raise-turn-budget", "confirmed-behaviour-reward", "never-pay-action-counts")
SKELETON = Path(__file__).resolve().parents[2] / "examples" / "skeleton"


def _metrics(rows: list[Any], **context: Any) -> dict[str, Any]:
    out = diagnose_agentic(table_from_rollouts(rows)).metrics
    base = {"filter_present": 1, "filter_drops_marked": 0, "candidate_reward_length_term": 0,
            "candidate_reward_action_count_term": 0}  # fmt: skip
    return {**dict(out), **base, **context}


def _matching(metrics: dict[str, Any]) -> set[str]:
    names = (*AGENTIC, "never-reward-brevity")
    return {n for n in names if evaluate(SEEDS[n].trigger, metrics)}


def test_agentic_triggers_read_only_metrics_that_exist() -> None:
    for name in AGENTIC:
        assert not unknown_names(SEEDS[name].trigger), name
    report_keys = set(_metrics(E.echo_trap())) | set(_metrics(E.cut_successes()))
    for name in AGENTIC:
        names = parse(SEEDS[name].trigger).names
        assert names <= report_keys, (name, names - report_keys)


@pytest.mark.parametrize(
    ("scenario", "context", "expected"),
    [
        (E.healthy, {}, set()),
        (E.echo_trap, {}, set()),  # the level-1 filter waits for a mark-aware group filter
        (E.echo_trap, {"filter_drops_marked": 1}, {"trajectory-filter"}),
        (E.abandonment, {"filter_drops_marked": 1}, {"trajectory-filter"}),
        (E.one_turn_collapse, {"filter_drops_marked": 1}, {"trajectory-filter", "never-reward-brevity"}),
        (E.cut_successes, {}, {"raise-turn-budget", "confirmed-behaviour-reward"}),  # cut before the check
        (E.tool_spam, {}, {"confirmed-behaviour-reward", "never-pay-action-counts"}),
        (E.healthy, {"candidate_reward_action_count_term": 1},
         {"confirmed-behaviour-reward", "never-pay-action-counts"}),
        (E.healthy, {"candidate_reward_length_term": 1}, {"never-reward-brevity"}),
    ],
)  # fmt: skip
def test_each_agentic_skill_fires_on_the_failure_it_fixes(
    scenario: Any, context: dict[str, Any], expected: set[str]
) -> None:
    assert _matching(_metrics(scenario(), **context)) == expected


def test_an_echo_trap_does_not_raise_the_turn_budget() -> None:
    """Both stop at the cap; only work in progress (not a loop) or successes at the cap mean the cap binds."""
    loop = _metrics(E.echo_trap())
    assert loop["max_turns_rate"] > 0.15 and not evaluate(SEEDS["raise-turn-budget"].trigger, loop)


def test_a_cap_that_binds_on_successes_raises_the_turn_budget_though_few_episodes_are_cut() -> None:
    """The trigger reads the evidence the cut_successes alert reads, not the share of episodes cut.

    The lookup task's turn-budget scenario: its run cut 11% of the episodes (below the 0.15 truncation bar)
    while every success used every turn the cap allows; the level the cap cuts earns nothing at all.
    """
    few = _metrics(E.few_cut_successes())
    assert few["max_turns_rate"] == pytest.approx(8 / 72) and few["max_turns_rate"] < 0.15
    assert few["success_at_cap_rate"] == 1.0 and few["cut_progress_rate"] == 1.0
    alerts = {f.alert_id: f.severity for f in diagnose_agentic(table_from_rollouts(E.few_cut_successes())).findings}
    assert alerts["agentic.cut_successes"] is Severity.WARNING
    assert evaluate(SEEDS["raise-turn-budget"].trigger, few)


def test_the_turn_budget_trigger_uses_the_cap_rules_thresholds() -> None:
    trigger = SEEDS["raise-turn-budget"].trigger
    assert f"success_at_cap_rate > {CUT_SUCCESS_WARNING}" in trigger and f"max_turns_rate > {CUT_WARNING}" in trigger
    assert f"cut_progress_rate >= {CUT_PROGRESS_SHARE}" in trigger
    assert f"echo_trap_rate < {ECHO_TRAP_WARNING}" in trigger
    # either cap rule fires it, only on work in progress and without an echo trap; at the thresholds nothing does
    bound = {"success_at_cap_rate": 0.5, "max_turns_rate": 0.05, "cut_progress_rate": 1.0, "echo_trap_rate": 0.0}
    assert evaluate(trigger, bound)
    assert evaluate(trigger, {**bound, "success_at_cap_rate": 0.0, "max_turns_rate": 0.5})
    assert not evaluate(trigger, {**bound, "success_at_cap_rate": CUT_SUCCESS_WARNING, "max_turns_rate": CUT_WARNING})
    assert not evaluate(trigger, {**bound, "cut_progress_rate": CUT_PROGRESS_SHARE - 0.01})
    assert not evaluate(trigger, {**bound, "echo_trap_rate": ECHO_TRAP_WARNING})


def test_single_turn_metrics_match_no_agentic_skill() -> None:
    single = {"dead_group_ratio": 0.6, "truncation_rate": 0.2, "filter_present": 0, "filter_drops_marked": 0,
              "candidate_reward_length_term": 0, "candidate_reward_action_count_term": 0}  # fmt: skip
    assert _matching(single) == set()


def test_agentic_skills_fit_only_harnesses_with_an_env(tmp_path: Path) -> None:
    single = load_harness(SKELETON)
    agentic = make_agentic_harness(tmp_path / "h")
    for name in AGENTIC:
        if SEEDS[name].is_guard:
            continue
        assert skill_fits(SEEDS[name], single) == NO_ENV, name
        assert skill_fits(SEEDS[name], agentic) is None, name
    assert skill_fits(SEEDS["raise-length-budget"], single) is None
    # a guard that also reads a single-turn signal (the length term) guards every harness
    assert skill_fits(SEEDS["never-reward-brevity"], single) is None
    assert skill_fits(SEEDS["never-reward-brevity"], agentic) is None
    # on a single-turn run (no turn counts) its trigger is decided, not unknown
    assert evaluate(SEEDS["never-reward-brevity"].trigger, {"candidate_reward_length_term": 0}) is False


# --- (a) the level-1 trajectory filter -----------------------------------------------------------------------


def _episode_info(turns: int, tools: list[str], stop: str = "answer", **extra: Any) -> dict[str, Any]:
    return {"num_turns": turns, "tool_calls": len(tools), "stop_reason": stop,
            "turns": [{"tool": t} for t in tools] + [{"tool": None}], **extra}  # fmt: skip


def test_trajectory_filter_marks_unpaid_abandoned_looping_and_capped_episodes(tmp_path: Path) -> None:
    harness = make_agentic_harness(tmp_path / "h")
    applied = apply_skill(SEEDS["trajectory-filter"], harness.root, harness, metrics=_metrics(E.echo_trap()))
    assert applied.files == ("harness/reward.py",) and "ECHO_AT=6.4" in applied.notes[0]
    source = (harness.root / "harness/reward.py").read_text()
    assert "ACT_TOOLS = frozenset(['edit_draft'])" in source and "PAY_FLOOR = 0.5" in source
    assert length_terms(source) == [] and count_terms(source) == []  # the guards do not flag the filter itself
    reward = load_function(harness.root, harness.reward)
    right, wrong = "<answer>7</answer>", "<answer>8</answer>"  # wrong but well-formed: the skeleton pays 0.1

    def score(text: str, info: dict[str, Any] | None) -> float:
        value = reward("notes", text, "7", info)
        return validate_reward(value, "harness/reward.py:compute_score")[0]

    assert score(wrong, _episode_info(2, ["search_notes"])) == TRAJECTORY_MARK  # looked once, gave up
    assert score(wrong, _episode_info(1, [], stop="abandon")) == TRAJECTORY_MARK
    assert score(wrong, _episode_info(9, ["search_notes"] * 8, stop="max_turns")) == TRAJECTORY_MARK  # a loop
    assert score(wrong, _episode_info(4, ["search_notes", "edit_draft"], stop="length")) == TRAJECTORY_MARK
    assert score(wrong, _episode_info(4, ["search_notes", "edit_draft", "check_draft"])) == pytest.approx(0.1)
    assert score(right, _episode_info(2, ["search_notes"])) == 1.0  # paid like a success: never marked
    assert score(wrong, None) == pytest.approx(0.1)  # no trajectory recorded: never marked
    assert reward("notes", wrong, "7", _episode_info(2, []))["level1_filtered"] == 1.0
    with pytest.raises(SkillPatchError, match="wrapped already"):
        apply_skill(SEEDS["trajectory-filter"], harness.root, harness, metrics=_metrics(E.echo_trap()))


def test_trajectory_filter_needs_the_run_evidence(tmp_path: Path) -> None:
    harness = make_agentic_harness(tmp_path / "h")
    with pytest.raises(SkillPatchError, match="echo_trap_turns"):
        apply_skill(SEEDS["trajectory-filter"], harness.root, harness, metrics={})


def test_the_std_group_filter_drops_the_marks_so_the_two_levels_compose(tmp_path: Path) -> None:
    harness = make_agentic_harness(tmp_path / "h")
    gf = harness.group_filter
    assert gf is not None and not filter_drops_marked((harness.root / gf.path).read_text())
    apply_skill(SEEDS["std-group-filter"], harness.root, harness)
    source = (harness.root / gf.path).read_text()
    assert filter_drops_marked(source)
    assert trigger_context("code", "x = 1", source)["filter_drops_marked"] == 1
    filter_groups = load_function(harness.root, gf)
    m = TRAJECTORY_MARK
    groups = [[1.0, m, m, 1.0], [1.0, 0.1, m, 0.1], [m, m, m, m], [0.1, 0.1, 0.1, m], [1.0, 0.0, 1.0, 0.0]]
    assert filter_groups(groups, {}) == [False, True, False, False, True]


# --- (b) a turn budget that cuts successes -------------------------------------------------------------------


def test_raise_turn_budget_doubles_max_turns_or_creates_it_from_the_observed_cap(tmp_path: Path) -> None:
    metrics = _metrics(E.cut_successes())
    harness = make_agentic_harness(tmp_path / "a")
    applied = apply_skill(SEEDS["raise-turn-budget"], harness.root, harness, metrics=metrics)
    assert applied.notes == ("harness/trainer.yaml: max_turns 4 -> 8",)
    assert "max_turns: 8\n" in (harness.root / "harness/trainer.yaml").read_text()
    absent = make_agentic_harness(tmp_path / "b", trainer_extra="")
    apply_skill(SEEDS["raise-turn-budget"], absent.root, absent, metrics=metrics)  # the run's cap was 4
    assert "max_turns: 8\n" in (absent.root / "harness/trainer.yaml").read_text()
    high = make_agentic_harness(tmp_path / "c", trainer_extra="max_turns: 40\n")
    apply_skill(SEEDS["raise-turn-budget"], high.root, high, metrics=metrics)
    assert "max_turns: 64\n" in (high.root / "harness/trainer.yaml").read_text()  # the limit


# --- (c) confirmation-style behaviour terms ------------------------------------------------------------------


def test_confirmed_behaviour_reward_credits_checks_never_counts(tmp_path: Path) -> None:
    harness = make_agentic_harness(tmp_path / "h", reward=PAYS_CALLS)
    assert "float(correct) + 0.1 * calls" in count_terms(PAYS_CALLS)
    apply_skill(SEEDS["confirmed-behaviour-reward"], harness.root, harness)
    source = (harness.root / "harness/reward.py").read_text()
    assert count_terms(source) == [] and length_terms(source) == []
    assert "VERIFY_TOOLS = frozenset(['check_draft'])" in source
    reward = load_function(harness.root, harness.reward)
    right, wrong = "<answer>7</answer>", "<answer>8</answer>"

    def score(text: str, tools: list[str]) -> float:
        seen = "".join(f"<call>{t} x</call><obs>ok</obs>" for t in tools)  # each call's result in the context
        return float(reward("notes", seen + text, "7", _episode_info(len(tools) + 1, tools))["score"])

    full = ["search_notes", "edit_draft", "check_draft"]
    assert score(right, full) == pytest.approx(1.25)
    assert score(right, ["edit_draft", "check_draft"]) == pytest.approx(1.15)  # no look first
    assert score(right, ["search_notes", "check_draft", "edit_draft"]) == pytest.approx(1.1)  # checked before
    assert score(right, ["search_notes", "search_notes"]) == 1.0  # never acted
    assert score(right, []) == 0.0  # no tool call at all: on a harness with tools, a guess
    assert score(wrong, full) == pytest.approx(0.25)  # confirmation never reaches correctness
    assert score(wrong, full * 5) == pytest.approx(0.25)  # and more calls earn nothing more
    assert score("no answer", full) == 0.0


# --- (d) never reward brevity, applied to turn counts; never pay action counts -------------------------------


def test_the_brevity_guard_reads_turn_counts_and_the_count_guard_call_counts() -> None:
    assert "1 - 0.3 * (extra_info or {}).get('num_turns', 1) / MAX_TURNS" in length_terms(EFFICIENCY)
    assert trigger_context("code", EFFICIENCY, None)["candidate_reward_length_term"] == 1
    # a read of the field itself, with no telling name around it (the efficiency factor's turn count)
    assert length_terms("def f(x, info):\n    return x * (1 - 0.3 * info['num_turns'] / 8)\n") != []
    assert length_terms("def f(x, info):\n    return x * (1 - 0.3 * info.get('num_turns') / 8)\n") != []
    assert trigger_context("code", PAYS_CALLS, None)["candidate_reward_action_count_term"] == 1
    strict = (SKELETON / "harness" / "reward.py").read_text()
    assert count_terms(strict) == [] and length_terms(strict) == []
    for guard in ("never-reward-brevity", "never-pay-action-counts"):
        with pytest.raises(GuardSkillError):
            apply_skill(SEEDS[guard], SKELETON, load_harness(SKELETON))


def test_diagnose_grades_a_declared_verify_tool_the_policy_never_calls(tmp_path: Path) -> None:
    """`evotrainer diagnose --harness` classifies tools from the manifest: a declared check tool left unused is
    laziness (act_then_verify_rate 0), where by names alone the run shows no verify tool at all (not graded)."""
    harness = make_agentic_harness(tmp_path / "h")
    rows = [
        E.episode(0, g, i, [("search_notes", "k", True), ("edit_draft", "7", True)], reward=1.0, strict=1.0)
        for g in range(4)
        for i in range(4)
    ]
    run = tmp_path / "run"
    write_rollouts(run / "rollouts" / "train" / "step_0.jsonl", rows)
    runner = CliRunner()
    bare = json.loads(runner.invoke(app, ["diagnose", str(run), "--json"]).stdout)
    assert bare["metrics"]["act_then_verify_rate"] is None and bare["metrics"]["search_before_act_rate"] == 1.0
    declared = runner.invoke(app, ["diagnose", str(run), "--json", "--harness", str(harness.root)])
    assert declared.exit_code == 0, declared.output
    assert json.loads(declared.stdout)["metrics"]["act_then_verify_rate"] == 0.0
    text = runner.invoke(app, ["diagnose", str(run), "--harness", str(harness.root)]).stdout
    assert "agentic.act_then_verify" in text and "act_then_verify_rate = 0" in text
