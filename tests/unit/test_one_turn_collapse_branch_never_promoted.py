"""The one-turn-collapse branch is never promoted, even when its training reward is the
highest and its strict held-out scores happen to look better (a lucky pilot).

The never-reward-brevity guard works at two levels: at proposal time its trigger flags an efficiency
(fewer-turns) reward, from the reward's source (`candidate_reward_length_term`) or from the rollouts
(`turns_reward_corr`); at decision time the pilot's health report carries the agentic hack alerts
(`AGENTIC_HACK_ALERT_IDS`: one-turn collapse, paid without success, reward pays fewer turns / tool calls),
and a new one turns the strict improvement into "mixed": pruned, never merged. The pilots are real run
folders read by the evaluate node's own code (`agent.nodes.evaluate`), decided by `agent.decisions.evidence.decide`.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import agentic_episodes as E
from agentic_harness import EFFICIENCY

from agent.decisions.evidence import Evaluation, decide
from agent.nodes.common import cached_report
from agent.nodes.evaluate import _evaluate_one
from agent.state import PilotInfo
from diagnostics.agentic_docs import AGENTIC_HACK_ALERT_IDS, ONE_TURN_COLLAPSE, REWARD_PAYS_FEWER_TURNS
from diagnostics.findings import HACK_ALERT_IDS, Severity
from diagnostics.schema import Rollout, write_rollouts
from skills.context import trigger_context
from skills.seeds import SEED_SKILLS
from skills.triggers import evaluate

BREVITY = next(s for s in SEED_SKILLS if s.name == "never-reward-brevity")
N_PROMPTS = 24


def _runs(solved: int) -> list[Rollout]:
    """Search-edit-test runs where `solved` of 8 per group succeed (the others edit without testing and fail)."""
    return [
        E.episode(0, g, i, E.SOLVE if i < solved else E.SOLVE[:2], reward=float(i < solved), strict=float(i < solved))
        for g in range(4)
        for i in range(8)
    ]


def _partial_collapse() -> list[Rollout]:
    """An efficiency factor on successes (1 - 0.3 * turns / 10): turns shrink, none is a one-turn episode yet."""
    rows = []
    for g in range(4):
        for i in range(8):
            calls = E.SOLVE[:2] if i % 2 else E.SOLVE  # successes take 3 or 4 turns; shorter ones earn more
            if i < 6:
                rows.append(E.episode(0, g, i, calls, reward=1 - 0.3 * (len(calls) + 1) / 10, strict=1.0))
            else:
                rows.append(E.episode(0, g, i, E.SOLVE[:2], reward=0.0, strict=0.0))
    return rows


def _val(solved_of_4: list[int]) -> list[Rollout]:
    """Held-out episodes: per prompt, 4 samples of which the given number are strictly correct."""
    return [
        replace(E.episode(1, k, i, E.SOLVE, reward=0.0, strict=float(i < n)), split="val", prompt_id=f"v{k}")
        for k, n in enumerate(solved_of_4)
        for i in range(4)
    ]


def _pilot(tmp_path: Path, name: str, train: list[Rollout], val: list[Rollout]) -> PilotInfo:
    run_dir = tmp_path / name
    write_rollouts(run_dir / "rollouts" / "train" / "step_0.jsonl", train)
    write_rollouts(run_dir / "rollouts" / "val" / "step_1.jsonl", val)
    return PilotInfo(
        iteration=1, candidate_id=name, run_id=name, run_dir=str(run_dir), outcome="ok", strict_acc=0.0,
        train_reward=sum(r.reward for r in train) / len(train), checkpoint="", steps=1, message="",
    )  # fmt: skip


@pytest.fixture
def pilots(tmp_path: Path) -> dict[str, PilotInfo]:
    base = [1 + k % 3 for k in range(N_PROMPTS)]  # 1-3 of 4 correct per held-out prompt
    better = [n + 1 for n in base]  # every candidate looks one sample better on every prompt
    return {
        "control": _pilot(tmp_path, "control", _runs(4), _val(base)),
        "collapse": _pilot(tmp_path, "collapse", E.one_turn_collapse(), _val(better)),
        "shrinking": _pilot(tmp_path, "shrinking", _partial_collapse(), _val(better)),
        "sound": _pilot(tmp_path, "sound", _runs(5), _val(better)),
    }


def _evaluations(pilots: dict[str, PilotInfo]) -> dict[str, Evaluation]:
    control = pilots["control"]
    report = cached_report(Path(control["run_dir"]), None, None)
    assert not [f.alert_id for f in report.alerts(Severity.WARNING) if f.alert_id in HACK_ALERT_IDS]
    scores = {f"v{k}": (1 + k % 3) / 4 for k in range(N_PROMPTS)}
    return {n: _evaluate_one(p, control, report, scores, 0.05, None) for n, p in pilots.items() if n != "control"}


def test_the_collapse_branch_has_the_highest_training_reward_and_a_strict_gain(pilots: dict[str, PilotInfo]) -> None:
    rewards = {n: p["train_reward"] for n, p in pilots.items()}
    assert max(rewards, key=lambda n: rewards[n]) == "collapse"
    evs = _evaluations(pilots)
    for ev in evs.values():  # the same apparent strict gain for all three: the alerts alone tell them apart
        assert ev.comparison is not None and ev.comparison.ci_low > 0 and ev.comparison.delta == pytest.approx(0.25)


def test_a_branch_whose_turns_collapse_is_never_promoted(pilots: dict[str, PilotInfo]) -> None:
    evs = _evaluations(pilots)
    assert evs["collapse"].outcome_class == "mixed" and ONE_TURN_COLLAPSE in evs["collapse"].new_alerts
    assert evs["shrinking"].outcome_class == "mixed" and REWARD_PAYS_FEWER_TURNS in evs["shrinking"].new_alerts
    assert evs["sound"].outcome_class == "improvement" and not set(evs["sound"].new_alerts) & HACK_ALERT_IDS
    decisions = {d["candidate_id"]: d["decision"] for d in decide(list(evs.values()), "evotrainer")}
    assert decisions == {"collapse": "prune", "shrinking": "prune", "sound": "merge"}
    alone = decide([evs["collapse"]], "evotrainer")  # nothing better on offer: still not promoted
    assert alone[0]["decision"] == "prune" and ONE_TURN_COLLAPSE in alone[0]["rationale"]
    # the score-only baseline promotes it: the highest training reward wins there
    by_reward = {d["candidate_id"]: d["decision"] for d in decide(list(evs.values()), "score-only")}
    assert by_reward["collapse"] == "merge"


def test_the_brevity_guard_flags_the_efficiency_reward_and_its_rollouts(pilots: dict[str, PilotInfo]) -> None:
    base: dict[str, Any] = {"candidate_reward_length_term": 0, "turns_reward_corr": float("nan")}
    assert not evaluate(BREVITY.trigger, base)
    assert evaluate(BREVITY.trigger, {**base, **trigger_context("code", EFFICIENCY, None)})
    for name in ("collapse", "shrinking"):
        report = cached_report(Path(pilots[name]["run_dir"]), None, None)
        assert evaluate(BREVITY.trigger, {**base, "turns_reward_corr": report.metrics["turns_reward_corr"]}), name
    sound = cached_report(Path(pilots["sound"]["run_dir"]), None, None)
    assert not evaluate(BREVITY.trigger, {**base, "turns_reward_corr": sound.metrics["turns_reward_corr"]})


def test_the_agentic_hack_alerts_are_hack_alerts() -> None:
    assert AGENTIC_HACK_ALERT_IDS <= HACK_ALERT_IDS and ONE_TURN_COLLAPSE in AGENTIC_HACK_ALERT_IDS
