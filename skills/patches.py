"""Apply a skill's patch to a candidate worktree (adapter: reads and writes files through ``worktree_files``).

``patch_kind == "diff"``: the unified diff goes through ``worktree_files.apply_patch`` with the harness,
so git checks that it applies and every path it touches is on the editable surface.

``patch_kind == "template"``: a JSON list of edit operations that work on any harness following the
contract (``harness/manifest.py``). Values may be ``{{ expressions }}`` (``skills/templates.py``)
over ``current`` and the skill's ``params`` (overridable per call). Operations:

- ``{"op": "set_yaml_key", "file": F, "key": "a.b", "value": V, "create": false, "default": D}``:
  set one scalar in an editable YAML file, keeping its comments (``create`` adds a missing key);
  ``"file": "@trainer_config"`` means the trainer settings file of the session's backend (``trainer.<backend>``;
  the default backend's file when no backend is given). The backend's plug-in says what a key means in its
  file (``BackendPlugin.resolve_setting``): a key verl's settings name differently (the local trainer's
  ``max_new_tokens`` is verl's ``max_response_length``: ``trainer_backend.verl.config.LOCAL_NAMES``) is
  translated, and a verl setting the file leaves at its default is added; a key the backend's settings do not
  have is refused (the skill does not apply to that backend). The key ``@length_cap`` names the setting that
  cuts what the policy writes at once (``BackendPlugin.length_cap``; the local backend's
  `trainer_backend.local.plugin.LENGTH_CAPS`): ``max_new_tokens`` for single-turn runs and on verl
  (its ``max_response_length``, which bounds a whole multi-turn response too), the per-turn
  ``max_turn_tokens`` for an agentic harness on the local backend (whose episodes never read
  ``max_new_tokens``);
- ``{"op": "replace_file", "file": F, "content": TEXT}``: replace a whole editable file
  (``"@reward"`` / ``"@group_filter"`` / ``"@env"`` name the manifest's entry files);
- ``{"op": "write_reward", "file": F, "content": TEMPLATE}``: replace a reward file with ``TEMPLATE``, its
  ``ANSWER_PROTOCOL_MARK`` line filled in with the answer protocol the manifest declares (``answer:``), so
  the reward extracts and compares answers the way the harness says; refused when the manifest declares
  none (``skill_fits`` tells the controller beforehand);
- ``{"op": "wrap_reward", "file": "@reward", "content": TEMPLATE, "values": {NAME: V}}``: append a wrapper
  around the manifest's reward function to the reward file (``templates.wrap_function``): the wrapper keeps
  the original reward and changes what it returns for some episodes (the level-1 trajectory filter marks
  abandoned and looping ones). ``values`` become ``NAME = number`` constants at the template's
  ``VALUES_MARK`` line;
- ``{"op": "write_file_if_missing", "file": F, "content": TEXT}``: create a file unless it exists;
- ``{"op": "reweight_sources", "file": F, "key": K, "dead_at": X, "min_groups": N}``:
  re-weight the data-selection mapping at ``K`` (``{value: weight}``, ``harness/data.yaml``'s ``weights``)
  from the run's per-source health metrics (``source_dead_ratio/<data_source>`` and
  ``source_groups/<data_source>``, ``diagnostics/sources.py``), passed to ``apply_skill`` as ``metrics``.
  An entry is a value of the row field the manifest's ``data.select_by`` names; its sources are the
  ``data_source``s of the training rows (the manifest's ``data.train``) with that value (with the default
  ``select_by: data_source`` an entry is its own source); several sources are pooled by group count.
  An entry whose sources have at least ``N`` groups and a dead-group ratio at or above ``X`` gets weight 0
  (defaults: the diagnostics' ``MIN_SOURCE_GROUPS`` = 8 and ``DEAD_SOURCE_AT`` = 0.5); the other entries
  keep their proportions and share the freed weight, so the total stays the same (rounded to 4 decimals);
  entries no source matched keep their weight (no evidence). Refused when the file or key is missing, no
  entry matches a source, no entry is dead (nothing to do), or every weighted entry would be zeroed.
  ``"file": "@data_selection"`` means the file named by the trainer config's ``data_selection`` field. ``X``
  and ``N`` may be ``{{ expressions }}`` over the skill's params;
- ``{"op": "match_heldout_sources", "file": F, "key": K}``: set the data-selection mapping at ``K`` to the
  held-out set's mix of data sources (``heldout_source_share/<data_source>``, ``diagnostics/sources.py``):
  each entry gets the held-out share of the sources it draws (entries as for ``reweight_sources``), times the
  mapping's total weight; an entry whose sources the held-out set does not hold gets 0. Refused when the
  metrics hold no held-out mix, no entry draws a held-out source, or the mapping already has that mix
  (``skills/data_weights.py``);
- ``{"op": "score_from_component", "file": F, "component": NAME}``: make a dict reward train on one of its
  own components (``skills.templates.score_from_component``: the manifest's reward function is rebound to
  a wrapper that returns ``score = out[NAME]``, every component still logged); ``"file": "@reward"``;
- ``{"op": "score_from_checks", "file": "@reward", "checks": [[NAME, ">=", T], ...]}``: make a dict reward pay
  1 when each named component passes its check, else 0 (``skills.score_checks``);
- ``{"op": "set_constant", "file": F, "name": NAME, "value": V}``: set a module-level number constant of a
  harness code file (``"@reward"``, ``"@group_filter"``, ``"@env"``) in place, comments kept; ``V`` reads ``current``.
  Refused unless the file declares ``NAME`` a knob (``harness/code_knobs.py``: ``EVOTRAINER_KNOBS``), so a
  skill learned from a probe moves only constants another harness also declares;
- ``{"op": "set_env_isolation", "file": "@env", "value": ISOLATION}``: declare how episodes share the env
  module (``harness.env.declare_isolation``: ``EVOTRAINER_ENV_ISOLATION``, e.g. ``fresh_module``);
- ``{"op": "drop_gate", "file": "@reward", "gate": ID}``: delete the gate ``ID`` (``if COND: return 0`` in the
  manifest's reward function, ``harness/code_gates.py``); refused where the reward has no such gate;
- ``{"op": "read_reference", "file": "@reward", "function": FN, "key": K}``: in ``FN``, a function the reward
  passes its reference answer to and that ignores it, read the reference where it reads ``extra_info[K]``
  (``harness/code_reference.py``); refused where the reward offers no such place;
- ``{"op": "guard", "rule": TEXT}``: a guard skill's refusal rule; applying it is an error.

Expressions (``{{ ... }}``) read ``current``, the skill's ``params`` and the run's numeric health metrics
(flat keys, e.g. ``turn_cap``, ``echo_trap_turns``; params win a clash); ``set_yaml_key``'s ``default``
(the value assumed for a missing key) is an expression too. A template holding ``TOOL_ROLES_MARK``
(``write_reward``, ``wrap_reward``) gets the manifest's declared tools by role (``diagnostics.tool_roles``).

Every write goes through ``worktree_files.write_file``, which refuses paths off the editable surface, and every
read through ``worktree_files.read_file``: neither follows a symlink (a link on the way is refused).
The whole template is computed before anything is written, so a failing op leaves the worktree as it was.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from diagnostics.agentic_docs import is_agentic_metric
from diagnostics.sources import DEAD_SOURCE_AT, MIN_SOURCE_GROUPS
from diagnostics.tool_roles import ToolRoles
from harness.code_gates import GateError, drop_gate
from harness.code_knobs import KNOBS_NAME, CodeKnobError, read_code_knobs, set_constant
from harness.code_reference import CodeReferenceError, substitute_reference
from harness.env import ISOLATIONS, declare_isolation
from harness.manifest import BackendName, Harness
from sandboxes import worktree_files
from skills.context import AGENTIC_CONTEXT
from skills.data_weights import match_heldout, reweight
from skills.models import SkillSpec, template_ops
from skills.score_checks import score_from_checks
from skills.templates import (
    TOOL_ROLES_MARK,
    TemplateError,
    as_variables,
    get_yaml_value,
    render_answer_protocol,
    render_tool_roles,
    render_value,
    render_values,
    score_from_component,
    set_yaml_key,
    set_yaml_mapping,
    wrap_function,
)
from skills.triggers import parse
from trainer_backend import plugin_of

# The setting that cuts what the policy writes at once, per kind of run, and its default: the local trainer's
# knobs with the `longer_responses` effect (trainer_backend/local/config.py; a unit test checks they agree).
LENGTH_CAP = "@length_cap"
NO_ENV = (
    "the manifest declares no env (tools and an episode loop): this skill works on agentic episodes; "
    "see harness/env.py for the env: section"
)
NO_ANSWER_PROTOCOL = (
    "the manifest declares no answer protocol, so a skill cannot write a reward for it; add e.g. "
    "answer: {pattern: 'ANSWER: (.*)', compare: exact} to evotrainer.yaml (docs/harness.md)"
)


class SkillPatchError(ValueError):
    """A skill's patch cannot be applied to this worktree; the message names the skill, op and file."""


