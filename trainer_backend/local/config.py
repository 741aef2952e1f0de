"""The local trainer's config (`harness/trainer.yaml`) and data-selection file (`harness/data.yaml`).

Both live on the harness's editable surface, so a bad value is the candidate's fault: loaders raise
`ValueError` naming the file and field. The held-out set is always evaluated whole: its size is not a
knob, so no candidate can shrink the evidence it is judged on.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.files import HarnessPath, root_context
from harness.manifest import input_shown
from trainer_backend.knobs import KnobSpec, declared_knobs, knob

if TYPE_CHECKING:  # the model module imports torch: the controller checks trainer settings without it
    from trainer_backend.local.model import ModelShape

TINY = "tiny"  # the `model:` value of the built-in character model (trainer_backend/local/model.py)
ModelKind = Literal["tiny", "pretrained"]  # what trains: the tiny model from scratch, or a Hugging Face model
TINY_MAX_NEW_TOKENS = 200  # the tiny model's context is 256 tokens (`LocalTrainerConfig.shape`)
# Settings whose default depends on what trains (docs/models.md): a pretrained model needs a small learning
# rate and no warm start; the tiny model learns from scratch. A value written in trainer.yaml always wins.
KIND_DEFAULTS: dict[str, dict[str, Any]] = {
    "tiny": {"lr": 1e-4, "warmstart_steps": 1000, "warmstart_lr": 3e-3},
    "pretrained": {"lr": 2e-6, "warmstart_steps": 0, "warmstart_lr": 3e-5},
}


def model_kind(model: str) -> ModelKind:
    """The kind of policy a `model:` value names: the built-in tiny model, or a Hugging Face model."""
    return "tiny" if model == TINY else "pretrained"


class LocalTrainerConfig(BaseModel):
    """`harness/trainer.yaml` for the local GRPO backend (paper §14 defaults, scaled to a tiny model).

    `model` picks what trains: ``tiny`` (the built-in character model, trained from scratch after a warm
    start) or a Hugging Face causal LM (`trainer_backend/local/hf.py`: a model cache name, an absolute
    folder path, or a hub id already in the local Hugging Face cache). Defaults that depend on it come from
    `KIND_DEFAULTS`; knob ranges per kind from `knobs_for`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    model: str = Field(TINY, min_length=1, description="tiny, a models-cache name, a folder, or a cached hub id")
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: cuda when available; EVOTRAINER_DEVICE overrides
    # How a row's prompt reaches the model: `prompt_template` ({prompt} is the row's text) then, for `chat`,
    # the tokenizer's chat template as one user turn with the generation prompt (pretrained models only).
    prompt_format: Literal["raw", "chat"] = "raw"
    prompt_template: str = "{prompt}"
    gradient_checkpointing: bool = False  # recompute activations in the update (large models; slower)
    # Knobs (trainer_backend/knobs.py): the range this tiny model is meant to train in (the demo harness uses
    # lr 1e-4, temperature 1.0, 16 new tokens for its short answers), and what moving each way does; the
    # controller's exploration reads only these. `pretrained=` gives a range of its own for pretrained models.
    lr: float = Field(
        1e-4,
        gt=0,
        le=1e-1,
        json_schema_extra=knob(
            safe=(2e-5, 4e-4),
            pretrained=(5e-7, 2e-5),
            up=((2.0, 4.0), ("bigger_steps",), "larger updates learn faster when each step barely moves the policy"),
            down=((0.5, 0.25), ("smaller_steps",), "smaller updates stop a policy that jumps or collapses"),
        ),
    )
    group_size: int = Field(
        8,
        ge=2,
        le=64,
        json_schema_extra=knob(
            safe=(4, 16),
            up=((2.0,), ("more_signal", "explore"), "more samples per prompt make reward variance in a group likelier"),
        ),
    )
    prompts_per_step: int = Field(
        16,
        ge=1,
        le=256,
        json_schema_extra=knob(
            safe=(8, 64),
            up=((2.0,), ("more_signal",), "more prompts per step put more groups with variance into each update"),
        ),
    )
    max_new_tokens: int = Field(
        48,
        ge=1,
        le=32768,
        json_schema_extra=knob(
            safe=(8, 200),
            pretrained=(8, 4096),
            up=((1.5, 2.0), ("longer_responses",), "a longer budget lets responses reach their answer"),
            episodes="single",  # an agentic episode's turns are capped by max_turn_tokens
        ),
    )
    temperature: float = Field(
        1.0,
        gt=0,
        le=2.0,
        json_schema_extra=knob(
            safe=(0.7, 1.2),
            up=((1.5, 2.0), ("explore",), "hotter sampling makes the samples of a group differ, so rewards vary"),
            down=((0.8,), ("sharpen",), "cooler sampling cuts degenerate and malformed samples"),
        ),
    )
    clip_low: float = Field(
        0.2,
        ge=0,
        lt=1,
        json_schema_extra=knob(
            safe=(0.1, 0.3),
            up=((1.5,), ("bigger_steps",), "a wider lower clip lets an update push bad samples down further"),
            down=((0.5,), ("smaller_steps",), "a tighter lower clip bounds each update (trust region)"),
        ),
    )
    clip_high: float = Field(
        0.28,
        ge=0,
        json_schema_extra=knob(
            safe=(0.2, 0.4),
            up=((1.25,), ("explore", "bigger_steps"), "Clip-Higher lets rare good samples gain probability"),
            down=((0.75,), ("smaller_steps",), "a tighter upper clip bounds each update (trust region)"),
        ),
    )
    kl_coef: float = Field(
        0.0,
        ge=0,
        json_schema_extra=knob(
            safe=(0.0, 0.1),
            up=((2.0,), ("anchor", "smaller_steps"), "a KL pull toward the reference policy stops drift"),
            down=((0.0,), ("unanchor", "bigger_steps"), "without the KL pull the policy may move away from the start"),
            from_zero=0.01,
        ),
    )
    val_every: int = Field(20, ge=1)
    save_every: int = Field(10, ge=1)
    n_layers: int = Field(3, ge=1, le=12)
    hidden: int = Field(128, ge=16, le=1024)
    # A knob whose move restarts the pilot from the model as it ships (`START_SETTINGS`); its safe range is
    # wide (0 = no warm start is sound for a pretrained model that already writes the format).
    warmstart_steps: int = Field(
        1000,
        ge=0,
        json_schema_extra=knob(
            safe=(0, 100_000),
            up=(
                (2.0,),
                ("teach_format",),
                "a supervised warm start on worked solutions teaches the starting policy the answer format, so "
                "rewards vary within groups (the pilot restarts from the model as it ships)",
            ),
            from_zero=200,
        ),
    )
    warmstart_data: HarnessPath = "data/warmstart.jsonl"
    warmstart_lr: float = Field(3e-3, gt=0, le=1.0)
    warmstart_batch_size: int = Field(64, ge=1, le=4096)
    # The warm start stops on evidence: after `warmstart_steps` it reads the greedy answer-format
    # rate on the task's training prompts and, below `warmstart_min_format`, trains further rounds of
    # `warmstart_steps` each, up to `warmstart_max_steps` in all (None: 8 x warmstart_steps).
    warmstart_min_format: float = Field(0.5, ge=0.0, le=1.0)
    warmstart_max_steps: int | None = Field(None, ge=0)
    data_selection: HarnessPath | None = "harness/data.yaml"
    # Agentic harnesses only (an `env:` in the manifest; single-turn runs never read these): turns per
    # episode, the token budget of one turn (cut there: stop reason `length`), and whether observation
    # tokens are masked out of the loss (false trains on tool results, a realistic defect).
    max_turns: int = Field(4, ge=1, le=32)
    max_turn_tokens: int = Field(
        32,
        ge=1,
        le=32768,
        json_schema_extra=knob(
            safe=(8, 200),
            pretrained=(8, 4096),
            up=((1.5, 2.0), ("longer_responses",), "a longer turn budget lets a turn reach its call or its answer"),
            episodes="agentic",
        ),
    )
    mask_observations: bool = True

    @model_validator(mode="before")
    @classmethod
    def _kind_defaults(cls, raw: Any) -> Any:
        if not isinstance(raw, dict):
            return raw
        model = raw.get("model", TINY)
        defaults = KIND_DEFAULTS[model_kind(model) if isinstance(model, str) else "tiny"]
        return {**defaults, **raw}

    @field_validator("max_new_tokens", "max_turn_tokens")
    @classmethod
    def _fits_tiny_context(cls, value: int, info: Any) -> int:
        if info.data.get("model", TINY) == TINY and value > TINY_MAX_NEW_TOKENS:
            raise ValueError(f"Input should be less than or equal to {TINY_MAX_NEW_TOKENS} (the tiny model's context)")
        return value

    @field_validator("prompt_template")
    @classmethod
    def _template_has_prompt(cls, value: str) -> str:
        if "{prompt}" not in value:
            raise ValueError("must contain {prompt} (where the row's prompt goes), e.g. '{prompt} Answer briefly.'")
        return value

    @model_validator(mode="after")
    def _heads_fit(self) -> LocalTrainerConfig:
        if self.hidden % 32:
            raise ValueError(f"hidden={self.hidden} must be a multiple of 32 (4 heads of >= 8 dims)")
        if self.model == TINY and self.device == "cuda":
            raise ValueError("device 'cuda': the tiny model trains on the CPU; use device: auto or cpu")
        if self.prompt_format == "chat" and self.model == TINY:
            raise ValueError("prompt_format 'chat' needs a model with a chat template; the tiny model reads raw text")
        return self

    @property
    def kind(self) -> ModelKind:
        """What trains: ``tiny`` or ``pretrained`` (a Hugging Face model)."""
        return model_kind(self.model)

    def render_prompt(self, prompt: str) -> str:
        """The row's prompt through `prompt_template` (the chat template, if any, is the tokenizer's job)."""
        return prompt if self.prompt_template == "{prompt}" else self.prompt_template.replace("{prompt}", prompt)

    def shape(self) -> ModelShape:
        """Return the model size knobs.

        The context length is fixed (not derived from `max_new_tokens`) so that editing the length budget
        keeps the same cached warm start: a single-factor edit must not change the base policy.
        """
        from trainer_backend.local.model import ModelShape

        return ModelShape(n_layers=self.n_layers, hidden=self.hidden, n_heads=4, max_len=256)


