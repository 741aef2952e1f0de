"""An environment whose own code refuses calls an episode needs is seen from the rollouts and repaired.

The evidence is real: the env-lookup-limit scenario's own environment (its `make_env`, loaded the way the
trainer loads it) answers the lookups a policy makes, the look-up-every-key behaviour of the lookup task's warm
start (one to three keys, the last one sometimes forgotten), and the health report's own code reads the rollouts
back. The rule reads the outcomes of calls, never the scenario's name; the probe moves a limit the
environment's code declares with the effect `env_allows_more`, never a constant picked by name.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import pytest
from agentic_episodes import episode
from scenario_cache import scenario_dir

from agent.decisions.knobs import harness_knobs
from agent.nodes.propose import probe_metrics
from agent.policies.alert_aims import critical_alerts
from agent.policies.explore import propose_probes, why_no_probe
from agent.policies.symptoms import abnormal
from diagnostics.findings import Severity
from diagnostics.report import build_report
from diagnostics.schema import Rollout, StopReason, write_rollouts
from harness.calls import load_function
from harness.manifest import Harness, load_harness
from skills.patches import apply_skill

ALERT = "agentic.tool_refuses_known_calls"
ENV = "harness/env.py"


def _rollouts(harness: Harness, rows: int = 96, size: int = 4) -> list[Rollout]:
    """Each training row a group: every sample looks its keys up through the harness's own environment (one in five
    forgets the last key of a longer prompt) and answers the sum of what it read; strict-right when that is the
    ground truth. A refused call that ends the episode leaves it without an answer (stop reason tool_error)."""
    assert harness.env is not None
    make_env = load_function(harness.root, harness.env)
    rng = random.Random(0)
    every = [json.loads(line) for line in harness.path("data/train.jsonl").read_text().splitlines()]
    data = rng.sample(every, rows)  # the file is ordered by level
    out = []
    for g, row in enumerate(data):
        keys = re.findall(r"[a-h]", row["prompt"])
        for i in range(size):
            env = make_env({k: v for k, v in row.items() if k != "ground_truth"})
            looked = keys[:-1] if len(keys) > 1 and rng.random() < 0.2 else keys
            calls, values, ended = [], [], False
            for key in looked:
                result = env.call("lookup", {"key": key})
                ok = not isinstance(result, dict) or bool(result.get("success", True))
                calls.append(("lookup", f"key={key}", ok))
                if ok:
                    values.append(int(result if not isinstance(result, dict) else result["result"]))
                if isinstance(result, dict) and result.get("done"):
                    ended = True
                    break
            right = not ended and str(sum(values)) == row["ground_truth"]
            stop = StopReason.TOOL_ERROR if ended else None
            out.append(episode(g // 16, g, i, calls, reward=float(right), strict=float(right), answer=not ended,
                               stop=stop, run="env"))  # fmt: skip
    return out


def _report(harness: Harness, run_dir: Path):  # type: ignore[no-untyped-def]
    write_rollouts(run_dir / "rollouts" / "train" / "step_0.jsonl", _rollouts(harness))
    return build_report(run_dir)


@pytest.fixture
def limited(tmp_path: Path) -> Harness:
    shutil.copytree(scenario_dir("env-lookup-limit", "defective"), tmp_path / "h")
    return load_harness(tmp_path / "h")


def test_a_limit_that_refuses_needed_lookups_is_critical_with_its_episodes(limited: Harness, tmp_path: Path) -> None:
    report = _report(limited, tmp_path / "run")
    [finding] = [f for f in report.findings if f.alert_id == ALERT]
    assert finding.severity is Severity.CRITICAL, finding
    assert report.metrics["refused_known_calls"] >= 20
    assert finding.evidence_rollout_ids and "lookup" in finding.message
    oracle = load_harness(scenario_dir("env-lookup-limit", "oracle"))
    healthy = _report(oracle, tmp_path / "oracle-run")
    [calm] = [f for f in healthy.findings if f.alert_id == ALERT]
    assert calm.severity is Severity.OK and healthy.metrics["refused_known_call_rate"] == 0.0, calm


def test_a_declared_limit_in_its_safe_range_is_raised_by_the_probe_aimed_at_the_refusals(
    limited: Harness, tmp_path: Path
) -> None:
    # The declaration calls 2 safe here (1..64), so no range rule fires: only the rollouts name the limit.
    env = limited.path(ENV)
    env.write_text(env.read_text().replace('"safe": [4, 64]', '"safe": [1, 64]'))
    knobs = harness_knobs(limited, "local")
    assert [(k.spec.key, k.in_range) for k in knobs.code if k.role == "@env"] == [("MAX_LOOKUPS", True)]
    report = _report(limited, tmp_path / "run")
    metrics = probe_metrics(report.metrics, limited, knobs)
    [alert] = [a for a in critical_alerts(report.findings, metrics) if a.alert_id == ALERT]
    ranked = propose_probes(knobs, metrics, tried=(), blocked={}, max_candidates=2,
                            only=frozenset(s.name for s in alert.symptoms), evidence=alert.as_evidence())  # fmt: skip
    first = ranked[0]
    assert first.probe is not None and first.probe.probe_id == "env:MAX_LOOKUPS:up:m0", [p.slug for p in ranked]
    assert first.skill.factor == "env" and "env_refuses_calls" in first.probe.symptoms
    apply_skill(first.skill, limited.root, limited)
    assert "MAX_LOOKUPS = 4\n" in env.read_text()
    after = _report(load_harness(limited.root), tmp_path / "after")
    assert after.metrics["refused_known_call_rate"] == 0.0


def test_without_a_declared_limit_the_alert_gets_a_reason_naming_what_is_missing(
    limited: Harness, tmp_path: Path
) -> None:
    env = limited.path(ENV)
    source = env.read_text()
    env.write_text(source[: source.index("EVOTRAINER_KNOBS = {")] + source[source.index("\n\n\nclass ") :])
    knobs = harness_knobs(limited, "local")
    assert not [k for k in knobs.code if k.role == "@env"]
    report = _report(limited, tmp_path / "run")
    metrics = probe_metrics(report.metrics, limited, knobs)
    [alert] = [a for a in critical_alerts(report.findings, metrics) if a.alert_id == ALERT]
    held = [a for a in abnormal(metrics) if a.symptom in alert.symptoms]
    reason = why_no_probe(knobs, metrics, held, tried=(), blocked={})
    assert "env_allows_more" in reason and "EVOTRAINER_KNOBS" in reason, reason


def test_the_probe_the_evidence_names_takes_a_slot_before_general_skills(
    limited: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # env-lookup-limit, iteration 1 of the benchmark session before this rule: the level-3 groups are dead, so two
    # general seed skills (a data mix, a dense reward) matched and took both slots; the env's limit waited for
    # iteration 3. With two slots the probe that names the env's limit now comes first, one skill after it.
    from seeded_store import seeded_store

    from agent.context import Context
    from agent.nodes import propose as node
    from agent.policies.heuristic import Proposal

    url = seeded_store(tmp_path)
    report = _report(limited, tmp_path / "run")
    knobs = harness_knobs(limited, "local")
    made_by: list[Proposal] = []

    def materialise(ctx: object, state: object, harness: Harness, p: Proposal, k: int, m: object) -> dict[str, str]:
        made_by.append(p)
        return {"id": f"s0-v1.{k}", "skill": ",".join(s.name for s in p.skills), "status": "proposed",
                "reason": "", "factor": p.factor, "hypothesis": p.hypothesis}  # fmt: skip

    monkeypatch.setattr(node, "_materialise", materialise)

    monkeypatch.setattr(node, "_count_use", lambda *_, **__: None)  # its skill-use record too
    metrics = node.probe_metrics({**dict(report.metrics), "dead_group_ratio": 0.5, "strict_acc_delta": 0.0},
                                 limited, knobs)  # fmt: skip
    state = {"report": report.to_json(), "iteration": 0, "session_id": "s0"}
    ctx = Context(workdir=str(tmp_path), db_url=url, max_candidates=2)
    made = node.offline_candidates(ctx, state, limited, knobs, metrics, set())  # type: ignore[arg-type]
    assert len(made) == 2 and made_by[0].probe is not None, [c["skill"] for c in made]
    assert made_by[0].probe.probe_id in {"env:MAX_LOOKUPS:default", "env:MAX_LOOKUPS:up:m0"}
    assert made_by[1].probe is None, [c["skill"] for c in made]  # the other slot still goes to a matching skill


def test_calls_the_trainer_did_not_run_are_no_refusals(tmp_path: Path) -> None:
    # turn-budget (max_turns 3): a level-3 episode writes its third lookup in the last allowed turn, and the trainer
    # does not run it (success None). The environment refused nothing; the first benchmark run of this rule read
    # those calls as refusals and drafted an env probe there.
    from dataclasses import replace

    oracle = load_harness(scenario_dir("env-lookup-limit", "oracle"))
    cut = []
    for row in _rollouts(oracle):
        turns = list(row.turns)
        calls = [i for i, t in enumerate(turns) if t.tool is not None]
        if len(calls) == 3:  # the third lookup is written in the last turn: not run, no answer after it
            turns = [*turns[: calls[2]], replace(turns[calls[2]], success=None, result="")]
            row = replace(row, turns=tuple(turns), stop_reason=StopReason.MAX_TURNS, strict_score=0.0, reward=0.0)
        cut.append(row)
    assert sum(r.stop_reason is StopReason.MAX_TURNS for r in cut) >= 20
    write_rollouts(tmp_path / "rollouts" / "train" / "step_0.jsonl", cut)
    report = build_report(tmp_path)
    [finding] = [f for f in report.findings if f.alert_id == ALERT]
    assert finding.severity is Severity.OK and report.metrics["refused_known_call_rate"] == 0.0, finding
