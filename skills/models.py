"""Typed in-memory skill records: ``SkillSpec`` (what a skill is) and ``SkillRecord`` (spec + track record).

A skill is a reusable intervention (paper §3, §11): a trigger predicate over health metrics, a patch
(a unified diff, or a JSON list of template edit operations, see ``skills/patches.py``), the outcome it
should produce, the rule that validates it, the domains it applies to and where it came from.

Construction validates everything a stored skill must satisfy and fails loudly (no lenient parsing):
the trigger parses, a template patch is a JSON list of known operations, names are slugs.
Conversion to and from the ``store.models.Skill`` row lives in ``skills/repository.py``.
This module is pure.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from skills.triggers import TriggerError, parse
from store.types import Factor

SkillFactor = Literal[Factor, "guard"]  # "guard": a skill that only adds a check
PatchKind = Literal["template", "diff"]
ANY_DOMAIN = "*"
TEMPLATE_OPS = frozenset(
    {
        "set_yaml_key",
        "replace_file",
        "write_reward",
        "wrap_reward",
        "write_file_if_missing",
        "reweight_sources",
        "match_heldout_sources",
        "score_from_component",
        "score_from_checks",
        "set_constant",
        "set_env_isolation",
        "drop_gate",
        "read_reference",
        "guard",
    }
)


class SkillSpec(BaseModel):
    """A skill as the controller uses it.

    ``factor == "guard"`` marks a guard skill: its patch is a single ``{"op": "guard", "rule": ...}``
    refusal rule, retrieval returns it as a warning and ``skills.patches`` refuses to apply it.
    ``applicability`` lists domains the skill is validated in besides its own; ``"*"`` means any domain.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{1,127}$")
    domain: str = Field(min_length=1, max_length=64)
    trigger: str
    factor: SkillFactor
    patch_kind: PatchKind
    patch: str = Field(min_length=1)
    params: dict[str, float | int | str] = Field(default_factory=dict)
    expected_outcome: str = Field(min_length=1)
    validation_rule: str = Field(min_length=1)
    applicability: tuple[str, ...] = ()
    provenance: str = ""

    @field_validator("trigger")
    @classmethod
    def _trigger_parses(cls, value: str) -> str:
        try:
            parse(value)
        except TriggerError as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _patch_matches_kind(self) -> SkillSpec:
        if self.patch_kind == "diff":
            if self.factor == "guard":
                raise ValueError(f"skill {self.name}: a guard skill's patch is a template with one 'guard' op")
            if "--- " not in self.patch or "+++ " not in self.patch:
                raise ValueError(f"skill {self.name}: patch_kind 'diff' needs a unified diff (---/+++ headers)")
            return self
        ops = template_ops(self.patch, self.name)
        is_guard = [op["op"] == "guard" for op in ops]
        if self.factor == "guard" and not all(is_guard):
            raise ValueError(f"skill {self.name}: a guard skill may only hold 'guard' ops")
        if self.factor != "guard" and any(is_guard):
            raise ValueError(f"skill {self.name}: 'guard' ops belong to skills with factor 'guard'")
        return self

    @property
    def is_guard(self) -> bool:
        """Return True for a guard (warning-only) skill."""
        return self.factor == "guard"

    def applies_to(self, domain: str) -> bool:
        """Return True when the skill is validated for ``domain`` (its own, listed, or ``"*"``)."""
        return domain == self.domain or domain in self.applicability or ANY_DOMAIN in self.applicability


def template_ops(patch: str, name: str = "?") -> list[dict[str, Any]]:
    """Parse a template patch: a JSON list of ``{"op": ..., ...}`` objects with known ops.

    Raises:
        ValueError: not JSON, not a non-empty list of objects, or an unknown op.
    """
    try:
        ops = json.loads(patch)
    except json.JSONDecodeError as exc:
        raise ValueError(f"skill {name}: template patch is not JSON ({exc.msg} at {exc.pos})") from None
    if not isinstance(ops, list) or not ops or not all(isinstance(o, dict) for o in ops):
        raise ValueError(f"skill {name}: template patch must be a non-empty JSON list of operation objects")
    for op in ops:
        if op.get("op") not in TEMPLATE_OPS:
            raise ValueError(f"skill {name}: unknown template op {op.get('op')!r}; known: {sorted(TEMPLATE_OPS)}")
    return ops


class SkillRecord(BaseModel):
    """A stored skill: its spec and its track record across sessions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: SkillSpec
    wins: int = Field(default=0, ge=0)
    losses: int = Field(default=0, ge=0)
    uses: int = Field(default=0, ge=0)
    last_verified_session: str | None = None
    origin: Literal["seed", "learned", "user"] = "user"
    source_candidate_id: str | None = None  # a learned skill: the merged candidate it was learned from

    @property
    def win_rate(self) -> float:
        """Return the Laplace-smoothed win rate (wins + 1) / (wins + losses + 2)."""
        return (self.wins + 1) / (self.wins + self.losses + 2)
