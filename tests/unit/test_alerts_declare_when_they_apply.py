"""An alert whose rule cannot mean anything for the harness stays silent and says why.

The rule (`diagnostics.findings`, "Applicability"): a rule declares when it is inconclusive for a run; the
finding then never fires, the metric it grades reads as unknown (so no skill trigger acts on it) and the
report's notes give the reason. Two rules declare it here, on rollouts shaped as the local backend records
a calculator agent's episodes (`agentic_episodes.episode`: a turn per call, then the answer):

- `agentic.tool_diversity` on a harness that declares one tool (its episodes cannot vary their tools; a
  misspelt tool name is no choice) or whose episodes never make two calls;
- `behaviour.length_reward_corr` where the longer trajectories are the ones that call the tool, and length
  earns nothing more once the number of calls is held fixed.

Both rules still fire where they mean something: a three-tool harness whose episodes collapsed to one tool;
length paid beyond the tool calls.
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import agentic_episodes as E

from diagnostics.findings import HealthReport, Severity
from diagnostics.report import build_report
from diagnostics.schema import Rollout, write_rollouts
from diagnostics.tool_roles import ToolRoles
from harness.env import EnvSpec
from skills.triggers import check

CALCULATOR = {"name": "calculator", "description": "evaluate an arithmetic expression"}


def _roles(*tools: dict[str, str]) -> ToolRoles:
    env = {"entry": "harness/env.py:make_env", "call_pattern": r"<call>(\w+) (.*?)</call>", "call_end": "</call>",
           "tools": list(tools)}  # fmt: skip
    return ToolRoles.from_env(EnvSpec.model_validate(env))


def calculator_run(steps: int = 3) -> list[Rollout]:
    """A calculator agent mid-training: the episodes that use the tool (one or two calls) get the answer
    right; those that answer at once are wrong; now and then the policy misspells the tool (a failed call)."""
    rows = []
    for s in range(steps):
        for g in range(6):
            for i in range(8):
                if i < 3:
                    calls = [("calculator", f"{g + 11}*{i + 7}", True)]
                elif i < 5:
                    calls = [("calculator", f"{g + 11}*{i + 7}", True), ("calculator", f"{(g + 11) * (i + 7)}+5", True)]
                elif i == 5 and g % 3 == 0:
                    calls = [("calculater", f"{g}*{i}", False), ("calculator", f"{g + 11}*{i + 7}", True)]
                else:
                    calls = []
                right = 1.0 if calls else 0.0
                done = E.episode(s, g, i, calls, reward=right, strict=right, run="calc")
                wording = (7 * g + 3 * i + s) % 5  # answers differ by a few tokens, whatever their reward
                rows.append(replace(done, response_tokens=done.response_tokens + wording))
    return rows


def _report(tmp_path: Path, rows: list[Rollout], roles: ToolRoles) -> HealthReport:
    for step in sorted({r.step for r in rows}):
        write_rollouts(tmp_path / "rollouts" / "train" / f"step_{step}.jsonl", [r for r in rows if r.step == step])
    return build_report(tmp_path, roles=roles)


def _finding(report: HealthReport, alert: str):  # type: ignore[no-untyped-def]
    found = report.finding(alert)
    assert found is not None, alert
    return found


def _note(report: HealthReport, alert: str) -> str:
    return next(n for n in report.notes if n.startswith(f"{alert}: "))


def test_tool_diversity_is_inconclusive_on_a_one_tool_harness(tmp_path: Path) -> None:
    report = _report(tmp_path, calculator_run(), _roles(CALCULATOR))
    diversity = _finding(report, "agentic.tool_diversity")
    assert not diversity.fired and diversity.severity is Severity.OK
    assert "declares 1 tool(s) (calculator): no other tool to call" in diversity.inconclusive
    assert diversity.message.startswith("template collapse: each episode calls one tool over and over: inconclusive")
    assert math.isnan(report.metrics["tool_type_entropy_norm"])  # unknown to skill triggers
    assert "inconclusive for this run: the harness declares 1 tool(s)" in _note(report, "agentic.tool_diversity")
    assert report.why_not_evaluated("tool_type_entropy_norm") is not None


def test_tool_diversity_still_fires_where_episodes_could_choose(tmp_path: Path) -> None:
    tools = [{"name": "search_code"}, {"name": "edit_file"}, {"name": "run_tests"}]
    collapsed = [E.episode(0, g, i, [("search_code", f"q{k}", True) for k in range(5)], reward=0.0, strict=0.0)
                 for g in range(4) for i in range(8)]  # fmt: skip
    report = _report(tmp_path, collapsed, _roles(*tools))
    diversity = _finding(report, "agentic.tool_diversity")
    assert diversity.severity is Severity.WARNING and not diversity.inconclusive
    assert report.metrics["tool_type_entropy_norm"] == 0.0  # one of three declared tools, every episode


def test_tool_diversity_is_inconclusive_when_no_episode_makes_two_calls(tmp_path: Path) -> None:
    tools = [{"name": "lookup"}, {"name": "check_answer"}]
    single = [E.episode(0, g, i, [("lookup", f"k{i}", True)], reward=float(i % 2), strict=float(i % 2))
              for g in range(4) for i in range(8)]  # fmt: skip
    diversity = _finding(_report(tmp_path, single, _roles(*tools)), "agentic.tool_diversity")
    assert not diversity.fired and "no episode made two or more tool calls" in diversity.inconclusive


def test_length_reward_corr_is_inconclusive_when_length_follows_tool_use(tmp_path: Path) -> None:
    report = _report(tmp_path, calculator_run(), _roles(CALCULATOR))
    corr = _finding(report, "behaviour.length_reward_corr")
    assert not corr.fired and corr.numbers["length_reward_corr"] > 0.8  # the raw correlation, kept as evidence
    assert "longer trajectories are the ones that call more tools" in corr.inconclusive
    assert corr.numbers["length_reward_corr_given_tool_calls"] <= 0.3
    assert math.isnan(report.metrics["length_reward_corr"])
    assert "behaviour.length_reward_corr" in {n.split(": ")[0] for n in report.notes}
    # a skill whose trigger reads the metric sees it as unknown, never as length gaming
    result = check("length_reward_corr > 0.3", dict(report.metrics))
    assert result.unknown and result.missing == ("length_reward_corr",)


def test_length_paid_beyond_the_tool_calls_still_fires(tmp_path: Path) -> None:
    rows = []
    for r in calculator_run():
        longer = r.reward > 0 and r.sample_index % 2 == 0  # the same calls, padded answers, paid more
        rows.append(replace(r, response_tokens=r.response_tokens + (40 if longer else 0),
                            reward=r.reward + (0.5 if longer else 0.0)))  # fmt: skip
    corr = _finding(_report(tmp_path, rows, _roles(CALCULATOR)), "behaviour.length_reward_corr")
    assert corr.severity is Severity.WARNING and not corr.inconclusive
    assert corr.numbers["length_reward_corr_given_tool_calls"] > 0.3


@pytest.mark.parametrize("scenario", [E.healthy, E.echo_trap, E.tool_spam, E.abandonment, E.lookup_only])
def test_an_inconclusive_finding_round_trips_and_never_counts_as_an_alert(tmp_path: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    report = _report(tmp_path, scenario(), _roles(CALCULATOR))
    again = HealthReport.from_json(report.to_json())
    assert [f.inconclusive for f in again.findings] == [f.inconclusive for f in report.findings]
    assert all(not f.fired for f in report.findings if f.inconclusive)
    assert all(math.isnan(f.value) for f in report.findings if f.inconclusive)
