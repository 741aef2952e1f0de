"""The single-factor rule: classify a candidate's diff into intervention factors and accept or refuse it.

Factors (paper §2: reward, filtering, data selection, rollout settings, optimisation, diagnostics):

- ``reward``: the reward entry file named by the manifest (``reward: harness/reward.py:...``), or an
  editable file whose name says ``reward``;
- ``filter``: the group-filter entry file (manifest ``group_filter``), any editable file whose name says
  ``filter``, and filter wiring inside the trainer config (keys such as ``group_filter``,
  ``group_keep_ratio``). The manifest is protected, so a harness wires its filter in an editable file;
- ``data``: data-selection config: editable files named ``*data*``, ``*mix*``, ``*selection*``,
  ``*curriculum*``, and data keys inside the trainer config (``data_mix``, ``difficulty``, ...);
- ``trainer``: every other key of the trainer config (lr, clip, kl, group size, ...); the trainer config is
  every backend's settings file the manifest names (``trainer.local``, ``trainer.verl``). A change to the
  length budget (``max_new_tokens`` and friends) is a ``trainer`` factor: it is a rollout setting of the
  trainer config and the store's factor set has no separate value for it. ``FactorCheck.trainer_keys``
  names the keys touched and ``FactorCheck.length_budget`` says whether the length budget moved, so the
  ledger and skills can still call it a "length budget" intervention;
- ``env``: the agentic environment's entry file (manifest ``env.entry``): its tools, limits and observations;
- ``diagnostic``: files under the manifest's ``diagnostics`` folder, under any ``*diagnos*`` folder, or
  named ``*diagnos*``/``*analy*``;
- ``other``: any other editable file. It counts as a factor of its own, so it must be declared too.

Trainer-config lines are classified by their YAML key path, reconstructed from the hunk (changed and
context lines); lines that are only comments or blank carry no factor, so a comment-only edit is null.

``check_candidate`` refuses: paths that break the one path rule (``harness/paths.py``: ``..``, ``.git``,
absolute, NUL...), protected paths and paths off the editable surface (the reason names the path); paths
are compared in their canonical form, as the surface compares them; multi-factor diffs unless every
touched factor is declared *and* a justification is given; a single factor that contradicts the declared
set; and empty diffs, which come back as *null* (``factors=()``, ``ok=False``) so the controller can
record a no-op candidate. This module is pure.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal, get_args

from harness.manifest import BACKEND_NAMES, Harness
from harness.paths import PathRuleError, check_or_none, is_under, normalise
from store.types import Factor as StoredFactor

Factor = Literal[StoredFactor, "other"]  # "other": a changed file no factor owns
FACTORS: tuple[Factor, ...] = get_args(Factor)

LENGTH_BUDGET_KEYS = frozenset(
    {"max_new_tokens", "max_response_length", "response_length", "max_tokens", "max_turns", "max_completion_length",
     "max_turn_tokens"}
)  # fmt: skip
FILTER_KEYS = frozenset(
    {"group_keep_ratio", "group_min_keep_ratio", "group_ema_decay", "group_min_std_threshold", "keep_ratio", "min_std"}
)
DATA_KEYS = frozenset(
    {"data", "data_mix", "mix", "curriculum", "difficulty", "difficulties", "sampler", "subset", "subsets",
     "sources", "train_files", "dataset", "datasets", "selection", "max_samples", "num_train_samples"}
)  # fmt: skip
_DATA_NAME = re.compile(r"data|mix|selection|curriculum|sampl")
_KEY = re.compile(r"^(?P<indent>[ ]*)(?:-[ ]+)?(?P<key>[A-Za-z_][\w.-]*|\"[^\"]+\"|'[^']+')[ ]*:(?:[ ]|$)")
_DIFF_HEADER = re.compile(r"^diff --git (?:\"?a/(?P<a>.+?)\"?) (?:\"?b/(?P<b>.+?)\"?)$")


@dataclass(frozen=True)
class FactorCheck:
    """The classifier's verdict on a candidate diff.

    ``factors`` are the factors touched (sorted); ``ok`` says whether the candidate may proceed;
    ``reason`` explains a refusal or a null candidate (empty when ok); ``by_path`` maps each path to its
    factors; ``trainer_keys`` lists the trainer-config keys changed (dotted paths).
    """

    factors: tuple[Factor, ...]
    ok: bool
    reason: str
    by_path: tuple[tuple[str, tuple[Factor, ...]], ...] = ()
    trainer_keys: tuple[str, ...] = ()

    @property
    def is_null(self) -> bool:
        """Return True for a candidate that changes nothing that matters (no factor touched)."""
        return not self.factors

    @property
    def length_budget(self) -> bool:
        """Return True when the diff moves the length budget (``max_new_tokens`` and friends)."""
        return any(k.split(".")[-1] in LENGTH_BUDGET_KEYS for k in self.trainer_keys)


@dataclass
class FileDiff:
    """The changed lines of one file in a unified diff (``-``/``+``/context, in order)."""

    path: str
    lines: list[tuple[str, str]] = field(default_factory=list)  # (kind ' ', '-', '+'; text)

    @property
    def changed(self) -> list[str]:
        """Return the text of added and removed lines."""
        return [text for kind, text in self.lines if kind in "+-"]


def parse_diff(diff_text: str) -> dict[str, FileDiff]:
    """Split a git unified diff into files (both sides of a rename are listed) with their hunk lines."""
    files: dict[str, FileDiff] = {}
    current: list[FileDiff] = []
    in_hunk = False
    for line in diff_text.splitlines():
        header = _DIFF_HEADER.match(line)
        if header:
            names = dict.fromkeys([header["a"], header["b"]])
            current = [files.setdefault(n, FileDiff(n)) for n in names]
            in_hunk = False
            continue
        if line.startswith(("--- ", "+++ ")) and not in_hunk:
            name = line[4:].strip().strip('"')
            if name != "/dev/null" and name[:2] in ("a/", "b/") and name[2:] not in files:
                files[name[2:]] = FileDiff(name[2:])
                current = [*current, files[name[2:]]]
            continue
        if line.startswith(("rename from ", "rename to ", "copy from ", "copy to ")):
            name = line.split(" ", 2)[2]
            if name not in files:
                files[name] = FileDiff(name)
            continue
        if line.startswith("@@"):
            in_hunk = True
            continue
        if in_hunk and line[:1] in (" ", "+", "-"):
            for fd in current:
                fd.lines.append((line[0], line[1:]))
        elif in_hunk and line.startswith("\\"):
            continue
        else:
            in_hunk = False
    return files


def _under(path: str, folder: str | None) -> bool:
    canonical = None if not folder else check_or_none(folder)
    return canonical is not None and is_under(path, canonical)


def classify_path(path: str, file_diff: FileDiff | None, harness: Harness) -> tuple[tuple[Factor, ...], list[str]]:
    """Return the factors one changed file touches, and for the trainer config the keys it changes.

    `path` and the manifest's paths are compared in their canonical form (`harness.paths`).
    """
    m = harness.manifest
    path = check_or_none(path) or path
    name = PurePosixPath(path).name.lower()
    if _under(path, m.diagnostics) or any("diagnos" in part.lower() for part in PurePosixPath(path).parts[:-1]):
        return ("diagnostic",), []
    if path == harness.reward.path:
        return ("reward",), []
    if harness.group_filter is not None and path == harness.group_filter.path:
        return ("filter",), []
    if harness.env is not None and path == harness.env.path:
        return ("env",), []
    settings = [m.trainer.config, *(m.trainer.settings(b) for b in BACKEND_NAMES)]
    if path in {check_or_none(f) for f in settings if f}:  # every backend's settings file is the trainer config
        return _classify_trainer_config(file_diff)
    if "filter" in name:
        return ("filter",), []
    if "reward" in name:
        return ("reward",), []
    if "diagnos" in name or "analy" in name:
        return ("diagnostic",), []
    if _DATA_NAME.search(name):
        return ("data",), []
    return ("other",), []


def _classify_trainer_config(file_diff: FileDiff | None) -> tuple[tuple[Factor, ...], list[str]]:
    if file_diff is None or not file_diff.lines:
        return ("trainer",), []  # no line detail (binary or path-only): the whole file is a trainer change
    factors: set[Factor] = set()
    keys: list[str] = []
    stack: list[tuple[int, str]] = []
    for kind, text in file_diff.lines:
        stripped = text.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _KEY.match(text)
        path: list[str]
        if match is not None:
            indent = len(match["indent"])
            key = match["key"].strip("\"'")
            while stack and stack[-1][0] >= indent:
                stack.pop()
            path = [k for _, k in stack] + [key]
            stack.append((indent, key))
        else:
            indent = len(text) - len(text.lstrip(" "))
            path = [k for i, k in stack if i < indent] or ["<unkeyed>"]
        if kind == " ":
            continue
        dotted = ".".join(path)
        if dotted not in keys:
            keys.append(dotted)
        factors.add(_trainer_key_factor(path))
    return tuple(sorted(factors)), keys


def _trainer_key_factor(path: list[str]) -> Factor:
    for part in path:
        low = part.lower()
        if "filter" in low or low in FILTER_KEYS:
            return "filter"
        if low in DATA_KEYS or low.startswith("data_"):
            return "data"
    return "trainer"


def check_candidate(
    changed: Iterable[str],
    diff: str,
    harness: Harness,
    declared_factors: Collection[str] = (),
    justification: str = "",
) -> FactorCheck:
    """Classify a candidate's changes and decide whether it respects the surface and the single-factor rule.

    Args:
        changed: paths changed against the candidate's base (``worktree_files.changed_files``).
        diff: the unified diff against the base (``worktree_files.diff``); its paths are checked too.
        harness: the loaded harness (manifest surface and entry points).
        declared_factors: the factors the proposal says it changes.
        justification: why a bundle is needed (required when more than one factor is touched).
    """
    parsed = parse_diff(diff)
    unknown = sorted(set(declared_factors) - set(FACTORS))
    if unknown:
        return FactorCheck((), False, f"unknown declared factor(s) {unknown}; use {list(FACTORS)}")
    try:  # the one path rule (harness/paths.py): `..harness/x`, `harness/.git/x` never reach the surface check
        paths = list(dict.fromkeys(normalise(p) for p in [*changed, *parsed]))
        parsed = {normalise(p): fd for p, fd in parsed.items()}
    except PathRuleError as exc:
        return FactorCheck((), False, f"refused: {exc}")
    if not paths:
        return FactorCheck((), False, "empty diff: the candidate changes nothing (null candidate)")
    surface = harness.manifest.surface
    for path in paths:
        if harness.is_protected(path):
            return FactorCheck((), False, f"refused: {path} is protected (protected surface: {surface.protected})")
        if not harness.is_editable(path):
            return FactorCheck((), False, f"refused: {path} is outside the editable surface ({surface.editable})")
    by_path: list[tuple[str, tuple[Factor, ...]]] = []
    trainer_keys: list[str] = []
    touched: set[Factor] = set()
    for path in paths:
        factors, keys = classify_path(path, parsed.get(path), harness)
        by_path.append((path, factors))
        trainer_keys += keys
        touched.update(factors)
    ordered = tuple(f for f in FACTORS if f in touched)

    def verdict(ok: bool, reason: str = "", factors: tuple[Factor, ...] = ordered) -> FactorCheck:
        return FactorCheck(factors, ok, reason, tuple(by_path), tuple(trainer_keys))

    if not ordered:
        return verdict(False, "null candidate: only comments or blank lines changed")
    declared = set(declared_factors)
    if len(ordered) > 1:
        missing = sorted(touched - declared)
        if missing or not justification.strip():
            need = f"undeclared factor(s) {missing}" if missing else "no justification"
            return verdict(
                False,
                f"refused: multi-factor diff touches {list(ordered)} ({need}); split it into single-factor "
                "candidates, or declare every factor and justify the bundle",
            )
        return verdict(True)
    if declared and ordered[0] not in declared:
        return verdict(False, f"refused: the diff changes {ordered[0]} but the proposal declares {sorted(declared)}")
    return verdict(True)
