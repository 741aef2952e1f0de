"""Retrieval ranks own-domain skills first, cross-domain as fallback, then by win rate and specificity."""

from __future__ import annotations

import json

from skills.models import SkillRecord, SkillSpec
from skills.retrieval import interventions, rank_skills, warnings
from skills.seeds import SEED_SKILLS


def _skill(
    name: str, domain: str, trigger: str, *, applicability: tuple[str, ...] = (), factor: str = "filter"
) -> SkillSpec:
    op = (
        {"op": "guard", "rule": "no"} if factor == "guard" else {"op": "replace_file", "file": "@reward", "content": ""}
    )
    return SkillSpec(
        name=name,
        domain=domain,
        trigger=trigger,
        factor=factor,  # type: ignore[arg-type]
        patch_kind="template",
        patch=json.dumps([op]),
        expected_outcome="x",
        validation_rule="y",
        applicability=applicability,
    )


def _rec(spec: SkillSpec, wins: int = 0, losses: int = 0) -> SkillRecord:
    return SkillRecord(spec=spec, wins=wins, losses=losses, uses=wins + losses)


METRICS = {"dead_group_ratio": 0.6, "filter_present": 0, "candidate_reward_length_term": 1}


def test_own_domain_first_then_win_rate_then_specificity() -> None:
    records = [
        _rec(_skill("own-loser", "math", "dead_group_ratio > 0.3"), wins=0, losses=3),
        _rec(_skill("own-winner", "math", "dead_group_ratio > 0.3"), wins=3, losses=0),
        _rec(_skill("own-specific", "math", "dead_group_ratio > 0.3 and filter_present == 0"), wins=3, losses=0),
        _rec(_skill("swe-listed", "swe", "dead_group_ratio > 0.3", applicability=("math",)), wins=9),
        _rec(_skill("swe-only", "swe", "dead_group_ratio > 0.3"), wins=20),
        _rec(_skill("own-unmatched", "math", "dead_group_ratio > 0.9"), wins=50),
    ]
    ranked = rank_skills(records, METRICS, "math")
    assert [m.name for m in ranked] == ["own-specific", "own-winner", "own-loser", "swe-listed"]
    assert [m.tier for m in ranked] == ["own", "own", "own", "applicable"]
    assert ranked[0].win_rate == 4 / 5 and ranked[0].specificity == 2
    assert ranked[0].matched_terms == (
        "dead_group_ratio > 0.3 (dead_group_ratio=0.6)",
        "filter_present == 0 (filter_present=0)",
    )
    forced = rank_skills(records, METRICS, "math", force_fallback=True)
    assert forced[-1].name == "swe-only" and forced[-1].tier == "fallback"


def test_cross_domain_fallback_only_when_nothing_local_matches() -> None:
    records = [
        _rec(_skill("own", "code", "truncation_rate > 0.5")),
        _rec(_skill("swe-only", "swe", "dead_group_ratio > 0.3")),
    ]
    ranked = rank_skills(records, METRICS, "code")
    assert [(m.name, m.tier) for m in ranked] == [("swe-only", "fallback")]


def test_guard_skills_come_back_as_warnings() -> None:
    records = [_rec(s) for s in SEED_SKILLS]
    metrics = {**METRICS, "reward_discrete": 1}
    ranked = rank_skills(records, metrics, "math")
    assert [m.name for m in warnings(ranked)] == ["never-reward-brevity"]
    names = [m.name for m in interventions(ranked)]
    assert names == ["dense-auxiliary-reward", "std-group-filter"]
    assert all(not m.is_warning for m in interventions(ranked))
