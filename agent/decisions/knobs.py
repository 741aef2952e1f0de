"""The harness's declared knobs: what a probe may move, read from the harness and the backend's settings.

A knob is something a single-factor probe (`agent/policies/explore.py`) can change:

- every trainer setting its backend's config class declares a knob (`trainer_backend/knobs.py`: safe range,
  moves, effects), with the value the harness's settings file gives it (or the class default);
- the group filter, when the manifest declares one (its file, and whether it is a keep-everything no-op);
- the data weights: the entries of the data-selection file's ``weights`` mapping (values of the manifest's
  ``data.select_by`` field), when the settings name such a file;
- the reward's components: the names the run's training rollouts carry in ``reward_components``, each with
  how it agrees with the protected strict score on those rollouts (`ComponentEvidence`);
- the constants the reward, group-filter and env code declare as knobs (`harness/code_knobs.py`);
- the gates of the reward's entry function (`harness/code_gates.py`), each with the share of the strict-right
  responses the reward fails that it can explain (`agent/decisions/reward_gates.py`);
- whether the reward reads its reference answer, and where it reads the row's extra_info instead
  (`harness/code_reference.py`).

Nothing here knows a knob by name: the policy reads these records. Adapter: reads harness files (never
through a link, `sandboxes/worktree_files.py`) and the run's table; builds no candidate.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

from agent.decisions.reward_alignment import Alignment, fit_alignment
from agent.decisions.reward_gates import GateEvidence, gate_evidence
from harness.code_knobs import CodeKnob, CodeKnobError, knob_files, read_code_knobs, set_constant
from harness.code_reference import CodeReferenceError, ReferenceUse, reference_use
from harness.env import declared_isolation
from harness.manifest import BackendName, Harness
from trainer_backend import plugin_of
from trainer_backend.knobs import KnobSpec

if TYPE_CHECKING:
    import polars as pl

log = logging.getLogger(__name__)

# Trigger variables for the harness's current settings: `setting/<key>` (a trigger reads `setting__<key>`).
SETTING_PREFIX = "setting/"


@dataclass(frozen=True)
class TrainerKnob:
    """One trainer setting a probe may move: its declaration, the file that holds it and its current value."""

    spec: KnobSpec
    file: str  # "@trainer_config" when it is the manifest's trainer config, else the harness-relative path
    current: float
    in_file: bool  # the key is written in the file (else the trainer uses the default; a probe op creates it)
    restarts: bool = False  # read only where a run starts from the starting model: its pilot restarts there

    @property
    def in_range(self) -> bool:
        """Return True when the current value lies in the setting's documented safe range."""
        return self.spec.in_range(self.current)


@dataclass(frozen=True)
class ComponentEvidence:
    """How one reward component behaves on the run's training rollouts.

    ``strict_corr``: Pearson correlation with the strict score over rollouts that carry both (NaN when
    either is constant); ``within_group_share``: the component's share of the reward's within-group
    variation (mean over groups of the component's std / the reward's std, NaN without live groups).
    """

    name: str
    strict_corr: float
    within_group_share: float
    mean: float


@dataclass(frozen=True)
class HarnessKnobs:
    """Everything a probe may move in one harness."""

    backend: str
    trainer: tuple[TrainerKnob, ...] = ()
    filter_file: str | None = None  # the manifest's group-filter file; None when it declares none
    filter_noop: bool = True
    filter_source: str = ""
    data_file: str | None = None  # the data-selection file; None when the settings name none
    data_weights: Mapping[str, float] = field(default_factory=dict)
    components: tuple[ComponentEvidence, ...] = ()
    alignment: Alignment | None = None  # the reward's own checks that best agree with the strict score (§5)
    code: tuple[CodeKnob, ...] = ()  # constants the reward, filter and env code declare (harness/code_knobs.py)
    gates: tuple[GateEvidence, ...] = ()  # early exits of the reward's entry function (harness/code_gates.py)
    reference: ReferenceUse | None = None  # whether the reward reads ground_truth (harness/code_reference.py)
    reward_strict_corr: float = math.nan  # the whole reward's correlation with the strict score (training rows)
    env_isolation: str = ""  # how episodes share the env module (harness/env.py); "" single-turn or unreadable

    def variables(self) -> dict[str, float]:
        """Trigger variables for the current settings and declared code constants (``setting/<key>``), so a
        learned trigger can read them."""
        code = {f"{SETTING_PREFIX}{k.spec.key}": float(k.current) for k in self.code}
        return {**code, **{f"{SETTING_PREFIX}{k.spec.key}": float(k.current) for k in self.trainer}}


