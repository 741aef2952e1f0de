"""A reward exploit that an arm sharing the incumbent's reward code learned counts as the incumbent's.

On shortcut-bonus (seed 0) both trainer probes of iteration 2 learned the direct-answer bonus within their
pilots (`score.rewarded_wrong`, `score.reward_hacking`) while the control stayed clean; with nothing in the
incumbent's report the session proposed nothing, and the next control collapsed from 0.860 to 0.290.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from scenario_cache import scenario_dir

from agent.decisions.triggers import trigger_metrics
from agent.nodes.diagnose import shared_reward_arms
from diagnostics.findings import HealthReport, Layer, Severity, graded
from diagnostics.score import REWARDED_WRONG_CRITICAL, REWARDED_WRONG_WARNING
from diagnostics.shared_reward import SHARED_PREFIX, reward_metrics_with_shared, with_shared_reward_evidence
from harness.manifest import load_harness
from skills.seeds import SEED_SKILLS
from skills.triggers import evaluate


def _report(run_id: str, rewarded_wrong: float, hacking: float) -> HealthReport:
    wrong = graded(
        "score.rewarded_wrong", Layer.SCORE, rewarded_wrong, metric="rewarded_wrong_rate",
        warning=REWARDED_WRONG_WARNING, critical=REWARDED_WRONG_CRITICAL,
        what="strict-wrong responses rewarded like correct ones", evidence=(f"{run_id}:s40:p1:0",),
        numbers={"num_wrong": 120.0},
    )  # fmt: skip
    hack = graded("score.reward_hacking", Layer.SCORE, hacking, metric="reward_hacking", warning=0.5,
                  what="reward up while strict falls")  # fmt: skip
    metrics = {"rewarded_wrong_rate": rewarded_wrong, "reward_hacking": hacking, "strict_acc": 0.8}
    return HealthReport(run_id, f"/runs/{run_id}", (wrong, hack), metrics)


def test_an_arm_that_learned_the_exploit_adds_a_warning_and_the_shared_metric() -> None:
    own = _report("v2.0-control", 0.0, 0.0)
    arms = [_report("v2.1-probe-group-size-up-x2", 0.52, 1.0), _report("v2.2-probe-prompts", 0.35, 0.0)]
    out = with_shared_reward_evidence(own, arms)
    assert out.metrics["rewarded_wrong_rate"] == 0.0  # the run's own value is kept as measured
    assert out.metrics[SHARED_PREFIX + "rewarded_wrong_rate"] == 0.52
    assert math.isnan(out.metrics[SHARED_PREFIX + "misranked_group_rate"])  # no arm measured it
    shared = {f.alert_id: f for f in out.alerts()}
    assert set(shared) == {"score.shared.rewarded_wrong", "score.shared.reward_hacking"}
    wrong = shared["score.shared.rewarded_wrong"]
    assert wrong.severity is Severity.WARNING and wrong.value == 0.52 and "v2.1-probe-group-size-up-x2" in wrong.message
    assert wrong.numbers["arms_fired"] == 2.0 and wrong.evidence_rollout_ids == (
        "v2.1-probe-group-size-up-x2:s40:p1:0",
    )
    # a rule the incumbent's own rollouts already fire adds nothing; no arms, nothing changes
    assert not [f for f in with_shared_reward_evidence(arms[0], [own]).alerts() if "shared" in f.alert_id]
    assert with_shared_reward_evidence(own, []) is own


def test_the_reward_repair_matches_on_the_shared_evidence_after_a_json_round_trip() -> None:
    own = _report("v2.0-control", 0.0, 0.0)
    out = with_shared_reward_evidence(own, [_report("v2.1-probe", 0.52, 1.0)])
    strict = next(s for s in SEED_SKILLS if s.name == "strict-answer-extraction")
    harness = load_harness(scenario_dir("shortcut-bonus", "defective"))
    assert not evaluate(strict.trigger, trigger_metrics(dict(own.to_json()["metrics"]), harness))
    metrics = trigger_metrics(dict(HealthReport.from_json(out.to_json()).to_json()["metrics"]), harness)
    assert metrics["rewarded_wrong_rate"] == 0.52 and evaluate(strict.trigger, metrics)


def test_the_larger_value_wins_and_unknown_values_never_lower_a_known_one() -> None:
    assert (
        reward_metrics_with_shared({"rewarded_wrong_rate": 0.4, SHARED_PREFIX + "rewarded_wrong_rate": 0.1})[
            "rewarded_wrong_rate"
        ]
        == 0.4
    )
    assert reward_metrics_with_shared({SHARED_PREFIX + "reward_hacking": 1.0})["reward_hacking"] == 1.0
    assert (
        reward_metrics_with_shared({"reward_hacking": math.nan, SHARED_PREFIX + "reward_hacking": 0.0})[
            "reward_hacking"
        ]
        == 0.0
    )
    assert reward_metrics_with_shared({"rewarded_wrong_rate": 0.2}) == {"rewarded_wrong_rate": 0.2}


def _candidate(cid: str, iteration: int, factor: str, status: str) -> dict[str, Any]:
    return {"id": cid, "iteration": iteration, "factor": factor, "factors": [factor], "status": status}


def _pilot(cid: str, iteration: int, run_dir: Path, outcome: str = "ok") -> dict[str, Any]:
    return {"candidate_id": cid, "iteration": iteration, "outcome": outcome, "run_dir": str(run_dir)}


def test_only_last_iterations_arms_with_the_incumbents_reward_code_count(tmp_path: Path) -> None:
    dirs = {name: tmp_path / name for name in ("t1", "r1", "ctl", "old", "bad")}
    for d in dirs.values():
        d.mkdir()
    candidates = [_candidate("t1", 2, "trainer", "reverted"), _candidate("r1", 2, "reward", "reverted"),
                  _candidate("old", 1, "trainer", "reverted"), _candidate("bad", 2, "filter", "reverted")]  # fmt: skip
    pilots = [_pilot("t1", 2, dirs["t1"]), _pilot("r1", 2, dirs["r1"]), _pilot("control", 2, dirs["ctl"]),
              _pilot("old", 1, dirs["old"]), _pilot("bad", 2, dirs["bad"], outcome="candidate_error")]  # fmt: skip
    state: dict[str, Any] = {"iteration": 3, "candidates": candidates, "pilots": pilots}
    assert [p["candidate_id"] for p in shared_reward_arms(state)] == ["t1"]  # type: ignore[arg-type]
    # a merged reward change: the iteration's other arms trained the old reward
    state["candidates"] = [*candidates[:1], _candidate("r1", 2, "reward", "merged"), *candidates[2:]]
    assert shared_reward_arms(state) == []  # type: ignore[arg-type]