class GuardSkillError(SkillPatchError):
    """A guard skill was asked to patch a worktree; guards only warn or refuse."""


@dataclass(frozen=True)
class AppliedPatch:
    """What applying a skill did: the files written and one note per operation."""

    skill: str
    files: tuple[str, ...]
    notes: tuple[str, ...]


def skill_fits(spec: SkillSpec, harness: Harness) -> str | None:
    """Return why ``spec`` cannot apply to ``harness`` whatever its metrics say, or None when it can.

    A skill that writes a reward (``write_reward``) needs the manifest's answer protocol; an agentic skill
    (its trigger reads only agentic metrics, or its patch wraps the reward or names the declared tools) needs
    the manifest's env.
    """
    if spec.patch_kind != "template":
        return None
    ops = template_ops(spec.patch, spec.name)
    if harness.manifest.env is None and _is_agentic(spec, ops):
        return NO_ENV
    writes_reward = any(op.get("op") == "write_reward" for op in ops)
    return NO_ANSWER_PROTOCOL if writes_reward and harness.manifest.answer is None else None


def _is_agentic(spec: SkillSpec, ops: list[dict[str, Any]]) -> bool:
    """Agentic: the trigger reads only agentic metrics and agentic context variables (a guard that also reads
    a single-turn signal, such as never-reward-brevity's length term, applies to every harness), or the patch
    wraps the reward or names the declared tools."""
    names = parse(spec.trigger).names
    reads = bool(names) and all(is_agentic_metric(n) or n in AGENTIC_CONTEXT for n in names)
    return reads or any(op.get("op") == "wrap_reward" or TOOL_ROLES_MARK in str(op.get("content", "")) for op in ops)