def trainer_knobs(backend: BackendName, settings: Mapping[str, Any] | None = None) -> tuple[KnobSpec, ...]:
    """The knobs the backend's settings class declares, for the model `settings` (its settings file) names
    (`BackendPlugin.knobs`: the local backend's ranges depend on what trains, the tiny model or a pretrained
    one)."""
    return plugin_of(backend).knobs(settings or {})


def model_settings(harness: Harness) -> dict[str, Any]:
    """`{"<settings file>:<key>": value}` of every backend's model setting in `harness` (absent: the default).

    The model that trains is fixed for a session (a candidate changes the harness, never the policy; a model
    swap is a new session): each backend's plug-in names the key (`BackendPlugin.model_setting`). Read, never
    imported, so no candidate code runs. A settings file that is not a readable YAML mapping gives no entry:
    its run refuses it with the reason.
    """
    from trainer_backend import PLUGINS

    found: dict[str, Any] = {}
    for backend, plugin in PLUGINS.items():
        rel = harness.manifest.trainer.settings(backend) or harness.manifest.trainer.config
        text = _text(harness, rel) if rel else None
        try:
            raw = yaml.safe_load(text) if text is not None else None
        except yaml.YAMLError:
            continue
        if isinstance(raw, dict):
            found[f"{rel}:{plugin.model_setting}"] = raw.get(plugin.model_setting, plugin.model_default())
    return found


def harness_knobs(harness: Harness, backend: BackendName, train_rows: pl.DataFrame | None = None) -> HarnessKnobs:
    """Read the knobs of `harness` (its files as they are in `harness.root`) for a run on `backend`.

    `train_rows` are the incumbent run's training rows (its run table); without them the reward components
    are not known and no reward probe is built.
    """
    from skills.context import filter_is_noop

    settings_file = harness.manifest.trainer.settings(backend) or harness.manifest.trainer.config
    settings = _yaml(harness, settings_file)
    ref = "@trainer_config" if settings_file == harness.manifest.trainer.config else settings_file
    trainer = []
    agentic = harness.manifest.env is not None
    starts = plugin_of(backend).start_settings
    for spec in trainer_knobs(backend, settings):
        if not spec.acts_on(agentic):
            continue  # e.g. the single-turn response cap of an agentic harness: moving it changes nothing
        value = _number(settings.get(spec.key, spec.default))
        if value is None:
            continue  # a value the settings loader would refuse: the run says so, no probe builds on it
        trainer.append(
            TrainerKnob(spec=spec, file=ref, current=value, in_file=spec.key in settings, restarts=spec.key in starts)
        )
    gf = harness.group_filter
    filter_source = _text(harness, gf.path) if gf else None
    data_file = plugin_of(backend).data_selection(settings)
    weights = _weights(harness, data_file) if data_file else {}
    return HarnessKnobs(
        backend=backend,
        trainer=tuple(trainer),
        filter_file=gf.path if gf else None,
        filter_noop=_noop(filter_source, gf.function if gf else "filter_groups", filter_is_noop),
        filter_source=filter_source or "",
        data_file=data_file if weights else None,
        data_weights=weights,
        components=component_evidence(train_rows) if train_rows is not None else (),
        alignment=fit_alignment(train_rows) if train_rows is not None else None,
        code=code_knobs(harness),
        gates=gate_evidence(harness, _text(harness, harness.reward.path), train_rows),
        reference=_reference_use(harness),
        reward_strict_corr=reward_agreement(train_rows) if train_rows is not None else math.nan,
        env_isolation=_env_isolation(harness),
    )


def _env_isolation(harness: Harness) -> str:
    """The isolation the env module's text declares (`harness.env.declared_isolation`); "" without an env."""
    text = _text(harness, harness.env.path) if harness.env is not None else None
    return (declared_isolation(text) or "") if text is not None else ""


