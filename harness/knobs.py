"""The knob vocabulary: what a tunable setting or constant declares (type, safe range, moves and their effects).

A knob is something the controller's single-factor probes may move. Trainer settings declare theirs on the
backend's config fields (`trainer_backend/knobs.py`); a harness declares the tunable constants of its own
reward, group filter and environment code in that code (`harness/code_knobs.py`). Both are `KnobSpec`s, read
by the same probes (`agent/policies/probe_drafts.py`), whose symptom table matches a move's `effects`, never a
knob's name. Pure (pydantic only).
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

# What moving a setting does to training, in words the symptom table (agent/policies/symptoms.py) uses.
Effect = Literal[
    "explore",  # samples of one prompt differ more (within-group diversity up)
    "sharpen",  # samples concentrate on the policy's mode (diversity down, fewer degenerate samples)
    "bigger_steps",  # each update moves the policy further
    "smaller_steps",  # each update moves the policy less (trust region, stability)
    "more_signal",  # more groups with reward variance reach each update
    "longer_responses",  # responses may run longer before the cap
    "anchor",  # a stronger pull toward the reference policy
    "unanchor",  # a weaker pull toward the reference policy
    "teach_format",  # the starting policy learns to write the answer format (a supervised warm start)
    "pay_fewer_wrong",  # the reward pays fewer wrong responses (a stricter check, more tests, a tighter gate)
    "pay_more_right",  # the reward pays more right responses (a longer time or step limit, a looser gate)
    "env_allows_more",  # the environment lets an episode do more (more calls, more time) before it refuses or ends it
]
EFFECTS: tuple[str, ...] = get_args(Effect)
Direction = Literal["up", "down"]
Episodes = Literal["any", "single", "agentic"]


class Move(BaseModel):
    """One direction of a knob: the magnitudes tried in order, what it does, and why that helps."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    direction: Direction
    factors: tuple[float, ...] = Field(min_length=1)
    effects: tuple[Effect, ...] = Field(min_length=1)
    why: str = Field(min_length=1)

    @model_validator(mode="after")
    def _factors_point_the_right_way(self) -> Move:
        bad = [f for f in self.factors if (f <= 1 if self.direction == "up" else not 0 <= f < 1)]
        if bad:
            raise ValueError(f"move {self.direction}: factors {bad} do not move {self.direction} (x current)")
        return self


class KnobSpec(BaseModel):
    """A setting or constant the controller may probe: its key, type, default, safe range and moves."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    kind: Literal["float", "int"]
    default: float | int
    safe_min: float
    safe_max: float
    moves: tuple[Move, ...] = Field(min_length=1)
    from_zero: float | None = None
    episodes: Episodes = "any"

    @model_validator(mode="after")
    def _range_holds_default(self) -> KnobSpec:
        if not self.safe_min <= self.default <= self.safe_max:
            raise ValueError(f"knob {self.key}: default {self.default} outside its safe range")
        if len({m.direction for m in self.moves}) != len(self.moves):
            raise ValueError(f"knob {self.key}: one move per direction")
        return self

    def move(self, direction: str) -> Move | None:
        """The move in ``direction``, None when the knob has none."""
        return next((m for m in self.moves if m.direction == direction), None)

    def in_range(self, value: float) -> bool:
        """Return True when ``value`` lies in the documented safe range."""
        return self.safe_min <= value <= self.safe_max

    def acts_on(self, agentic: bool) -> bool:
        """Return True when the setting acts on runs of this kind (multi-turn episodes or single responses)."""
        return self.episodes == "any" or (self.episodes == "agentic") == agentic
