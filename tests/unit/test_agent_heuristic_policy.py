"""The heuristic policy: one candidate per factor, and a bundle only with independent prior support."""

from __future__ import annotations

import json

from agent.policies.heuristic import propose_from_skills
from skills.models import SkillRecord, SkillSpec
from skills.retrieval import rank_skills


def _skill(name: str, factor: str, trigger: str, wins: int = 0, losses: int = 0) -> SkillRecord:
    patch = json.dumps([{"op": "set_yaml_key", "file": "@trainer_config", "key": "lr", "value": 1}])
    spec = SkillSpec(name=name, domain="math", trigger=trigger, factor=factor, patch_kind="template", patch=patch,  # type: ignore[arg-type]
                     expected_outcome="x improves", validation_rule="strict up")  # fmt: skip
    return SkillRecord(spec=spec, wins=wins, losses=losses)


METRICS = {"dead_group_ratio": 0.6, "truncation_rate": 0.4, "domain": "math"}


def test_one_candidate_per_factor_best_ranked_first_skipping_tried() -> None:
    records = [_skill("aa", "reward", "dead_group_ratio > 0.5"), _skill("bb", "reward", "truncation_rate > 0.1"),
               _skill("cc", "trainer", "truncation_rate > 0.1")]  # fmt: skip
    props = propose_from_skills(rank_skills(records, METRICS, "math"), METRICS, tried={"aa"}, max_candidates=3)
    assert [(p.slug, p.factors) for p in props] == [("bb", ("reward",)), ("cc", ("trainer",))]
    assert all(not p.justification for p in props)


def test_bundle_only_when_every_part_has_a_win() -> None:
    validated = [_skill("aa", "reward", "dead_group_ratio > 0.5", wins=1),
                 _skill("cc", "trainer", "truncation_rate > 0.1", wins=1, losses=1)]  # fmt: skip
    props = propose_from_skills(rank_skills(validated, METRICS, "math"), METRICS, tried=(), max_candidates=3)
    assert props[0].factors == ("reward", "trainer") and "independent prior support" in props[0].justification
    unproven = [validated[0], _skill("cc", "trainer", "truncation_rate > 0.1")]
    props = propose_from_skills(rank_skills(unproven, METRICS, "math"), METRICS, tried=(), max_candidates=3)
    assert all(len(p.factors) == 1 for p in props)