def _reference_use(harness: Harness) -> ReferenceUse | None:
    """How the reward's entry function treats its reference answer; None where its file cannot be read."""
    text = _text(harness, harness.reward.path)
    if text is None:
        return None
    try:
        return reference_use(text, harness.reward.function)
    except CodeReferenceError as exc:  # a candidate's unparsable reward: its backtest and run say why
        log.warning("reference use of %s not read: %s", harness.reward.path, exc)
        return None


def reward_agreement(rows: pl.DataFrame) -> float:
    """The reward's Pearson correlation with the strict score over the training rows that carry both (NaN when
    either is constant or missing)."""
    import polars as pl

    if "strict_score" not in rows.columns or "reward" not in rows.columns:
        return math.nan
    both = rows.select(pl.col("reward"), pl.col("strict_score")).drop_nulls()
    return _corr(both) if both.height >= 2 else math.nan


def code_knobs(harness: Harness) -> tuple[CodeKnob, ...]:
    """The knobs the harness's reward, group-filter and environment code declare (`harness/code_knobs.py`),
    read as the files are. A malformed declaration in a file the session's own candidates wrote is logged and
    skipped (a candidate's code never stops the session; the session's start refuses one in the user's
    harness)."""
    out: list[CodeKnob] = []
    for role, path in knob_files(harness):
        text = _text(harness, path)
        if text is None:
            continue
        try:
            out += read_code_knobs(text, path, role)
        except CodeKnobError as exc:
            log.warning("knobs not read: %s", exc)
    return tuple(out)


_UNSET = object()  # a key the settings file does not write


def range_restoration(
    parent: Harness, candidate: Harness, backend: BackendName, changed: Sequence[str]
) -> tuple[str, ...]:
    """The trainer settings or harness-code knobs `candidate` moves from outside their declared safe range into
    it, when that is all it changes; () otherwise.

    All of it: `changed` (the candidate's changed files) is exactly the backend's settings file, and every key
    whose value differs there is a declared knob the runs read, out of range in `parent` and in range in
    `candidate`; or `changed` is exactly one reward, group-filter or env file and its only edit is the literals of
    knobs it declares (`harness/code_knobs.py`, the declaration itself unchanged), each out of range in
    `parent` and in range in `candidate`. Such a candidate is decided by non-inferiority
    (`agent.decisions.evidence.classify_restoration`).
    """
    settings_file = parent.manifest.trainer.settings(backend) or parent.manifest.trainer.config
    if len(changed) == 1 and changed[0] != settings_file:
        return _code_restoration(parent, candidate, changed[0])
    if list(changed) != [settings_file]:
        return ()
    before, after = _yaml(parent, settings_file), _yaml(candidate, settings_file)
    moved = sorted(k for k in before.keys() | after.keys() if before.get(k, _UNSET) != after.get(k, _UNSET))
    agentic = parent.manifest.env is not None
    specs = {spec.key: spec for spec in trainer_knobs(backend, before) if spec.acts_on(agentic)}
    for key in moved:
        spec = specs.get(key)
        if spec is None:
            return ()
        old, new = _number(before.get(key, spec.default)), _number(after.get(key, spec.default))
        if old is None or new is None or spec.in_range(old) or not spec.in_range(new):
            return ()
    return tuple(moved)


def _code_restoration(parent: Harness, candidate: Harness, path: str) -> tuple[str, ...]:
    """The code knobs of `path` the candidate moves back into their safe range, when that is its only edit."""
    before = {k.spec.key: k for k in code_knobs(parent) if k.path == path}
    after = {k.spec.key: k for k in code_knobs(candidate) if k.path == path}
    moved = sorted(key for key in before if key in after and after[key].current != before[key].current)
    text, wanted = _text(parent, path), _text(candidate, path)
    if not moved or before.keys() != after.keys() or text is None or wanted is None:
        return ()
    for key in moved:
        if before[key].in_range or not after[key].in_range:
            return ()
        try:
            text = set_constant(text, key, after[key].current)[0]
        except CodeKnobError:
            return ()
    return tuple(moved) if text == wanted else ()  # any other edit (the declaration too): an ordinary candidate