# Settings a run reads only when it starts from the model as it ships (a pilot that continues a parent's
# checkpoint skips the warm start): a candidate that changes one restarts its pilot from there
# (`BackendPlugin.start_settings`, agent/adapters/pilots.py).
START_SETTINGS = frozenset(name for name in LocalTrainerConfig.model_fields if name.startswith("warmstart_"))


def knobs_for(kind: ModelKind) -> tuple[KnobSpec, ...]:
    """The knobs the local trainer declares for a model of `kind` (safe ranges and defaults per kind)."""
    return declared_knobs(LocalTrainerConfig, kind=kind, defaults=KIND_DEFAULTS[kind])


def load_trainer_config(path: Path, root: Path | None = None) -> LocalTrainerConfig:
    """Load and validate `trainer.yaml`; with the harness `root`, its file fields are checked on disk too.

    Every field naming a file (`HarnessPath`) follows the one path rule (`harness.files`): inside the harness,
    no `..`, not absolute, no link along the way, checked before anything opens the file it names.

    Raises:
        ValueError: missing file, bad YAML or an invalid field; the message names the file and field.
    """
    if not path.is_file():
        raise ValueError(f"{path}: trainer config not found")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping of fields")
    try:
        return LocalTrainerConfig.model_validate(raw, context=root_context(root))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise ValueError(f"{path}: field '{where}': {err['msg']}{input_shown(err)}") from None


