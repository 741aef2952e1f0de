"""A metric that reads NaN or "no data" never switches a rule or a trigger off silently.

- the report names every rule it could not evaluate, with the reason (checked on every golden case);
- the trigger language says what an unknown value does (`check`, `known(...)`);
- the controller records, in case memory, every skill trigger the report left unknown, with the metrics it
  missed, once per iteration.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from diag_golden_runs import build_cases

from agent.context import Context
from agent.decisions.triggers import record_unevaluated_triggers
from diagnostics.report import build_report
from harness.answers import AnswerProtocol
from harness.manifest import load_harness
from skills.models import SkillRecord
from skills.retrieval import unevaluated
from skills.seeds import SEED_SKILLS
from skills.triggers import TriggerError, check, evaluate, matched_terms, parse

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_every_rule_without_data_is_named_in_the_notes(tmp_path: Path) -> None:
    cases = build_cases(tmp_path)
    checked = 0
    for name, case in cases.items():
        report = build_report(case.run_dir, answer=AnswerProtocol(pattern=case.pattern) if case.pattern else None)
        covered = {rule for note in report.notes for rule in note.split(": ", 1)[0].split(", ")}
        for finding in report.findings:
            if math.isnan(finding.value) and not finding.message.endswith("(add `answer:` to evotrainer.yaml)"):
                assert finding.alert_id in covered, (name, finding.alert_id, report.notes)
                checked += 1
        assert all(": not evaluated" in note for note in report.notes), report.notes
    assert checked > 20  # the golden cases leave many rules without data


@pytest.mark.parametrize(
    ("trigger", "metrics", "value", "missing"),
    [
        ("a > 1 or b > 1", {"b": 0.0}, None, ("a",)),
        ("a > 1 or b > 1", {"b": 2.0}, True, ("a",)),
        ("a > 1 and b > 1", {"b": 0.0}, False, ("a",)),
        ("a > 1", {"a": math.nan}, None, ("a",)),
        ("not known(a) or a > 1", {}, True, ("a",)),
        ("not known(a) or a > 1", {"a": 0.5}, False, ()),
        ("known(a) and a > 1", {"a": math.nan}, False, ("a",)),
        ("known(vs_parent__x)", {"vs_parent/x": 1.0}, True, ()),
    ],
)
def test_check_tells_false_from_unknown_and_names_what_was_missing(
    trigger: str, metrics: dict[str, float], value: bool | None, missing: tuple[str, ...]
) -> None:
    result = check(trigger, metrics)
    assert (result.value, result.missing) == (value, missing)
    assert evaluate(trigger, metrics) is (value is True)


def test_known_is_the_only_call_and_takes_one_name() -> None:
    for bad in ("known(a, b)", "known(1)", "known(a=1)", "len(a) > 1", "known(a) > 0", "known(_x)"):
        with pytest.raises(TriggerError):
            parse(bad)
    assert matched_terms("known(a) and a > 1", {"a": 2.0}) == ["known(a) (a=2)", "a > 1 (a=2)"]


def test_unknown_seed_triggers_are_listed_with_their_missing_metrics() -> None:
    records = [SkillRecord(spec=s) for s in SEED_SKILLS]
    metrics: dict[str, Any] = {"dead_group_ratio": 0.6, "filter_present": 1, "candidate_reward_length_term": 0}
    gaps = {g.name: g.missing for g in unevaluated(records, metrics)}
    assert "dense-auxiliary-reward" in gaps and gaps["dense-auxiliary-reward"] == ("reward_discrete",)
    assert "std-group-filter" not in gaps  # decided (False) without any missing metric
    assert "never-reward-brevity" not in gaps


def test_the_propose_step_records_unknown_triggers_in_case_memory_once(tmp_path: Path) -> None:
    from sqlalchemy import select

    from agent.adapters import ledger
    from skills.repository import seed_skills
    from store import engine as store_engine
    from store import repository as repo
    from store.models import Case

    url = f"sqlite:///{tmp_path / 'store.db'}"
    store_engine.upgrade(url)
    ctx = Context(workdir=str(tmp_path), db_url=url)
    with ledger.db(url) as db:
        seed_skills(db)
        repo.create_session(db, session_id="s", harness_path="/h", repo_path="/r", max_iterations=1,
                            max_train_steps=1, main_branch="main")  # fmt: skip
    harness = load_harness(EXAMPLES / "arithmetic-oracle")
    state: Any = {"iteration": 1, "session_id": "s"}
    metrics = {"dead_group_ratio": 0.6, "domain": "math", "filter_present": 1, "candidate_reward_length_term": 0}
    lines = record_unevaluated_triggers(ctx, state, harness, metrics)
    assert any(line.startswith("dense-auxiliary-reward (no value for reward_discrete)") for line in lines)
    record_unevaluated_triggers(ctx, state, harness, metrics)  # a re-run node records nothing twice
    with ledger.db(url) as db:
        cases = db.scalars(select(Case)).all()
        assert len(cases) == 1 and cases[0].kind == "pattern"
        assert cases[0].signature["unevaluated_triggers"]["dense-auxiliary-reward"] == ["reward_discrete"]
        assert "could not be evaluated" in cases[0].summary


def _blind_run(run_dir: Path) -> Path:
    """A run an older trainer wrote: no `kept` flags, no actor/update_norm, strict scores on 2 groups only.

    Six steps of 10 groups x 4 samples with a live reward; the strict evaluator scored the samples of two
    groups of the first step (right and wrong answers in each), too few mixed groups to grade the reward's ranking.
    """
    from diagnostics.schema import Rollout, append_metrics, write_rollouts

    for step in range(1, 7):
        rows = []
        for g in range(10):
            for i in range(4):
                strict = float(i % 2) if g < 2 and step == 1 else None
                rows.append(
                    Rollout("old", step, "train", f"p{g}", f"{step}-{g}", i, f"{g}+1=", f"{g + i % 2}", str(g + 1),
                            0.25 * i, strict_score=strict)
                )  # fmt: skip
        write_rollouts(run_dir / "rollouts" / "train" / f"step_{step}.jsonl", rows)
        append_metrics(run_dir / "metrics.jsonl", step, {"critic/score/mean": 0.375, "actor/entropy": 1.0})
    return run_dir


# (metric the trigger reads, the rule the report could not evaluate for lack of it, words of the reason)
BLIND = [
    ("misranked_group_rate", "score.misranked_groups", "2 training group(s) hold both"),
    ("no_update_share", "signal.no_update", "logs no actor/update_norm"),
    ("kept_live_ratio", "signal.filter_drops_signal", "kept"),
]


@pytest.mark.parametrize(("metric", "rule", "reason"), BLIND, ids=[b[0] for b in BLIND])
def test_a_trigger_over_a_metric_without_data_follows_its_unknown_semantics_and_the_report_says_why(
    tmp_path: Path, metric: str, rule: str, reason: str
) -> None:
    from agent.decisions.triggers import trigger_metrics
    from diagnostics.findings import Severity, render_text

    report = build_report(_blind_run(tmp_path / "old"))
    # the report: the rule is not evaluated (NaN, never an alert), and its notes say so with the reason
    assert math.isnan(report.metrics[metric])
    finding = report.finding(rule)
    assert finding is not None and math.isnan(finding.value) and finding.severity is Severity.OK
    notes = [n for n in report.notes if n.split(": ", 1)[0].split(", ").count(rule)]
    assert len(notes) == 1 and ": not evaluated: " in notes[0] and reason in notes[0], report.notes
    assert report.why_not_evaluated(metric) == notes[0]
    text = render_text(report)
    assert "[not evaluated]" in text and notes[0] in text
    assert report.to_json()["metrics"][metric] is None and notes[0] in report.to_json()["notes"]

    # the trigger language: what reads it is unknown (never matched, also under `not`), named as missing
    metrics = trigger_metrics(report.metrics, load_harness(EXAMPLES / "arithmetic-oracle"))
    for trigger in (f"{metric} > 0.1", f"not {metric} <= 0.1", f"{metric} > 0.1 and filter_present == 1"):
        result = check(trigger, metrics)
        assert (result.value, result.missing) == (None, (metric,)), trigger
        assert evaluate(trigger, metrics) is False
    # ...unless the trigger declares what a missing value means
    assert check(f"not known({metric}) or {metric} > 0.1", metrics).value is True
    assert check(f"known({metric}) and {metric} > 0.1", metrics).value is False
    assert check(f"{metric} > 0.1 or filter_present == 1", metrics).value is True  # decided by the known term


def test_a_seed_trigger_left_unknown_by_a_blind_report_is_listed_with_the_report_s_reason(tmp_path: Path) -> None:
    from agent.decisions.triggers import trigger_metrics

    report = build_report(_blind_run(tmp_path / "old"))
    metrics = trigger_metrics(report.metrics, load_harness(EXAMPLES / "arithmetic-oracle"))
    gaps = {g.name: g.missing for g in unevaluated([SkillRecord(spec=s) for s in SEED_SKILLS], metrics)}
    assert "strict-answer-extraction" not in gaps  # decided: rewarded_wrong_rate is known and fires
    assert gaps["stabilise-policy-updates"] == ("ppo_kl_max", "train_score_collapse"), gaps
    for name in gaps["stabilise-policy-updates"]:  # every metric it missed: the report says why it has none
        assert report.why_not_evaluated(name) is not None, (name, report.notes)
    # a rule that was not evaluated leaves its metric unknown, never a silent "no" (1 step carries strict scores)
    assert math.isnan(report.metrics["reward_hacking"])
    assert report.why_not_evaluated("reward_hacking") == (
        "score.reward_hacking: not evaluated: cannot check the trend (fewer than 2 steps with strict scores)"
    )
    assert check("reward_hacking >= 1", metrics).value is None
    assert report.why_not_evaluated("dead_group_ratio") is None  # evaluated: nothing to explain