def resolve_file(ref: str, harness: Harness, worktree: Path | None = None, backend: BackendName | None = None) -> str:
    """Resolve ``@reward``, ``@group_filter``, ``@env``, ``@trainer_config`` and ``@data_selection`` to harness paths.

    ``@trainer_config`` is ``backend``'s settings file (the default backend's when None). ``@data_selection``
    is the ``data_selection`` field of the trainer config, read in ``worktree`` (the harness's own folder when
    None), since the trainer config is editable.
    """
    if ref == "@data_selection":
        return _data_selection(harness, worktree)
    if ref == "@reward":
        return harness.reward.path
    if ref == "@group_filter":
        if harness.group_filter is None:
            raise SkillPatchError("the harness manifest declares no group_filter; '@group_filter' has no file")
        return harness.group_filter.path
    if ref == "@env":
        if harness.env is None:
            raise SkillPatchError("the harness manifest declares no env; '@env' has no file")
        return harness.env.path
    if ref == "@trainer_config":
        own = harness.manifest.trainer.config if backend is None else harness.manifest.trainer.settings(backend)
        if own is None:
            raise SkillPatchError(f"the manifest names no trainer.{backend} settings; '@trainer_config' has no file")
        return own
    if ref.startswith("@"):
        raise SkillPatchError(
            f"unknown file reference {ref!r}; use @reward, @group_filter, @env, @trainer_config or @data_selection"
        )
    return ref


def _data_selection(harness: Harness, worktree: Path | None) -> str:
    config = harness.manifest.trainer.config
    text = _read(worktree if worktree is not None else harness.root, config)
    try:
        raw = yaml.safe_load(text) if text is not None else None
    except yaml.YAMLError as exc:
        raise SkillPatchError(f"{config}: not valid YAML ({exc}); '@data_selection' has no file") from None
    value = raw.get("data_selection") if isinstance(raw, dict) else None
    if not isinstance(value, str) or not value.strip():
        raise SkillPatchError(
            f"{config}: no field 'data_selection' naming the data-selection file; '@data_selection' has no file"
        )
    return value


