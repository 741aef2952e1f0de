"""Issue 17: a metric that reads NaN or "no data" never switches a rule or a trigger off silently.

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
from agent.triggers import record_unevaluated_triggers
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

    from agent import ledger
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
