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

from typing import Any

from pydantic import BaseModel, ValidationError

from harness.knobs import EFFECTS, Direction, Effect, Episodes, KnobSpec, Move

__all__ = [
    "EFFECTS",
    "KNOB_KEY",
    "PRETRAINED_KEY",
    "Direction",
    "Effect",
    "Episodes",
    "KnobSpec",
    "Move",
    "declared_knobs",
    "knob",
]

KNOB_KEY = "x-evotrainer-knob"


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

    `pretrained` is the safe range when the backend trains a pretrained model (a tiny model's
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