def apply_skill(
    spec: SkillSpec,
    worktree: Path,
    harness: Harness,
    params: Mapping[str, Any] | None = None,
    metrics: Mapping[str, Any] | None = None,
    backend: BackendName | None = None,
) -> AppliedPatch:
    """Apply ``spec``'s patch to ``worktree`` (nothing is committed).

    ``metrics`` are the run's health metrics (``agent.nodes.propose.trigger_metrics``); only ops that
    read evidence (``reweight_sources``) use them, and they fail when it is absent. ``backend`` is the
    session's backend: ``@trainer_config`` edits its settings file.

    Raises:
        GuardSkillError: ``spec`` is a guard skill.
        SkillPatchError: a template op fails (missing key, bad expression, unknown op field).
        git_worktree.PatchError: a diff patch does not apply.
        git_worktree.SurfaceError: the patch touches a path off the editable surface.
    """
    if spec.is_guard:
        raise GuardSkillError(f"skill {spec.name} is a guard: it warns and refuses, it has no patch to apply")
    if spec.patch_kind == "diff":
        paths = worktree_files.apply_patch(worktree, spec.patch, harness=harness)
        return AppliedPatch(spec.name, tuple(paths), (f"applied diff touching {', '.join(paths)}",))
    numeric = {k: v for k, v in (metrics or {}).items() if "/" not in k and _is_number(v)}
    variables = {**numeric, **spec.params, **(params or {})}
    writes: dict[str, str] = {}
    notes: list[str] = []
    for i, op in enumerate(template_ops(spec.patch, spec.name)):
        try:
            rel, content, note = _plan(op, worktree, harness, variables, writes, metrics or {}, backend)
        except (TemplateError, KeyError, TypeError) as exc:
            raise SkillPatchError(f"skill {spec.name}, op #{i} ({op.get('op')}): {exc}") from None
        if content is not None:
            writes[rel] = content
        notes.append(note)
    for rel in writes:  # surface check for every file before the first write
        worktree_files.check_surface(worktree, rel, harness)
    for rel, content in writes.items():
        worktree_files.write_file(worktree, rel, content, harness)
    return AppliedPatch(spec.name, tuple(writes), tuple(notes))


