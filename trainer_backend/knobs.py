"""Tuning metadata of trainer settings ("knobs"): a documented safe range and what moving each way does.

Declared once, next to the setting, as ``json_schema_extra=knob(...)`` on a backend config field
(``trainer_backend/local/config.py``, ``trainer_backend/verl/config.py``), and read back with
``declared_knobs(ConfigClass)``. The controller's exploration (``agent/decisions/knobs.py``,
``agent/policies/explore.py``) reads nothing else about a setting: which symptoms a move addresses is
decided from the move's ``effects``, never from the setting's name.

- ``safe``: the range in which the setting is known to train the backend's model sensibly; a value
  outside it is a symptom of its own, and no probe leaves it;
- ``moves``: per direction (``up`` / ``down``), the multiplicative magnitudes a probe tries in order
  (the next one only after the previous one left too little evidence), the ``effects`` of the move (the
  ``Effect`` vocabulary below) and a sentence saying why it helps (it goes into the probe's hypothesis);
- ``from_zero``: the value an ``up`` move starts from when the setting is 0 (a multiple of 0 is 0);
- ``episodes``: which runs the setting acts on: ``any``, ``single`` (single-turn responses only, e.g. the
  local backend's ``max_new_tokens``) or ``agentic`` (multi-turn episodes only, e.g. ``max_turn_tokens``); a
  probe never moves a setting the harness's runs do not read.

The metadata also shows in the config's JSON schema under ``KNOB_KEY``. Pure (pydantic only).
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

KNOB_KEY = "x-evotrainer-knob"

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
    """A trainer setting the controller may probe: its key, type, default, safe range and moves."""

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


def knob(
    *,
    safe: tuple[float, float],
    up: tuple[tuple[float, ...], tuple[Effect, ...], str] | None = None,
    down: tuple[tuple[float, ...], tuple[Effect, ...], str] | None = None,
    from_zero: float | None = None,
    episodes: Episodes = "any",
    pretrained: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """Return the ``json_schema_extra`` that declares a field a knob: ``up``/``down`` = (factors, effects, why).

    `pretrained` is the safe range when the backend trains a pretrained model (issue 30: a tiny model's
    learning rate is far too large for a pretrained 0.5 B model); without it the one range holds for both.
    """
    moves = [
        {"direction": name, "factors": list(spec[0]), "effects": list(spec[1]), "why": spec[2]}
        for name, spec in (("up", up), ("down", down))
        if spec is not None
    ]
    meta = {"safe_min": safe[0], "safe_max": safe[1], "moves": moves, "from_zero": from_zero, "episodes": episodes}
    if pretrained is not None:
        meta[PRETRAINED_KEY] = list(pretrained)
    return {KNOB_KEY: meta}


PRETRAINED_KEY = "pretrained"  # in a knob's metadata: the safe range for pretrained models


def declared_knobs(
    config_cls: type[BaseModel], kind: str = "tiny", defaults: dict[str, Any] | None = None
) -> tuple[KnobSpec, ...]:
    """Return the knobs a config class declares, in field order, for a model of `kind`.

    `kind` ``pretrained`` takes each knob's pretrained range where it declares one; `defaults` replace the
    class defaults (a backend whose defaults depend on the model kind).

    Raises:
        ValueError: a field's knob metadata is malformed (names the class and field).
    """
    out: list[KnobSpec] = []
    for name, field in config_cls.model_fields.items():
        extra = field.json_schema_extra
        if not isinstance(extra, dict) or KNOB_KEY not in extra:
            continue
        value_kind = "int" if field.annotation is int else "float"
        raw = extra[KNOB_KEY]
        if not isinstance(raw, dict):
            raise ValueError(f"{config_cls.__name__}.{name}: knob metadata must be a mapping (use knob(...))")
        meta = {k: v for k, v in raw.items() if k != PRETRAINED_KEY}
        pretrained = raw.get(PRETRAINED_KEY)
        if kind == "pretrained" and isinstance(pretrained, list | tuple):
            meta["safe_min"], meta["safe_max"] = pretrained
        default = (defaults or {}).get(name, field.default)
        try:
            out.append(KnobSpec.model_validate({"key": name, "kind": value_kind, "default": default, **meta}))
        except ValidationError as exc:
            raise ValueError(f"{config_cls.__name__}.{name}: bad knob metadata: {exc.errors()[0]['msg']}") from None
    return tuple(out)
