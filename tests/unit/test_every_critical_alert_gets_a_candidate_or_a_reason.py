"""Every critical alert of the incumbent's report gets a candidate aimed at it, or a recorded reason.

The reports are real: the health report's own code on the golden run folders (`diag_golden_runs.py`, the
recorded 20-step run of `examples/arithmetic` among them). The harnesses are the bundled examples; only the
materialising step (git worktree, surface check) is replaced by a recorder, so the slot rule and the
answers are what is tested, and the answers are read back from the store's case memory.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest
from diag_golden_runs import Case, build_cases
from seeded_store import seeded_store
from sqlalchemy.orm import Session

from agent.context import Context
from agent.decisions.knobs import harness_knobs
from agent.nodes import propose as node
from agent.nodes.common import run_table
from agent.policies.alert_aims import ALERT_ANSWERS, NO_PROBE, critical_alerts
from agent.policies.heuristic import Proposal
from agent.state import CandidateInfo
from diagnostics.findings import HealthReport, Severity
from diagnostics.report import build_report
from harness.answers import AnswerProtocol
from harness.manifest import Harness, load_harness
from store import engine as store_engine
from store import repository as store_repo

ROOT = Path(__file__).resolve().parents[2]
SID = "s0"


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Case, HealthReport]]:
    out: dict[str, tuple[Case, HealthReport]] = {}
    for name, case in build_cases(tmp_path_factory.mktemp("golden")).items():
        answer = AnswerProtocol(pattern=case.pattern) if case.pattern else None
        parent = out[case.parent][1] if case.parent else None
        out[name] = (case, build_report(case.run_dir, parent=parent, answer=answer))
    return out


def _store(tmp_path: Path, *, seeded: bool) -> str:
    return seeded_store(tmp_path, SID, seeded=seeded)


def _harness(tmp_path: Path, example: str) -> Harness:
    shutil.copytree(ROOT / "examples" / example, tmp_path / example)
    return load_harness(tmp_path / example)


def _propose(
    ctx: Context,
    harness: Harness,
    report: HealthReport,
    monkeypatch: pytest.MonkeyPatch,
    refuse_probes: bool = False,
    **metrics: float,
) -> list[CandidateInfo]:
    """The heuristic policy's candidates on `report` (its metrics overridden by `metrics`), recorded."""
    rows = run_table(Path(report.run_dir), harness.manifest.answer).train
    knobs = harness_knobs(harness, "local", rows)
    state: Any = {"report": report.to_json(), "iteration": 0, "session_id": SID}

    def materialise(ctx: Context, state: Any, harness: Harness, p: Proposal, k: int, m: Any) -> CandidateInfo:
        kind = "probe" if p.probe is not None else "skill"
        refused = refuse_probes and p.probe is not None
        return {"id": f"{SID}-v0.{k}-{kind}", "skill": ",".join(s.name for s in p.skills),
                "status": "refused" if refused else "proposed", "reason": "patch did not apply" if refused else "",
                "factor": p.factor, "hypothesis": p.hypothesis}  # type: ignore[typeddict-item]  # fmt: skip

    monkeypatch.setattr(node, "_materialise", materialise)

    monkeypatch.setattr(node, "_count_use", lambda *_, **__: None)  # its skill-use record too
    probe_metrics = node.probe_metrics({**dict(report.metrics), **metrics}, harness, knobs)
    return node.offline_candidates(ctx, state, harness, knobs, probe_metrics, set())


def _answers(url: str) -> dict[str, dict[str, Any]]:
    with Session(store_engine.make_engine(url)) as db:
        [case] = [c for c in store_repo.session_cases(db, SID) if ALERT_ANSWERS in c.signature]
        return dict(case.signature[ALERT_ANSWERS])


def test_each_critical_alert_of_the_golden_reports_has_symptoms_aimed_at_it_or_a_reason(
    golden: dict[str, tuple[Case, HealthReport]],
) -> None:
    seen: dict[str, tuple[str, ...]] = {}
    for _, report in golden.values():
        for alert in critical_alerts(report.findings, report.metrics):
            assert alert.symptoms or alert.no_probe, alert
            seen[alert.alert_id] = tuple(s.name for s in alert.symptoms)
    # each is aimed through its own metric or the table: a dead-group alert at the dead-group symptom, a reward
    # that disagrees with the evaluator at the reward's symptoms, a collapse at exploration
    assert seen["signal.dead_groups"] == ("dead_groups", "filter_keeps_dead")
    assert seen["signal.update_too_large"] == ("big_updates", "tiny_updates")  # both read ppo_kl_max
    assert "reward_pays_wrong" in seen["score.rewarded_wrong"] and "reward_pays_wrong" in seen["score.reward_hacking"]
    assert "reward_misses_right" in seen["score.unrewarded_correct"]
    assert "exploration_collapse" in seen["behaviour.exploration_collapse"]
    assert seen["version.strict_regression"] == () and "rollback" in NO_PROBE["version.strict_regression"]


