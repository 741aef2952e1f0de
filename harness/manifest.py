"""The harness contract: `evotrainer.yaml`, validated once at the entry point.

A harness is a folder (usually a git repository) holding the training-side code. This module owns
parsing and validating its manifest; it never imports the harness's Python code (candidate code runs
only in a sandbox or in the trainer process, never in the controller).

Example manifest::

    name: arithmetic
    domain: math
    data: {train: data/train.jsonl, val: data/val.jsonl}
    reward: harness/reward.py:compute_score
    group_filter: harness/filters.py:filter_groups      # optional
    diagnostics: harness/diagnostics/                   # optional
    eval: {strict: eval/strict.py:score}
    trainer: {backend: local, local: harness/trainer.yaml, verl: harness/verl.yaml}
    surface: {editable: [harness/], protected: [eval/, data/val.jsonl, evotrainer.yaml]}
    answer: {pattern: '<ans>(.*?)</ans>', compare: integer}   # optional (harness/answers.py)
    special_tokens: ['<ans>', '</ans>']                 # optional: one token each (local tokenizer)
    alphabet: '0123456789+-*=;> '                       # optional: pins the local vocabulary's order
    reward_range: [-1.0e6, 1.0e6]                       # optional; rewards outside it are refused

Every field is documented in docs/harness.md. ``data.select_by`` (default ``data_source``) names the row
field whose values ``harness/data.yaml`` weighs (``weights: {value: weight}``).

Callable contracts (verl-compatible where verl has one):

- reward: ``compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)
  -> float | {"score": float, <component>: float, ...}``
- group filter: ``filter_groups(group_rewards: list[list[float]], state: dict) -> list[bool]``;
  one keep flag per group, called before advantage normalisation; ``state`` is a JSON-serialisable
  dict the trainer keeps across steps (e.g. an EMA of group reward stds).
- strict evaluator: ``score(solution_str, ground_truth) -> float`` in [0, 1]; protected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.answers import AnswerProtocol
from harness.env import EnvSpec
from harness.failures import BadInput, shown
from harness.files import HarnessPath, inside, root_context
from harness.paths import PathRuleError, is_under, normalise
from harness.splits import SEALED_FRACTION

MANIFEST_NAME = "evotrainer.yaml"
BackendName = Literal[
    "local", "verl"
]  # the training backends: the manifest's vocabulary; trainer_backend.PLUGINS registers each one's plug-in
BACKEND_NAMES: tuple[BackendName, ...] = get_args(BackendName)
DEFAULT_BACKEND: BackendName = BACKEND_NAMES[0]  # the embedded one: trains anywhere, no extra installed
RESERVED_TOKENS = ("<pad>", "<bos>", "<eos>")  # the local tokenizer's own ids 0, 1, 2
DEFAULT_REWARD_BOUND = 1e6
MAX_REWARD_MAGNITUDE = 1e12


class HarnessError(BadInput):
    """An invalid harness: the message names the file, the field and the fix."""


def _check_entry_point(value: str) -> str:
    path, sep, func = value.partition(":")
    if not sep or not path.endswith(".py") or not func.isidentifier():
        raise ValueError(f"{value!r} is not 'relative/path.py:function' (e.g. harness/reward.py:compute_score)")
    try:
        normalise(path)
    except PathRuleError as exc:
        raise ValueError(f"{value!r} must be a path inside the harness folder ({exc})") from None
    return value


class EntryPoint(BaseModel):
    """A `file.py:function` reference inside the harness."""

    model_config = ConfigDict(frozen=True)
    path: str
    function: str

    @classmethod
    def parse(cls, value: str) -> EntryPoint:
        """Parse `relative/path.py:function`."""
        _check_entry_point(value)
        path, _, func = value.partition(":")
        return cls(path=normalise(path), function=func)

    def __str__(self) -> str:
        return f"{self.path}:{self.function}"


class DataPaths(BaseModel):
    """Training and held-out data files (JSONL, one prompt per line), and the row field data selection weighs."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    train: HarnessPath
    val: HarnessPath
    select_by: str = Field("data_source", min_length=1, description="row field harness/data.yaml weighs")
    test: HarnessPath | None = Field(None, description="the sealed test file (protected); else part of `val`")
    sealed_fraction: float = Field(
        SEALED_FRACTION, ge=0.0, lt=1.0, description="share of `val` sealed for the final figure when no `test`"
    )

    @property
    def heldout(self) -> tuple[str, ...]:
        """The held-out files: `val`, and `test` when the manifest names one (harness/splits.py)."""
        return (self.val,) if self.test is None else (self.val, self.test)

    @property
    def files(self) -> tuple[str, ...]:
        """Every data file the trainers read rows from: training, then held-out."""
        return (self.train, *self.heldout)


