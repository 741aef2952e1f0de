"""Apply a skill's patch to a candidate worktree (adapter: reads and writes files through ``git_worktree``).

``patch_kind == "diff"``: the unified diff goes through ``git_worktree.apply_patch`` with the harness,
so git checks that it applies and every path it touches is on the editable surface.

``patch_kind == "template"``: a JSON list of edit operations that work on any harness following the
contract (``trainer_backend/harness.py``). Values may be ``{{ expressions }}`` (``skills/templates.py``)
over ``current`` and the skill's ``params`` (overridable per call). Operations:

- ``{"op": "set_yaml_key", "file": F, "key": "a.b", "value": V, "create": false, "default": D}``:
  set one scalar in an editable YAML file, keeping its comments (``create`` adds a missing key);
  ``"file": "@trainer_config"`` means the manifest's trainer config file;
- ``{"op": "replace_file", "file": F, "content": TEXT}``: replace a whole editable file
  (``"@reward"`` / ``"@group_filter"`` name the manifest's entry files);
- ``{"op": "write_file_if_missing", "file": F, "content": TEXT}``: create a file unless it exists;
- ``{"op": "guard", "rule": TEXT}``: a guard skill's refusal rule; applying it is an error.

Every write goes through ``git_worktree.write_file``, which refuses paths off the editable surface.
The whole template is computed before anything is written, so a failing op leaves the worktree as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandboxes import git_worktree
from skills.models import SkillSpec, template_ops
from skills.templates import TemplateError, as_variables, render_value, set_yaml_key
from trainer_backend.harness import Harness


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


def resolve_file(ref: str, harness: Harness) -> str:
    """Resolve ``@reward``, ``@group_filter`` and ``@trainer_config`` to the manifest's paths."""
    if ref == "@reward":
        return harness.reward.path
    if ref == "@group_filter":
        if harness.group_filter is None:
            raise SkillPatchError("the harness manifest declares no group_filter; '@group_filter' has no file")
        return harness.group_filter.path
    if ref == "@trainer_config":
        return harness.manifest.trainer.config
    if ref.startswith("@"):
        raise SkillPatchError(f"unknown file reference {ref!r}; use @reward, @group_filter or @trainer_config")
    return ref


def apply_skill(
    spec: SkillSpec, worktree: Path, harness: Harness, params: Mapping[str, Any] | None = None
) -> AppliedPatch:
    """Apply ``spec``'s patch to ``worktree`` (nothing is committed).

    Raises:
        GuardSkillError: ``spec`` is a guard skill.
        SkillPatchError: a template op fails (missing key, bad expression, unknown op field).
        git_worktree.PatchError: a diff patch does not apply.
        git_worktree.SurfaceError: the patch touches a path off the editable surface.
    """
    if spec.is_guard:
        raise GuardSkillError(f"skill {spec.name} is a guard: it warns and refuses, it has no patch to apply")
    if spec.patch_kind == "diff":
        paths = git_worktree.apply_patch(worktree, spec.patch, harness=harness)
        return AppliedPatch(spec.name, tuple(paths), (f"applied diff touching {', '.join(paths)}",))
    variables = {**spec.params, **(params or {})}
    writes: dict[str, str] = {}
    notes: list[str] = []
    for i, op in enumerate(template_ops(spec.patch, spec.name)):
        try:
            rel, content, note = _plan(op, worktree, harness, variables, writes)
        except (TemplateError, KeyError, TypeError) as exc:
            raise SkillPatchError(f"skill {spec.name}, op #{i} ({op.get('op')}): {exc}") from None
        if content is not None:
            writes[rel] = content
        notes.append(note)
    for rel in writes:  # surface check for every file before the first write
        git_worktree.check_surface(worktree, rel, harness)
    for rel, content in writes.items():
        git_worktree.write_file(worktree, rel, content, harness)
    return AppliedPatch(spec.name, tuple(writes), tuple(notes))


def _plan(
    op: Mapping[str, Any], worktree: Path, harness: Harness, variables: Mapping[str, Any], writes: Mapping[str, str]
) -> tuple[str, str | None, str]:
    """Compute one op's effect: (file, new content or None for no write, note)."""
    kind = op["op"]
    rel = resolve_file(str(op["file"]), harness)
    git_worktree.check_surface(worktree, rel, harness)
    path = worktree / rel
    if kind == "set_yaml_key":
        _only(op, {"op", "file", "key", "value", "create", "default"})
        if rel not in writes and not path.is_file():
            raise TemplateError(f"{rel} does not exist in the worktree")
        text = writes.get(rel) or path.read_text()
        new_text, old, new = set_yaml_key(
            text,
            str(op["key"]),
            lambda current: render_value(op["value"], as_variables(variables, current)),
            create=bool(op.get("create", False)),
            default=op.get("default"),
        )
        return rel, new_text, f"{rel}: {op['key']} {old!r} -> {new!r}"
    if kind == "replace_file":
        _only(op, {"op", "file", "content"})
        return rel, str(op["content"]), f"{rel}: replaced ({len(str(op['content']))} chars)"
    if kind == "write_file_if_missing":
        _only(op, {"op", "file", "content"})
        if rel in writes or path.exists():
            return rel, None, f"{rel}: exists, left as is"
        return rel, str(op["content"]), f"{rel}: created"
    raise TemplateError(f"op {kind!r} cannot be applied")


def _only(op: Mapping[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(op) - allowed)
    if extra:
        raise TemplateError(f"unknown field(s) {extra}; allowed: {sorted(allowed)}")