def test_the_demo_harness_gets_a_candidate_aimed_at_each_of_its_critical_alerts(
    golden: dict[str, tuple[Case, HealthReport]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, report = golden["arithmetic-s0"]  # a real 20-step run of examples/arithmetic (three planted defects)
    critical = [f.alert_id for f in report.alerts(Severity.CRITICAL)]
    assert {"score.rewarded_wrong", "signal.dead_groups"} <= set(critical)
    url = _store(tmp_path, seeded=True)
    harness = _harness(tmp_path, "arithmetic")
    made = _propose(Context(workdir=str(tmp_path), db_url=url, max_candidates=5), harness, report, monkeypatch)
    answers = _answers(url)
    assert set(answers) == set(critical)
    for alert_id, answer in answers.items():
        assert answer["candidates"] and not answer["reason"], (alert_id, answer)
        for cid in answer["candidates"]:
            assert alert_id in next(c for c in made if c["id"] == cid)["aims"]
    skills = [c for c in made if c["id"].endswith("-skill")]
    assert made[: len(skills)] == skills  # matching skills keep the first slots (they carry a track record)


def test_an_alert_left_without_a_slot_says_so(
    golden: dict[str, tuple[Case, HealthReport]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, report = golden["arithmetic-s0"]
    url = _store(tmp_path, seeded=True)
    ctx = Context(workdir=str(tmp_path), db_url=url, max_candidates=1)
    assert len(_propose(ctx, _harness(tmp_path, "arithmetic"), report, monkeypatch)) == 1
    answers = _answers(url)
    unanswered = [a for a in answers.values() if not a["candidates"]]
    assert unanswered and all("slot" in a["reason"] and "waits" in a["reason"] for a in unanswered), answers


def test_a_critical_alert_gets_its_probe_without_a_stall_and_only_because_it_is_critical(
    golden: dict[str, tuple[Case, HealthReport]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, report = golden["collapse"]  # wrong answers sampled with near-certainty
    assert [f.alert_id for f in report.alerts(Severity.CRITICAL)] == ["behaviour.exploration_collapse"]
    url = _store(tmp_path, seeded=False)  # no stored skill: only a probe can answer
    ctx = Context(workdir=str(tmp_path), db_url=url)
    harness = _harness(tmp_path, "arithmetic-oracle")  # settings inside their ranges: nothing else is unprompted
    made = _propose(ctx, harness, report, monkeypatch, strict_acc_delta=0.2)  # held-out accuracy rising
    assert len(made) == 1 and made[0]["aims"] == ["behaviour.exploration_collapse"]
    assert "critical alert behaviour.exploration_collapse" in made[0]["hypothesis"]  # the alert is the evidence
    assert made[0]["factor"] == "trainer" and "-up-" in made[0]["skill"]  # a move that explores more
    assert _answers(url)["behaviour.exploration_collapse"]["candidates"] == [made[0]["id"]]

    refused_url = _store(tmp_path / "refused", seeded=False)
    ctx_refused = Context(workdir=str(tmp_path / "refused"), db_url=refused_url)
    tried = _propose(ctx_refused, harness, report, monkeypatch, refuse_probes=True, strict_acc_delta=0.2)
    assert len(tried) > 1 and all(c["status"] == "refused" for c in tried)  # each refusal hands on to the next
    reason = _answers(refused_url)["behaviour.exploration_collapse"]["reason"]
    assert reason.startswith("every candidate aimed at it was refused") and "patch did not apply" in reason

    warned = dataclasses.replace(report, findings=tuple(
        dataclasses.replace(f, severity=Severity.WARNING) if f.severity is Severity.CRITICAL else f
        for f in report.findings
    ))  # fmt: skip
    assert _propose(ctx, harness, warned, monkeypatch, strict_acc_delta=0.2) == []  # a warning waits for a stall


def test_an_optimiser_that_jumps_gets_smaller_steps_without_a_stall(
    golden: dict[str, tuple[Case, HealthReport]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, report = golden["trainer"]  # dead groups, dead training, updates far beyond a trust region, collapse
    url = _store(tmp_path, seeded=False)
    ctx = Context(workdir=str(tmp_path), db_url=url)
    made = _propose(ctx, _harness(tmp_path, "arithmetic-oracle"), report, monkeypatch, strict_acc_delta=0.2)
    answers = _answers(url)
    assert set(answers) == {a.alert_id for a in critical_alerts(report.findings, report.metrics)}
    assert all(a["candidates"] for a in answers.values()), answers
    [jump] = answers["signal.update_too_large"]["candidates"]
    probe = next(c for c in made if c["id"] == jump)
    assert probe["factor"] == "trainer" and "-down-" in probe["skill"], probe  # a move that makes smaller steps


@pytest.mark.parametrize("case", ["format-gate", "degenerate"])
def test_a_critical_alert_nothing_can_act_on_gets_one_line_saying_why(
    case: str, golden: dict[str, tuple[Case, HealthReport]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, report = golden[case]  # the reward pays wrong answers and withholds pay from right ones
    url = _store(tmp_path, seeded=False)
    ctx = Context(workdir=str(tmp_path), db_url=url)
    # a program-synthesis reward whose rollouts here report no components; its code declares step budgets
    # (knobs that pay more right programs) and nothing that pays fewer wrong ones
    harness = _harness(tmp_path, "synth-fn-oracle")
    made = _propose(ctx, harness, report, monkeypatch, strict_acc_delta=0.2)
    answers = _answers(url)
    critical = [f.alert_id for f in report.alerts(Severity.CRITICAL)]
    assert {"score.rewarded_wrong", "score.unrewarded_correct"} <= set(critical) and set(answers) == set(critical)
    assert not answers["score.rewarded_wrong"]["candidates"]
    reason = answers["score.rewarded_wrong"]["reason"]
    assert "pay_fewer_wrong" in reason and "EVOTRAINER_KNOBS" in reason and "two or more components" in reason
    [aimed] = answers["score.unrewarded_correct"]["candidates"]
    probe = next(c for c in made if c["id"] == aimed)
    assert probe["factor"] == "reward" and probe["skill"] == "probe-step-limit-up-x4"  # the reward's own knob
    finding = next(f for f in report.findings if f.alert_id == "score.unrewarded_correct")
    assert finding.evidence_rollout_ids and finding.evidence_rollout_ids[0] in probe["hypothesis"]  # its evidence