class EvalSpec(BaseModel):
    """The protected strict evaluator."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    strict: str

    @field_validator("strict")
    @classmethod
    def _strict_ep(cls, value: str) -> str:
        return _check_entry_point(value)


class TrainerSpec(BaseModel):
    """The default backend and each backend's settings file: `{backend: local, local: F, verl: G}`.

    `config` (the older one-backend form) names the default backend's file; it is filled in from
    `trainer.<backend>` when absent (and the reverse), so `config` always reads the default backend's
    settings. `settings(name)` is the file backend `name` reads, None when the harness ships none.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    backend: BackendName = DEFAULT_BACKEND
    config: HarnessPath
    local: HarnessPath | None = None
    verl: HarnessPath | None = None

    @model_validator(mode="before")
    @classmethod
    def _default_backend_file(cls, raw: Any) -> Any:
        if not isinstance(raw, dict) or raw.get("backend", DEFAULT_BACKEND) not in BACKEND_NAMES:
            return raw  # the field validators name the problem
        backend = raw.get("backend", DEFAULT_BACKEND)
        config, own = raw.get("config"), raw.get(backend)
        if config and own and config != own:
            raise ValueError(f"config ({config}) and {backend} ({own}) name different files; keep only {backend}")
        if not (config or own):
            raise ValueError(f"no settings file for the default backend: add {backend}: <file> (harness/trainer.yaml)")
        return {**raw, "config": config or own, backend: config or own}

    def settings(self, backend: BackendName) -> str | None:
        """The settings file of `backend` (relative to the harness root), None when not configured."""
        found: str | None = getattr(self, backend)  # one optional field per backend name
        return found


