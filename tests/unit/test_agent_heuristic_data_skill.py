"""The heuristic policy proposes the data-mix skill beside the filter skill: different factors, one each."""

from __future__ import annotations

from agent.policies.heuristic import propose_from_skills
from skills.models import SkillRecord
from skills.retrieval import rank_skills
from skills.seeds import SEED_SKILLS

RECORDS = [SkillRecord(spec=s) for s in SEED_SKILLS]
# The demo once reward and length are fixed (real 12-step run): dead groups from levels 1, 2 and 5.
FIXED_REWARD_AND_LENGTH = {
    "domain": "math",
    "dead_group_ratio": 0.63,
    "dead_source_share": 0.78,
    "truncation_rate": 0.0,
    "rewarded_wrong_rate": 0.0,
    "reward_hacking": 0,
    "unrewarded_correct_rate": 0.0,
    "filter_present": 0,
    "reward_discrete": 1,
    "candidate_reward_length_term": 0,
}


def test_data_and_filter_skills_are_proposed_side_by_side() -> None:
    ranked = rank_skills(RECORDS, FIXED_REWARD_AND_LENGTH, "math")
    props = propose_from_skills(ranked, FIXED_REWARD_AND_LENGTH, tried=(), max_candidates=3)
    assert [(p.slug, p.factors) for p in props] == [
        ("learnable-data-mix", ("data",)),
        ("dense-auxiliary-reward", ("reward",)),
        ("std-group-filter", ("filter",)),
    ]
    assert "dead_source_share >= 0.3 (dead_source_share=0.78)" in props[0].hypothesis


def test_data_skill_waits_for_the_length_fix() -> None:
    truncated = {**FIXED_REWARD_AND_LENGTH, "truncation_rate": 0.42}
    ranked = rank_skills(RECORDS, truncated, "math")
    names = [p.slug for p in propose_from_skills(ranked, truncated, tried=(), max_candidates=4)]
    assert "raise-length-budget" in names and "learnable-data-mix" not in names