def _plan(
    op: Mapping[str, Any],
    worktree: Path,
    harness: Harness,
    variables: Mapping[str, Any],
    writes: Mapping[str, str],
    metrics: Mapping[str, Any],
    backend: BackendName | None = None,
) -> tuple[str, str | None, str]:
    """Compute one op's effect: (file, new content or None for no write, note)."""
    kind = op["op"]
    rel = worktree_files.surface_path(resolve_file(str(op["file"]), harness, worktree, backend), harness)
    worktree_files.check_surface(worktree, rel, harness)
    current = _read(worktree, rel)  # never through a link (worktree_files refuses them)
    if kind == "set_yaml_key":
        _only(op, {"op", "file", "key", "value", "create", "default"})
        if rel not in writes and current is None:
            raise TemplateError(f"{rel} does not exist in the worktree")
        text = writes.get(rel) or current or ""
        key, create = str(op["key"]), bool(op.get("create", False))
        cap_default = None
        if key == LENGTH_CAP:  # a setting the trainer always has: created at its default when the file omits it
            key, cap_default = _length_cap(harness, backend)
            create = create or cap_default is not None
        try:
            get_yaml_value(text, key)
            default = op.get("default")  # the key exists: its default is never read
        except KeyError:
            default = cap_default if cap_default is not None else render_value(op.get("default"), variables)
        if op["file"] == "@trainer_config":  # the key as the session backend's settings file names it
            key, create, default = _backend_setting(harness, backend, key, text, create, default)
        new_text, old, new = set_yaml_key(
            text,
            key,
            lambda current: render_value(op["value"], as_variables(variables, current)),
            create=create,
            default=default,
        )
        return rel, new_text, f"{rel}: {key} {old!r} -> {new!r}"
    if kind == "reweight_sources":
        _only(op, {"op", "file", "key", "dead_at", "min_groups"})
        if rel not in writes and current is None:
            raise TemplateError(f"{rel} does not exist in the worktree")
        text = writes.get(rel) or current or ""
        key = str(op["key"])
        weights = _weights(text, rel, key)
        dead_at = render_value(op.get("dead_at", DEAD_SOURCE_AT), variables)
        min_groups = render_value(op.get("min_groups", MIN_SOURCE_GROUPS), variables)
        by_entry = sources_by_entry(worktree, harness.manifest.data.train, harness.manifest.data.select_by)
        new_weights, note = reweight(weights, metrics, dead_at, min_groups, by_entry)
        new_text, _, _ = set_yaml_mapping(text, key, new_weights)
        return rel, new_text, f"{rel}: {key} {note}"
    if kind == "match_heldout_sources":
        _only(op, {"op", "file", "key"})
        source = writes.get(rel) or current
        if source is None:
            raise TemplateError(f"{rel} does not exist in the worktree")
        weights = _weights(source, rel, str(op["key"]))
        by_entry = sources_by_entry(worktree, harness.manifest.data.train, harness.manifest.data.select_by)
        new_weights, note = match_heldout(weights, metrics, by_entry)
        new_text, _, _ = set_yaml_mapping(source, str(op["key"]), new_weights)
        return rel, new_text, f"{rel}: {op['key']} {note}"
    if kind == "write_reward":
        _only(op, {"op", "file", "content"})
        answer = harness.manifest.answer
        if answer is None:
            raise TemplateError(NO_ANSWER_PROTOCOL)
        env = harness.manifest.env  # an env declares at least one tool (harness/env.py)
        observation = env.observation if env is not None else None
        content = _with_tool_roles(render_answer_protocol(str(op["content"]), answer, observation), harness)
        gated = ", an answer counts only after a tool call" if env is not None else ""
        note = f"written for the declared answer protocol {answer.pattern!r} ({answer.compare}{gated})"
        return rel, content, f"{rel}: {note}"
    if kind == "wrap_reward":
        _only(op, {"op", "file", "content", "values"})
        if rel != harness.reward.path:
            raise TemplateError(f"wrap_reward wraps the manifest's reward ({harness.reward.path}), not {rel}")
        source = writes.get(rel) or current
        if source is None:
            raise TemplateError(f"{rel} does not exist in the worktree")
        raw = op.get("values", {})
        if not isinstance(raw, dict):
            raise TemplateError("'values' must map constant names to numbers or expressions")
        values = {str(k): render_value(v, variables) for k, v in raw.items()}
        wrapper = _with_tool_roles(str(op["content"]), harness)
        wrapper = render_values(wrapper, values) if values else wrapper
        content = wrap_function(source, harness.reward.function, wrapper)
        shown = ", ".join(f"{k}={v!r}" for k, v in values.items())
        return rel, content, f"{rel}: {harness.reward.function} wrapped ({shown or 'no values'})"
    if kind == "score_from_component":
        _only(op, {"op", "file", "component"})
        source = _reward_source(rel, writes.get(rel) or current, harness)
        content = score_from_component(source, harness.reward.function, str(op["component"]))
        return rel, content, f"{rel}: {harness.reward.function} now trains on component {op['component']!r}"
    if kind == "score_from_checks":
        _only(op, {"op", "file", "checks"})
        source = _reward_source(rel, writes.get(rel) or current, harness)
        content = score_from_checks(source, harness.reward.function, op["checks"])
        return rel, content, f"{rel}: {harness.reward.function} pays 1 when {op['checks']!r} all hold"
    if kind == "set_constant":
        _only(op, {"op", "file", "name", "value"})
        source = writes.get(rel) or current
        if source is None:
            raise TemplateError(f"{rel} does not exist in the worktree")
        name = str(op["name"])
        try:
            declared = {k.spec.key: k for k in read_code_knobs(source, rel, str(op["file"]))}
            if name not in declared:
                raise TemplateError(f"{rel} declares no knob {name!r} (harness/code_knobs.py: {KNOBS_NAME})")
            value = render_value(op["value"], as_variables(variables, declared[name].current))
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise TemplateError(f"{name}: the value {value!r} is not a number")
            content, old, new = set_constant(source, name, value)
        except CodeKnobError as exc:
            raise TemplateError(str(exc)) from None
        return rel, content, f"{rel}: {name} {old:g} -> {new:g}"
    if kind == "set_env_isolation":
        _only(op, {"op", "file", "value"})
        source = writes.get(rel) or current
        if source is None:
            raise TemplateError(f"{rel} does not exist in the worktree")
        value = str(op["value"])
        if value not in ISOLATIONS:
            raise TemplateError(f"set_env_isolation: {value!r} is not one of {', '.join(ISOLATIONS)}")
        try:
            content, old = declare_isolation(source, value)
        except ValueError as exc:
            raise TemplateError(f"{rel}: {exc}") from None
        return rel, content, f"{rel}: episodes' isolation {old} -> {value}"
    if kind == "drop_gate":
        _only(op, {"op", "file", "gate"})
        source = _reward_source(rel, writes.get(rel) or current, harness)
        try:
            content, gate = drop_gate(source, harness.reward.function, str(op["gate"]))
        except GateError as exc:
            raise TemplateError(f"{rel}: {exc}") from None
        return rel, content, f"{rel}: dropped `{gate.shown}` (line {gate.line})"
    if kind == "read_reference":
        _only(op, {"op", "file", "function", "key"})
        source = _reward_source(rel, writes.get(rel) or current, harness)
        try:
            content, sub = substitute_reference(source, harness.reward.function, str(op["function"]), str(op["key"]))
        except CodeReferenceError as exc:
            raise TemplateError(f"{rel}: {exc}") from None
        return rel, content, f"{rel}: {sub.function} reads {sub.reference} instead of `{sub.text}` (line {sub.line})"
    if kind == "replace_file":
        _only(op, {"op", "file", "content"})
        return rel, str(op["content"]), f"{rel}: replaced ({len(str(op['content']))} chars)"
    if kind == "write_file_if_missing":
        _only(op, {"op", "file", "content"})
        if rel in writes or current is not None:
            return rel, None, f"{rel}: exists, left as is"
        return rel, str(op["content"]), f"{rel}: created"
    raise TemplateError(f"op {kind!r} cannot be applied")