def start_changes(parent: Harness, candidate: Harness, backend: BackendName) -> tuple[str, ...]:
    """The settings `candidate` changes that a run reads only when it starts from the backend's starting model
    (`BackendPlugin.start_settings`: the local warm start), a file such a setting names counting as the setting
    (the warm-start rows); () when it changes none.

    A pilot continues the incumbent's checkpoint, where such a change would do nothing: a candidate that makes
    one has its pilot restart from the starting model (`agent/adapters/pilots.py`)."""
    starts = plugin_of(backend).start_settings
    settings_file = parent.manifest.trainer.settings(backend) or parent.manifest.trainer.config
    if not starts or not settings_file:
        return ()
    before, after = _yaml(parent, settings_file), _yaml(candidate, settings_file)
    moved = {k for k in starts if before.get(k, _UNSET) != after.get(k, _UNSET)}
    for key in starts - moved:  # a setting naming a harness file (the warm-start rows): the file's content too
        rel = after.get(key)
        if isinstance(rel, str) and _file_bytes(parent, rel) != _file_bytes(candidate, rel):
            moved.add(key)
    return tuple(sorted(moved))


def _file_bytes(harness: Harness, rel: str) -> bytes | None:
    try:
        return harness.path(rel).read_bytes()
    except (ValueError, OSError):
        return None


def component_evidence(rows: pl.DataFrame) -> tuple[ComponentEvidence, ...]:
    """Per reward component of the training rows: agreement with the strict score and within-group share."""
    import polars as pl

    from diagnostics.query import GROUP_KEYS
    from diagnostics.table import COMPONENT_PREFIX

    names = [c for c in rows.columns if c.startswith(COMPONENT_PREFIX)]
    if not names or not rows.height:
        return ()
    out = []
    by_group = (
        rows.lazy()
        .group_by(*GROUP_KEYS)
        .agg(pl.col("reward").std(ddof=0).alias("__r"), *[pl.col(n).std(ddof=0).alias(n) for n in names])
        .filter(pl.col("__r") > 1e-9)
        .collect()
    )
    for name in names:
        both = rows.select(pl.col(name), pl.col("strict_score")).drop_nulls()
        corr = _corr(both) if both.height >= 2 else math.nan
        share = (
            float(by_group.select((pl.col(name).fill_null(0.0) / pl.col("__r")).mean()).item())
            if by_group.height
            else math.nan
        )
        mean = rows[name].mean()
        out.append(
            ComponentEvidence(
                name=name.removeprefix(COMPONENT_PREFIX),
                strict_corr=corr,
                within_group_share=share,
                mean=float(mean) if isinstance(mean, int | float) else math.nan,
            )
        )
    return tuple(out)


def _corr(both: pl.DataFrame) -> float:
    a, b = both.to_numpy().T
    if float(a.std()) < 1e-12 or float(b.std()) < 1e-12:
        return math.nan
    import numpy as np

    return float(np.corrcoef(a, b)[0, 1])


def _noop(source: str | None, function: str, check: Any) -> bool:
    try:
        return bool(check(source, function))
    except SyntaxError:
        return False  # a filter that does not parse is not "no filter"; its run says what went wrong


def _text(harness: Harness, rel: str) -> str | None:
    from sandboxes import worktree_files
    from sandboxes.git_worktree import GitWorktreeError

    try:
        return worktree_files.read_file(harness.root, rel)
    except (FileNotFoundError, IsADirectoryError, GitWorktreeError):
        return None  # no such file, or a link: no knob there (the candidate checks refuse links anyway)


def _yaml(harness: Harness, rel: str) -> dict[str, Any]:
    text = _text(harness, rel)
    try:
        raw = yaml.safe_load(text) if text else None
    except yaml.YAMLError:
        return {}
    return raw if isinstance(raw, dict) else {}


def _number(raw: Any) -> float | None:
    """A setting's value as a float, or None when it is no finite number (a bool is none)."""
    ok = isinstance(raw, int | float) and not isinstance(raw, bool) and math.isfinite(raw)
    return float(raw) if ok else None


def _weights(harness: Harness, rel: str) -> dict[str, float]:
    raw = _yaml(harness, rel).get("weights")
    if not isinstance(raw, dict):
        return {}
    out: dict[str, float] = {}
    for key, value in raw.items():
        weight = _number(value)
        if weight is not None and weight >= 0:
            out[str(key)] = weight
    return out
