"""Skill retrieval: which stored skills a health-metrics snapshot triggers, best first (paper §3).

Ranking, in order:

1. tier — own domain (``skill.domain == domain``) first; then cross-domain skills whose
   ``applicability`` names the domain (or ``"*"``); then, only as a *fallback*, other domains' skills
   matched by diagnostic signature alone. The fallback tier is returned only when no own/applicable
   intervention matched, or when the caller forces it (the paper: after several internal failures);
2. Laplace-smoothed win rate ``(wins + 1) / (wins + losses + 2)``, higher first;
3. specificity (number of comparisons in the trigger), higher first; then name, for a stable order.

Guard skills (factor ``guard``, e.g. "never reward brevity directly") never count as interventions:
they come back with ``is_warning=True`` whenever their trigger matches, whatever their domain tier.
This module is pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from skills.models import SkillRecord
from skills.triggers import Metrics, check, evaluate, matched_terms, parse

Tier = Literal["own", "applicable", "fallback"]
_TIER_ORDER: dict[Tier, int] = {"own": 0, "applicable": 1, "fallback": 2}


@dataclass(frozen=True)
class SkillMatch:
    """A skill whose trigger holds, with the evidence and its rank keys."""

    record: SkillRecord
    tier: Tier
    matched_terms: tuple[str, ...]
    win_rate: float
    specificity: int

    @property
    def is_warning(self) -> bool:
        """Return True for guard skills, which warn and are never applied as patches."""
        return self.record.spec.is_guard

    @property
    def name(self) -> str:
        """Return the skill's name."""
        return self.record.spec.name


def tier_of(record: SkillRecord, domain: str) -> Tier:
    """Return the retrieval tier of a skill for a session in ``domain``."""
    spec = record.spec
    if spec.domain == domain:
        return "own"
    if spec.applies_to(domain):
        return "applicable"
    return "fallback"


def rank_skills(
    records: Iterable[SkillRecord], metrics: Metrics, domain: str, *, force_fallback: bool = False
) -> list[SkillMatch]:
    """Return the skills whose triggers hold on ``metrics``, best first (see the module docstring).

    Warnings (guard skills) are included at their rank position; filter with ``interventions`` /
    ``warnings``.
    """
    matches: list[SkillMatch] = []
    for record in records:
        trigger = parse(record.spec.trigger)
        if not evaluate(trigger, metrics):
            continue
        matches.append(
            SkillMatch(
                record=record,
                tier=tier_of(record, domain),
                matched_terms=tuple(matched_terms(trigger, metrics)),
                win_rate=record.win_rate,
                specificity=trigger.specificity,
            )
        )
    has_local = any(m.tier != "fallback" and not m.is_warning for m in matches)
    if has_local and not force_fallback:
        matches = [m for m in matches if m.tier != "fallback" or m.is_warning]
    matches.sort(key=lambda m: (_TIER_ORDER[m.tier], -m.win_rate, -m.specificity, m.name))
    return matches


def interventions(matches: Iterable[SkillMatch]) -> list[SkillMatch]:
    """Return the applicable (non-guard) matches, order kept."""
    return [m for m in matches if not m.is_warning]


def warnings(matches: Iterable[SkillMatch]) -> list[SkillMatch]:
    """Return the guard matches (warnings), order kept."""
    return [m for m in matches if m.is_warning]


@dataclass(frozen=True)
class TriggerGap:
    """A skill whose trigger could not be evaluated: it read metrics that had no value (missing or NaN)."""

    name: str
    trigger: str
    missing: tuple[str, ...]


def unevaluated(records: Iterable[SkillRecord], metrics: Metrics) -> list[TriggerGap]:
    """Return the skills whose triggers are unknown on ``metrics`` (so not matched), with the names missing.

    The caller records them (``agent/decisions/triggers.py``) instead of skipping the skills silently.
    """
    gaps = []
    for record in records:
        result = check(record.spec.trigger, metrics)
        if result.unknown:
            gaps.append(TriggerGap(record.spec.name, record.spec.trigger, result.missing))
    return sorted(gaps, key=lambda g: g.name)
