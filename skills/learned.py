"""Skills learned from wins: a merged probe or LLM change becomes a stored skill.

A learned skill has what a seed skill has: a machine-checkable trigger over documented metric names (the
diagnostic signature that preceded the win: the symptoms' predicates, `agent/policies/symptoms.py`), the
patch as a template (`skills/templates.py` ops; trainer settings as relative expressions), the expected
outcome, provenance (session, candidate, version, evidence numbers) and, once stored, win/loss counts that
retrieval ranks it by like any other skill (a learned skill that loses is down-weighted the same way).

- `from_probe`: an exploration probe's ad-hoc spec, renamed ``learned-...`` and given the probe's trigger.
  Probes move declared knobs or replace the filter/reward through the manifest's entry points, so the skill
  applies to any harness of any domain (``applicability = ("*",)``).
- `from_change`: an LLM's edit, read as a list of `FileChange`s. A trainer-settings edit of scalar keys
  becomes ``set_yaml_key`` ops with relative expressions (``{{ current * 0.5 }}``); any other file becomes
  ``replace_file`` with its new content (through ``@reward`` / ``@group_filter`` / ``@trainer_config`` /
  ``@data_selection`` where the file is one of those). File contents are the harness's own, so the skill is
  validated for its own domain only.

The name carries a hash of the trigger and the patch, so the same win learned twice is one skill (its
counts grow) and different wins never overwrite each other. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from skills.models import ANY_DOMAIN, SkillFactor, SkillSpec
from skills.triggers import parse

LEARNED_PREFIX = "learned-"
MAX_NAME = 128


@dataclass(frozen=True)
class FileChange:
    """One file a merged candidate changed: harness-relative path, text before and after (None: absent)."""

    path: str
    before: str | None
    after: str | None


def learned_name(stem: str, trigger: str, patch: str) -> str:
    """``learned-<stem>-<hash>``: the same trigger and patch always give the same name."""
    digest = hashlib.sha256(f"{trigger}\n{patch}".encode()).hexdigest()[:8]
    slug = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-") or "change"
    return f"{LEARNED_PREFIX}{slug[: MAX_NAME - len(LEARNED_PREFIX) - 9]}-{digest}"


def signature_trigger(predicates: Sequence[str]) -> str:
    """The conjunction of symptom predicates (each parenthesised where it holds an ``or``); checked to parse."""
    parts = [f"({p})" if " or " in p else p for p in dict.fromkeys(predicates)]
    if not parts:
        raise ValueError("a learned skill needs at least one symptom predicate")
    trigger = " and ".join(parts)
    parse(trigger)
    return trigger


def from_probe(probe: SkillSpec, trigger: str, domain: str, provenance: str) -> SkillSpec:
    """The skill learned from a merged exploration probe (its ad-hoc spec, `trigger` = its symptom signature)."""
    parse(trigger)
    stem = probe.name.removeprefix("probe-")
    return probe.model_copy(
        update={
            "name": learned_name(stem, trigger, probe.patch),
            "domain": domain,
            "trigger": trigger,
            "applicability": (ANY_DOMAIN,),
            "provenance": provenance,
        }
    )


def from_change(
    changes: Sequence[FileChange],
    *,
    factor: SkillFactor,
    refs: Mapping[str, str],
    trigger: str,
    domain: str,
    slug: str,
    expected_outcome: str,
    provenance: str,
) -> SkillSpec | None:
    """The skill learned from a merged LLM edit, or None when the edit cannot be written as a template.

    `refs` maps harness paths to their manifest references (``{"harness/reward.py": "@reward", ...}``).
    None when a file was deleted (no template op deletes) or nothing changed.
    """
    parse(trigger)
    ops: list[dict[str, Any]] = []
    for change in changes:
        if change.after is None:
            return None
        ref = refs.get(change.path, change.path)
        if ref == "@trainer_config" and change.before is not None:
            settings = _relative_settings(change.before, change.after, ref)
            if settings is not None:
                ops += settings
                continue
        ops.append({"op": "replace_file", "file": ref, "content": change.after})
    if not ops:
        return None
    patch = json.dumps(ops, indent=2)
    return SkillSpec(
        name=learned_name(slug, trigger, patch),
        domain=domain,
        trigger=trigger,
        factor=factor,
        patch_kind="template",
        patch=patch,
        expected_outcome=expected_outcome,
        validation_rule="pilot: strict_acc_delta vs the control above --min-effect with its paired-bootstrap 95% CI "
        "above 0, replicated on a fresh seed, no new warning alert",
        provenance=provenance,
    )


def _relative_settings(before: str, after: str, ref: str) -> list[dict[str, Any]] | None:
    """``set_yaml_key`` ops for the top-level scalar keys that changed, or None when the edit is more than that."""
    try:
        old, new = yaml.safe_load(before) or {}, yaml.safe_load(after) or {}
    except yaml.YAMLError:
        return None
    if not isinstance(old, dict) or not isinstance(new, dict) or set(old) - set(new):
        return None  # a removed key has no op
    ops: list[dict[str, Any]] = []
    for key, value in new.items():
        if key in old and old[key] == value:
            continue
        if isinstance(value, dict | list) or (key in old and isinstance(old[key], dict | list)):
            return None
        relative = _relative(old.get(key), value)
        op: dict[str, Any] = {"op": "set_yaml_key", "file": ref, "key": str(key), "value": relative}
        if key not in old:
            op.update(create=True, default=value)
        ops.append(op)
    return ops


def _relative(old: object, new: object) -> object:
    """``{{ current * r }}`` for a number that scaled, else the new value itself."""
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (old, new))
    if not numbers or old == 0 or not math.isfinite(float(old)) or not math.isfinite(float(new)):  # type: ignore[arg-type]
        return new
    ratio = float(f"{float(new) / float(old):.6g}")  # type: ignore[arg-type]
    if isinstance(old, int) and isinstance(new, int):
        return f"{{{{ int(round(current * {ratio!r})) }}}}"
    return f"{{{{ current * {ratio!r} }}}}"
