"""The skill library round-trips through a migrated store (SQLite; Postgres when available)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from skills import repository as skills_repo
from skills.models import SkillSpec
from skills.seeds import SEED_SKILLS
from skills.triggers import TriggerError
from store import engine as store_engine
from store import repository as store_repo

DEMO_METRICS = {
    "dead_group_ratio": 0.62,
    "truncation_rate": 0.31,
    "reward_hacking": 1.0,
    "train_reward_delta": 0.2,
    "strict_acc_delta": -0.05,
    "domain": "math",
    "filter_present": 0,
    "reward_discrete": 1,
    "candidate_reward_length_term": 1,
}


def _session(url: str) -> Iterator[Session]:
    engine = store_engine.make_engine(url)
    session = Session(engine)
    try:
        store_repo.create_session(session, session_id="s1", harness_path="/h", repo_path="/r", max_iterations=3,
                                  max_train_steps=100, main_branch="evo/s1/main")  # fmt: skip
        yield session
    finally:
        session.rollback()
        session.close()
        engine.dispose()


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('skills') / 'evotrainer.db'}"
    store_engine.upgrade(url)
    return url


@pytest.fixture
def db(sqlite_url: str) -> Iterator[Session]:
    yield from _session(sqlite_url)


def _round_trip(db: Session) -> None:
    ids = skills_repo.seed_skills(db)
    assert skills_repo.seed_skills(db) == ids  # idempotent upsert by name
    assert [r.spec for r in skills_repo.list_skills(db)] == sorted(SEED_SKILLS, key=lambda s: s.name)
    guard = skills_repo.get_skill(db, "never-reward-brevity")
    assert guard.spec.is_guard and guard.spec == next(s for s in SEED_SKILLS if s.name == "never-reward-brevity")
    assert {r.spec.name for r in skills_repo.list_skills(db, "code")} == {
        "raise-length-budget", "std-group-filter", "never-reward-brevity", "stabilise-policy-updates",
        # domain-neutral since Rewards written from the declared answer protocol, any source names
        "strict-answer-extraction", "dense-auxiliary-reward", "learnable-data-mix",
        # the agentic skills name tools by declared role: any domain with an env
        "trajectory-filter", "raise-turn-budget", "confirmed-behaviour-reward", "never-pay-action-counts"}  # fmt: skip

    matches = skills_repo.match_skills(db, DEMO_METRICS, "math")
    names = [spec.name for spec, _ in matches]
    assert names[:4] == [
        "dense-auxiliary-reward",
        "raise-length-budget",
        "strict-answer-extraction",
        "std-group-filter",
    ]
    assert "never-reward-brevity" in names
    terms = dict((spec.name, t) for spec, t in matches)["raise-length-budget"]
    assert terms == ["truncation_rate > 0.15 (truncation_rate=0.31)"]

    spec = skills_repo.get_skill(db, "raise-length-budget").spec
    evidence = skills_repo.evidence(spec, DEMO_METRICS)
    use = skills_repo.record_use(db, spec.name, "s1", None, evidence)
    rec = skills_repo.record_result(db, use, win=True)
    assert (rec.wins, rec.losses, rec.uses, rec.last_verified_session) == (1, 0, 1, "s1")
    rec = skills_repo.record_result(db, use, win=True)  # settling twice counts once
    assert (rec.wins, rec.losses) == (1, 0)
    rec = skills_repo.record_result(db, skills_repo.record_use(db, spec.name, "s1", None, evidence), win=False)
    assert (rec.wins, rec.losses, rec.uses) == (1, 1, 2)
    stored = db.execute(text("SELECT matched_metrics, result FROM skill_uses WHERE id = :i"), {"i": use}).one()
    loaded = stored[0] if isinstance(stored[0], dict) else json.loads(stored[0])
    assert loaded == {"truncation_rate": 0.31} and stored[1] == "win"

    skills_repo.seed_skills(db)  # re-seeding keeps the track record
    assert skills_repo.get_skill(db, "raise-length-budget").wins == 1
    # the reads the controller uses instead of its own SQL
    uses = [u.id for u in skills_repo.session_uses(db, "s1")]
    assert len(uses) == 2 and uses[0] == use and uses == sorted(uses)
    assert skills_repo.use_of_candidate(db, "no-candidate") is None
    rows = skills_repo.skill_rows(db)
    assert list(rows) == sorted(rows) and {r.name for r in rows.values()} >= {"raise-length-budget"}


def test_seed_match_use_and_result_round_trip_sqlite(db: Session) -> None:
    _round_trip(db)


@pytest.mark.postgres
def test_seed_match_use_and_result_round_trip_postgres(pg_url: str) -> None:
    store_engine.upgrade(pg_url)
    for session in _session(pg_url):
        session.execute(text("DELETE FROM skill_uses"))
        session.execute(text("UPDATE candidates SET skill_id = NULL"))  # other tests' candidates name their skill
        session.execute(text("DELETE FROM skills"))
        _round_trip(session)


def test_save_skill_upserts_and_fails_loudly(db: Session) -> None:
    base = SEED_SKILLS[1]
    sid = skills_repo.save_skill(db, base, provenance="session s1, candidate evo/s1/v0.1-budget, strict_acc +0.1")
    assert skills_repo.get_skill(db, base.name).spec.provenance.startswith("session s1")
    changed = base.model_copy(update={"trigger": "truncation_rate > 0.2"})
    assert skills_repo.save_skill(db, changed) == sid
    assert skills_repo.get_skill(db, base.name).spec.trigger == "truncation_rate > 0.2"
    bad = base.model_copy(update={"name": "bad-trigger", "trigger": "__import__('os') > 0"})  # bypasses validation
    with pytest.raises(TriggerError):
        skills_repo.save_skill(db, bad)
    with pytest.raises(ValueError, match="not allowed"):
        SkillSpec.model_validate({**base.model_dump(), "trigger": "x.y > 1"})
    with pytest.raises(skills_repo.SkillNotFoundError):
        skills_repo.get_skill(db, "nope")
    with pytest.raises(skills_repo.SkillNotFoundError):
        skills_repo.record_use(db, "nope", "s1", None, {})


def test_export_markdown_uses_the_paper_card_format() -> None:
    md = skills_repo.export_markdown(SEED_SKILLS)
    assert md.count("### Skill: ") == len(SEED_SKILLS)
    card = md.split("### Skill: raise-length-budget")[1].split("### Skill:")[0]
    fields = ["- Trigger Condition: `truncation_rate > 0.15`", "- Intervention: trainer (template patch)"]
    fields += ["- Expected Outcome:", "- Validation:", "- Domain Applicability: math, *", "- Provenance: paper"]
    for field in fields:
        assert field in card, field
    assert '"key": "@length_cap"' in card
    assert "guard (warning; never applied)" in md


def test_cli_list_show_export(sqlite_url: str, tmp_path: Path) -> None:
    from agent.cli import app

    engine = store_engine.make_engine(sqlite_url)
    with store_engine.session_scope(engine) as s:
        skills_repo.seed_skills(s)
        # every seed skill applies to any domain: one validated for math only shows the filter
        math_only = next(x for x in SEED_SKILLS if x.name == "strict-answer-extraction")
        skills_repo.save_skill(s, math_only.model_copy(update={"name": "math-only-check", "applicability": ()}))
    engine.dispose()
    runner = CliRunner()
    listed = runner.invoke(app, ["skills", "list", "--domain", "code", "--db", sqlite_url])
    assert listed.exit_code == 0, listed.output
    assert "std-group-filter" in listed.output and "math-only-check" not in listed.output
    assert "math-only-check" in runner.invoke(app, ["skills", "list", "--domain", "math", "--db", sqlite_url]).output
    shown = runner.invoke(app, ["skills", "show", "std-group-filter", "--db", sqlite_url])
    assert shown.exit_code == 0 and shown.output.startswith("### Skill: std-group-filter")
    missing = runner.invoke(app, ["skills", "show", "nope", "--db", sqlite_url])
    assert missing.exit_code == 2 and "no skill named 'nope'" in missing.output  # bad input
    out = tmp_path / "cards"
    exported = runner.invoke(app, ["skills", "export", "--out", str(out), "--db", sqlite_url])
    assert exported.exit_code == 0, exported.output
    cards = ["SKILLS.md", "math-only-check.md", *[f"{s.name}.md" for s in SEED_SKILLS]]
    assert sorted(p.name for p in out.iterdir()) == sorted(cards)