class Surface(BaseModel):
    """What the agent may edit and what it may never touch (paths relative to the harness root)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    editable: list[str] = Field(min_length=1)
    protected: list[str] = Field(default_factory=list)

    @field_validator("editable", "protected")
    @classmethod
    def _paths(cls, value: list[str]) -> list[str]:
        for path in value:
            normalise(path, allow_root=True)  # harness/paths.py: one path rule (raises naming the path)
        return value


class Manifest(BaseModel):
    """`evotrainer.yaml`: the harness contract."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    domain: str
    data: DataPaths
    reward: str
    group_filter: str | None = None
    diagnostics: HarnessPath | None = None
    eval: EvalSpec
    trainer: TrainerSpec
    surface: Surface
    answer: AnswerProtocol | None = None  # where the answer sits in a response (harness/answers.py)
    # The local backend's character vocabulary: the data files' characters plus these multi-character
    # tokens (one id each); `alphabet` fixes the order of the characters it lists (docs/harness.md).
    special_tokens: tuple[str, ...] = ()
    alphabet: str = ""
    env: EnvSpec | None = None  # an agentic harness: its environment, tools and call syntax (harness/env.py)

    @field_validator("env")
    @classmethod
    def _env_ep(cls, value: EnvSpec | None) -> EnvSpec | None:
        if value is not None:
            _check_entry_point(value.entry)
        return value

    @field_validator("answer")
    @classmethod
    def _answer_writable(cls, value: AnswerProtocol | None) -> AnswerProtocol | None:
        if value is not None and value.writer is None:
            raise ValueError(
                f"pattern {value.pattern!r} is not plain text around its group, so EvoTrainer cannot write an "
                "answer with it (hack corpus); add answer.template, e.g. '<ans>{answer}</ans>'"
            )
        return value

    @field_validator("special_tokens")
    @classmethod
    def _tokens(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for token in value:
            if len(token) < 2 or token.isspace():
                raise ValueError(f"special token {token!r} must be at least 2 characters (single ones go in alphabet)")
            if token in RESERVED_TOKENS:
                raise ValueError(f"special token {token!r} is reserved ({', '.join(RESERVED_TOKENS)})")
        if len(set(value)) != len(value):
            raise ValueError(f"special tokens {list(value)} repeat an entry")
        return value

    @field_validator("alphabet")
    @classmethod
    def _alphabet(cls, value: str) -> str:
        repeated = sorted({c for c in value if value.count(c) > 1})
        if repeated:
            raise ValueError(f"alphabet repeats {''.join(repeated)!r}; list each character once")
        return value

    # Rewards outside [low, high] are the candidate's fault (harness.calls.validate_reward); finite and
    # within +-MAX_REWARD_MAGNITUDE, so a float32 trainer never sees inf.
    reward_range: tuple[float, float] = (-DEFAULT_REWARD_BOUND, DEFAULT_REWARD_BOUND)

    @field_validator("reward")
    @classmethod
    def _reward_ep(cls, value: str) -> str:
        return _check_entry_point(value)

    @field_validator("group_filter")
    @classmethod
    def _filter_ep(cls, value: str | None) -> str | None:
        return None if value is None else _check_entry_point(value)

    @field_validator("reward_range")
    @classmethod
    def _reward_range(cls, value: tuple[float, float]) -> tuple[float, float]:
        low, high = value
        if not (-MAX_REWARD_MAGNITUDE <= low < high <= MAX_REWARD_MAGNITUDE):
            raise ValueError(f"must be [low, high] with low < high, both within +-{MAX_REWARD_MAGNITUDE:g}")
        return value


class Harness(BaseModel):
    """A loaded, validated harness: its root folder and manifest."""

    model_config = ConfigDict(frozen=True)
    root: Path
    manifest: Manifest

    def path(self, relative: str) -> Path:
        """Resolve a harness-relative path against the root, by the path rule (`harness.files.inside`).

        Raises:
            PathRuleError: the path is absolute, climbs out, or a link or odd file lies along it.
        """
        return inside(self.root, relative)

    @property
    def reward(self) -> EntryPoint:
        """The reward entry point."""
        return EntryPoint.parse(self.manifest.reward)

    @property
    def group_filter(self) -> EntryPoint | None:
        """The optional group-filter entry point."""
        gf = self.manifest.group_filter
        return None if gf is None else EntryPoint.parse(gf)

    @property
    def env(self) -> EntryPoint | None:
        """The agentic environment's entry point (`make_env`), None for a single-turn harness."""
        env = self.manifest.env
        return None if env is None else EntryPoint.parse(env.entry)

    @property
    def strict_eval(self) -> EntryPoint:
        """The protected strict evaluator entry point."""
        return EntryPoint.parse(self.manifest.eval.strict)

    def is_protected(self, relative: str) -> bool:
        """Return True when `relative` (a path inside the harness) lies on the protected surface.

        A path that breaks the path rule (`harness.paths`) counts as protected: it is never touched.
        """
        rel = _canonical(relative)
        return rel is None or rel == MANIFEST_NAME or _matches(rel, self.manifest.surface.protected)

    def is_editable(self, relative: str) -> bool:
        """Return True when `relative` is editable and not protected (never for a path breaking the rule)."""
        rel = _canonical(relative)
        return rel is not None and _matches(rel, self.manifest.surface.editable) and not self.is_protected(rel)


def _canonical(relative: str) -> str | None:
    try:
        return normalise(relative)
    except PathRuleError:
        return None


def _matches(rel: str, prefixes: list[str]) -> bool:
    """Whole-component prefix match of a canonical path (never a string prefix: `..harness` is not `harness`)."""
    return any(is_under(rel, normalise(prefix, allow_root=True)) for prefix in prefixes)


def input_shown(error: Any) -> str:
    """` (got VALUE)` for a pydantic error about a value that is there (nothing for a missing field)."""
    return "" if error.get("type") == "missing" or "input" not in error else f" (got {shown(error['input'])})"


def load_harness(root: Path) -> Harness:
    """Load and validate `root/evotrainer.yaml`, checking that the files it names exist.

    Raises:
        HarnessError: with the manifest path, the field and how to fix it.
    """
    manifest_path = root / MANIFEST_NAME
    try:
        inside(root, MANIFEST_NAME)
    except PathRuleError as exc:
        raise HarnessError(f"{manifest_path}: {exc}") from None
    if not manifest_path.is_file():
        raise HarnessError(f"{manifest_path}: not found; a harness folder needs an {MANIFEST_NAME} manifest")
    try:
        raw = yaml.safe_load(manifest_path.read_text())
    except yaml.YAMLError as exc:
        raise HarnessError(f"{manifest_path}: not valid YAML ({exc}); fix the syntax") from None
    if not isinstance(raw, dict):
        raise HarnessError(f"{manifest_path}: expected a mapping of fields at the top level")
    try:
        manifest = Manifest.model_validate(raw, context=root_context(root))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        hint = "remove it" if err["type"] == "extra_forbidden" else "see docs/harness.md for every field"
        raise HarnessError(f"{manifest_path}: field '{where}': {err['msg']}{input_shown(err)}; {hint}") from None
    harness = Harness(root=root.resolve(), manifest=manifest)
    files = {
        "data.train": manifest.data.train,
        "data.val": manifest.data.val,
        **({"data.test": manifest.data.test} if manifest.data.test is not None else {}),
        "reward": harness.reward.path,
        "eval.strict": harness.strict_eval.path,
        "trainer.config": manifest.trainer.config,
    }
    files.update({f"trainer.{b}": f for b in BACKEND_NAMES if (f := manifest.trainer.settings(b)) is not None})
    if harness.group_filter is not None:
        files["group_filter"] = harness.group_filter.path
    if harness.env is not None:
        files["env.entry"] = harness.env.path
    for field_name, rel in [*files.items(), ("diagnostics", manifest.diagnostics or "")]:
        try:
            inside(root, rel)  # entry points are checked as written by their validators; links here
        except PathRuleError as exc:
            raise HarnessError(f"{manifest_path}: field '{field_name}': {exc}") from None
    for field_name, rel in files.items():
        if not (root / rel).is_file():
            raise HarnessError(
                f"{manifest_path}: field '{field_name}': file {rel} does not exist in {root}; "
                "create it or correct the path"
            )
    if manifest.diagnostics is not None and not (root / manifest.diagnostics).is_dir():
        raise HarnessError(f"{manifest_path}: field 'diagnostics': folder {manifest.diagnostics} does not exist")
    for field_name in ("eval.strict", "data.val", "data.test"):
        if field_name in files and not harness.is_protected(files[field_name]):
            raise HarnessError(
                f"{manifest_path}: field 'surface.protected' must cover {files[field_name]} "
                f"({field_name}); add it to surface.protected"
            )
    return harness
