"""The offline heuristic policy: the diagnostic rule table plus skill triggers pick interventions.

Pure: it receives the health metrics and the ranked skill matches and returns `Proposal`s. It never
edits files or launches anything itself; the `propose` node turns proposals into candidate branches
through the same surface / single-factor checks every policy goes through.

Score-only mode (the paper's AutoResearch-style baseline) ignores diagnostics and skills and proposes
hyperparameter changes only, to be kept or reverted on the training score alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from skills.models import SkillSpec
from skills.retrieval import SkillMatch, interventions

Metrics = Mapping[str, float | int | bool | str]


@dataclass(frozen=True)
class ProbeInfo:
    """What makes a proposal an exploration probe (`agent/policies/explore.py`) rather than a stored skill.

    ``probe_id`` names the move (``trainer:temperature:up:m0``: knob, direction, rung of its magnitude
    ladder); ``symptom_key`` the abnormal-symptom signature it was proposed on (case memory files its outcome
    under both); ``symptoms`` the symptoms it addresses; ``learned_trigger`` the trigger a skill learned from
    it gets when it merges (empty: no diagnostic signature, so nothing is learned).
    """

    probe_id: str
    symptom_key: str
    symptoms: tuple[str, ...]
    score: float
    learned_trigger: str


@dataclass(frozen=True)
class Proposal:
    """One intervention to try: the skill(s) to apply plus the written hypothesis and success criterion.

    A proposal normally applies one skill (one factor). A bundle applies several, and is only proposed
    when each part has independent prior support (paper §2.2 bundling rule): its `justification` says so.
    """

    slug: str
    skills: tuple[SkillSpec, ...]
    hypothesis: str
    success_criterion: str
    from_skill: bool  # False for ad-hoc proposals (score-only ladder, exploration probes): not stored skills
    justification: str = ""
    probe: ProbeInfo | None = None

    @property
    def skill(self) -> SkillSpec:
        """The (first) skill applied."""
        return self.skills[0]

    @property
    def factor(self) -> str:
        """The primary factor this proposal changes."""
        return self.skills[0].factor

    @property
    def factors(self) -> tuple[str, ...]:
        """Every factor this proposal declares."""
        return tuple(dict.fromkeys(s.factor for s in self.skills))


# A skill counts as validated (independent prior support) after this many wins, with a Laplace win rate
# (wins + 1) / (wins + losses + 2) of at least one half.
MIN_WINS_FOR_BUNDLE = 1


def propose_from_skills(
    matches: Sequence[SkillMatch],
    metrics: Metrics,
    tried: Iterable[str],
    max_candidates: int,
    *,
    taken_factors: Iterable[str] = (),
) -> list[Proposal]:
    """Turn matched skills into proposals: best-ranked first, one per factor, skipping skills already tried.

    One proposal per factor keeps the iteration's candidates independent single-factor experiments;
    `taken_factors` are factors this iteration's live candidates already test (a refill after a refusal).
    """
    tried_names = set(tried)
    proposals: list[Proposal] = []
    factors: set[str] = set(taken_factors)
    fresh = [m for m in interventions(matches) if m.record.spec.name not in tried_names]
    bundle = _bundle([m for m in fresh if m.record.spec.factor not in factors])
    if bundle is not None:
        proposals.append(bundle)
    for match in fresh:
        spec = match.record.spec
        if spec.factor in factors or len(proposals) >= max_candidates:
            continue
        evidence = ", ".join(match.matched_terms) or "trigger matched"
        proposals.append(
            Proposal(
                slug=spec.name[:40],
                skills=(spec,),
                hypothesis=f"If we apply '{spec.name}' ({spec.factor}), {spec.expected_outcome} because {evidence}.",
                success_criterion=f"strict held-out accuracy improves over the control with a paired-bootstrap "
                f"95% CI above 0 and no new critical alert; {spec.validation_rule}",
                from_skill=True,
            )
        )
        factors.add(spec.factor)
    return proposals[:max_candidates]


def _bundle(matches: Sequence[SkillMatch]) -> Proposal | None:
    """A bundle of every validated matching skill (distinct factors), or None when fewer than two qualify."""
    chosen: dict[str, SkillMatch] = {}
    for match in matches:
        rec = match.record
        if rec.wins >= MIN_WINS_FOR_BUNDLE and rec.win_rate >= 0.5 and rec.spec.factor not in chosen:
            chosen[rec.spec.factor] = match
    if len(chosen) < 2:
        return None
    parts = list(chosen.values())
    support = "; ".join(f"{m.name} ({m.record.wins} win(s), {m.record.losses} loss(es))" for m in parts)
    return Proposal(
        slug="bundle-" + "-".join(sorted(chosen))[:40],
        skills=tuple(m.record.spec for m in parts),
        hypothesis="If we apply the validated skills " + ", ".join(m.name for m in parts) + " together, each "
        "fixes its own defect as it did before, and strict accuracy rises more than any single one.",
        success_criterion="strict held-out accuracy improves over the control with a paired-bootstrap 95% CI "
        "above 0 and no new critical alert",
        from_skill=True,
        justification=f"each part has independent prior support: {support}",
    )


# (slug, yaml key, expression) — expressions use the template language of skills/templates.py.
_SCORE_ONLY_LADDER: tuple[tuple[str, str, str], ...] = (
    ("lr-up", "lr", "current * 2"),
    ("lr-down", "lr", "current * 0.5"),
    ("temperature-up", "temperature", "min(current * 1.25, 1.5)"),
    ("kl-up", "kl_coef", "max(current * 2, 0.01)"),
)


def propose_score_only(tried: Iterable[str], max_candidates: int) -> list[Proposal]:
    """Hyperparameter-only proposals for the score-only baseline, in a fixed order, skipping tried ones."""
    tried_names = set(tried)
    proposals = []
    for slug, key, expr in _SCORE_ONLY_LADDER:
        name = f"score-only-{slug}"
        if name in tried_names:
            continue
        patch = json.dumps(
            [{"op": "set_yaml_key", "file": "@trainer_config", "key": key, "value": f"{{{{ {expr} }}}}"}]
        )
        spec = SkillSpec(
            name=name,
            domain="*",
            trigger="train_reward_mean >= 0",
            factor="trainer",
            patch_kind="template",
            patch=patch,
            expected_outcome=f"training reward rises after setting {key} = {expr}",
            validation_rule="training reward above the control's",
            provenance="score-only baseline ladder",
        )
        proposals.append(
            Proposal(
                slug=slug,
                skills=(spec,),
                hypothesis=f"If we set {key} = {expr}, the training reward rises.",
                success_criterion="final training reward above the control's",
                from_skill=False,
            )
        )
        if len(proposals) >= max_candidates:
            break
    return proposals