def _reward_source(rel: str, source: str | None, harness: Harness) -> str:
    """The text of the manifest's reward file an op edits (`source`, as written so far); TemplateError otherwise."""
    if source is None:
        raise TemplateError(f"{rel} does not exist in the worktree")
    if rel != harness.reward.path:
        raise TemplateError(f"{rel} is not the manifest's reward file ({harness.reward.path})")
    return source


def _length_cap(harness: Harness, backend: BackendName | None) -> tuple[str, object]:
    """The trainer setting behind ``@length_cap`` for this harness and backend, and its default when the backend
    creates it at a default of its own (None: `BackendPlugin.resolve_setting` reads the backend's defaults)."""
    return plugin_of(backend or harness.manifest.trainer.backend).length_cap(harness.manifest.env is not None)


def _backend_setting(
    harness: Harness, backend: BackendName | None, key: str, text: str, create: bool, default: object
) -> tuple[str, bool, object]:
    """(key, create, default) of a ``@trainer_config`` edit in the backend's settings file (`text`)."""
    name = backend or harness.manifest.trainer.backend

    def present(dotted: str) -> bool:
        try:
            get_yaml_value(text, dotted)
        except KeyError:
            return False
        return True

    found = plugin_of(name).resolve_setting(key, present, create, default)
    if found is None:
        raise TemplateError(
            f"{name}'s settings have no {key!r} (nor a setting meaning the same); not for --backend {name}"
        )
    return found


def _with_tool_roles(template: str, harness: Harness) -> str:
    """The template with the declared tools by role at its TOOL_ROLES_MARK line (unchanged without the mark)."""
    if TOOL_ROLES_MARK not in template:
        return template
    env = harness.manifest.env
    if env is None:
        raise TemplateError(NO_ENV)
    declared = ToolRoles.from_env(env).declared or {}
    return render_tool_roles(template, {name: role.value for name, role in declared.items()})


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value  # NaN is no evidence


def sources_by_entry(worktree: Path, train_file: str, field: str) -> dict[str, set[str]]:
    """`{str(row[field]): {row["data_source"], ...}}` over the worktree's JSONL training file; empty when unreadable.

    This is how the data file itself says which data sources an entry of the selection mapping draws
    (with ``field`` = ``data_source`` each entry draws itself).
    """
    out: dict[str, set[str]] = {}
    for line in (_read(worktree, train_file) or "").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and field in row and isinstance(row.get("data_source"), str):
            out.setdefault(str(row[field]), set()).add(row["data_source"])
    return out


def _read(root: Path, rel: str) -> str | None:
    """The text of `rel` under `root`, None when it does not exist; a link on the way is refused (raises)."""
    try:
        return worktree_files.read_file(root, rel)
    except (FileNotFoundError, IsADirectoryError):
        return None


def _weights(text: str, rel: str, key: str) -> dict[Any, Any]:
    """The data-selection mapping at `key` of the YAML `text` (file `rel`)."""
    try:
        weights = get_yaml_value(text, key)
    except KeyError:
        raise TemplateError(f"{rel} has no key {key!r}") from None
    if not isinstance(weights, dict):
        raise TemplateError(f"{rel}: {key!r} holds {weights!r}, not a mapping of weights")
    return weights


def _only(op: Mapping[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(op) - allowed)
    if extra:
        raise TemplateError(f"unknown field(s) {extra}; allowed: {sorted(allowed)}")