def load_data_weights(path: Path | None) -> dict[str, float] | None:
    """Load `data.yaml` (``weights: {value: weight}``); None means sample training rows uniformly.

    A value is one of the row field the manifest's ``data.select_by`` names (default ``data_source``), e.g.
    ``weights: {gsm8k: 0.7, math/hard: 0.3}``; keys are compared as text (``1`` and ``"1"`` are one value).
    The mapping's order is the sampling order, so one file always draws the same batches for a seed.

    Raises:
        ValueError: the file is malformed or all weights are zero; the message names the file and field.
    """
    if path is None or not path.is_file():
        return None
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML ({exc})") from None
    weights = raw.get("weights") if isinstance(raw, dict) else None
    if not isinstance(weights, dict) or set(raw) - {"weights"}:
        raise ValueError(
            f"{path}: expected exactly one field 'weights: {{value: weight}}', keyed by the values of the row "
            "field the manifest's data.select_by names (default data_source)"
        )
    out: dict[str, float] = {}
    for value, weight in weights.items():
        if isinstance(value, dict | list) or value is None:
            raise ValueError(f"{path}: field 'weights': key {value!r} must be a scalar value of the selection field")
        if str(value) in out:
            raise ValueError(f"{path}: field 'weights': value {str(value)!r} is listed twice")
        if isinstance(weight, bool) or not isinstance(weight, int | float) or weight < 0:
            raise ValueError(f"{path}: field 'weights.{value}': weight must be a number >= 0")
        out[str(value)] = float(weight)
    if sum(out.values()) <= 0:
        raise ValueError(f"{path}: field 'weights': at least one weight must be positive")
    return out
