"""How the trusted trainer calls candidate harness code (reward, group filter), and what it accepts back.

The trainer never calls candidate functions directly: it goes through a calls object with
``compute_rewards(batch) -> list[object]``, ``filter_groups(group_rewards, state) -> (keep, state)`` and
``close()``. `InProcessCalls` imports the harness files by path (``spec.sandbox == "none"``: trusted
harnesses, tests, the demo); `sandboxes.worker.SandboxCalls` (Docker container or child process) has the
same methods, and `sandboxes.calls.open_calls` picks one by sandbox mode. Either raises
`harness.failures.CandidateCodeError` when candidate code fails, so the run ends with a classified outcome
naming the harness file, never a traceback or a silent zero.

`validate_reward` is the pure reward contract check (verl's: a float, or a dict with ``"score"`` plus
numeric extras), with the score inside the manifest's ``reward_range``; `validate_keep_flags` and
`validate_filter_state` check what a group filter returns. A harness without a group filter keeps every
group, in every sandbox mode.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from harness.env import ISOLATION_NAME, ISOLATIONS, RESET_NAME, Isolation
from harness.failures import CandidateCodeError, Outcome, shown
from harness.files import inside
from harness.manifest import DEFAULT_REWARD_BOUND, MAX_REWARD_MAGNITUDE, EntryPoint, Harness
from harness.paths import PathRuleError

DEFAULT_RANGE = (-DEFAULT_REWARD_BOUND, DEFAULT_REWARD_BOUND)
# What candidate code may raise and still be the candidate's fault: anything but a real Ctrl-C, SystemExit
# included (a reward calling sys.exit() must fail its candidate, not end the trainer without a summary).
_CANDIDATE_RAISES = (Exception, SystemExit, GeneratorExit)
MAX_COMPONENTS = 64  # reward extras kept per sample (each becomes a metric)
MAX_COMPONENT_NAME = 100
MAX_FILTER_STATE_CHARS = 1024 * 1024  # the filter state rides in every checkpoint


class RewardContractError(ValueError):
    """A reward returned something outside the contract; the message names `file.py:function`."""


class HarnessCalls(Protocol):
    """The calls the trainer makes into candidate code: rewards, the group filter and, for an agentic
    harness (`harness/env.py`), one environment per episode."""

    def compute_rewards(self, batch: list[dict[str, Any]]) -> list[object]: ...

    def filter_groups(
        self, group_rewards: list[list[float]], state: dict[str, Any]
    ) -> tuple[list[bool], dict[str, Any]]: ...

    def open_episodes(self, rows: list[dict[str, Any]], isolation: Isolation | None = None) -> list[int]:
        """Make one environment per data row (`make_env(row)`); return their episode ids. The env module's
        isolation declaration holds (`harness.env`); `isolation` overrides it."""
        ...

    def env_calls(self, calls: list[tuple[int, str, dict[str, Any]]]) -> list[object]:
        """Run `(episode, tool, arguments)` calls, each in its episode's environment; return what each
        `env.call` returned (unvalidated: `harness.env.validate_env_result` checks it)."""
        ...

    def close_episodes(self, episodes: list[int]) -> None:
        """Forget these episodes' environments."""
        ...

    def close(self) -> None: ...


def _number(value: object, what: str, entry: str, bounds: tuple[float, float]) -> float:
    """Return `value` as a float inside `bounds`, checked before any conversion (no OverflowError)."""
    low, high = bounds
    where = f"{entry} returned {what} {shown(value)}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = "a bool" if isinstance(value, bool) else f"type {type(value).__name__}"
        raise RewardContractError(f"{where}: {kind} is not a number; return a float or a dict with 'score'")
    number = int.__int__(value) if isinstance(value, int) else float.__float__(value)  # plain, not a subclass
    if isinstance(number, float) and not math.isfinite(number):
        raise RewardContractError(
            f"{entry} returned a non-finite {what} ({number}); rewards must be finite numbers in "
            f"[{low:g}, {high:g}] (evotrainer.yaml field 'reward_range')"
        )
    if not low <= number <= high:  # exact int/float comparison: 10**400 compares without overflowing
        raise RewardContractError(
            f"{where}: outside the reward range [{low:g}, {high:g}] (evotrainer.yaml field 'reward_range')"
        )
    return float(number)


def validate_reward(
    value: object, entry: str, reward_range: tuple[float, float] = DEFAULT_RANGE
) -> tuple[float, dict[str, float]]:
    """Check one raw reward value against the contract and return `(score, components)`.

    Accepts an int/float, or a dict with a numeric ``"score"`` and numeric extras (components). The score
    must lie in `reward_range` (the manifest's ``reward_range``, default +-1e6); extras must be finite and
    within +-`MAX_REWARD_MAGNITUDE`. Values are range-checked before they are converted, so a huge int
    (``10**400``) is a refusal, never an ``OverflowError``; an object whose methods raise (in-process
    candidate values can be any object) is a refusal too.

    Raises:
        RewardContractError: None, a string or other type, NaN/inf, out of range, a dict without
            ``"score"`` or with a bad extra; the message names `entry` (``harness/reward.py:compute_score``),
            the value and the range.
    """
    try:
        return _validate(value, entry, reward_range)
    except RewardContractError:
        raise
    except Exception as exc:  # a candidate object whose dunder methods raise: still the candidate's value
        raise RewardContractError(
            f"{entry} returned a value that cannot be read ({type(exc).__name__}: {exc})"
        ) from exc


def _validate(value: object, entry: str, reward_range: tuple[float, float]) -> tuple[float, dict[str, float]]:
    if not isinstance(value, dict):
        return _number(value, "score", entry, reward_range), {}
    keys = list(dict.keys(value))
    if "score" not in keys:
        shown = sorted(str(k)[:40] for k in keys[:8])
        raise RewardContractError(f"{entry} returned a dict without 'score' (keys: {shown})")
    score = _number(dict.__getitem__(value, "score"), "score", entry, reward_range)
    components: dict[str, float] = {}
    extras = (-MAX_REWARD_MAGNITUDE, MAX_REWARD_MAGNITUDE)
    if len(keys) > MAX_COMPONENTS + 1:
        raise RewardContractError(f"{entry} returned {len(keys) - 1} extras; at most {MAX_COMPONENTS} are kept")
    for key in keys:
        if key == "score":
            continue
        if not isinstance(key, str) or not 0 < len(key) <= MAX_COMPONENT_NAME:
            raise RewardContractError(
                f"{entry} returned an extra named {str(key)[:40]!r}; "
                f"names are strings of 1-{MAX_COMPONENT_NAME} characters"
            )
        components[str.__str__(key)] = _number(dict.__getitem__(value, key), f"extra {key[:40]!r}", entry, extras)
    return score, components


def validate_keep_flags(keep: object, num_groups: int, entry: str) -> list[bool]:
    """Check a group filter's return value: a list of `num_groups` booleans.

    Raises:
        CandidateCodeError: wrong type or length; names `entry`.
    """
    path = entry.partition(":")[0]
    if not isinstance(keep, list) or len(keep) != num_groups or not all(isinstance(k, bool) for k in keep):
        raise CandidateCodeError(
            Outcome.CANDIDATE_ERROR, f"{entry} must return a list of {num_groups} bools, got {keep!r:.80}", path
        )
    return keep


def validate_filter_state(state: object, entry: str) -> dict[str, Any]:
    """Check the state a group filter leaves: a JSON-serialisable dict (the trainer checkpoints it).

    Raises:
        CandidateCodeError: not a dict, or not JSON-serialisable; names `entry`.
    """
    path = entry.partition(":")[0]
    if type(state) is not dict:
        raise CandidateCodeError(
            Outcome.CANDIDATE_ERROR, f"{entry} left its state as {type(state).__name__}, not a dict", path
        )
    try:
        size = len(json.dumps(state, allow_nan=True))
    except Exception as exc:  # candidate values: any failure to serialise is the candidate's
        raise CandidateCodeError(
            Outcome.CANDIDATE_ERROR, f"{entry} left a state that is not JSON-serialisable ({type(exc).__name__})", path
        ) from exc
    if size > MAX_FILTER_STATE_CHARS:
        raise CandidateCodeError(
            Outcome.CANDIDATE_ERROR,
            f"{entry} left a state of {size} characters (at most {MAX_FILTER_STATE_CHARS})",
            path,
        )
    return state


def load_function(root: Path, entry: EntryPoint) -> Callable[..., Any]:
    """Import `root/entry.path` as a fresh module and return `entry.function` from it.

    Raises:
        CandidateCodeError: the file fails to import or lacks the function.
    """
    try:
        path = inside(root, entry.path)  # the one path rule (harness/files.py): no link along the way
    except PathRuleError as exc:
        raise CandidateCodeError(Outcome.CANDIDATE_ERROR, str(exc), entry.path) from None
    name = "evotrainer_harness_" + "_".join(Path(entry.path).with_suffix("").parts)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CandidateCodeError(Outcome.CANDIDATE_ERROR, f"cannot import {entry.path}", entry.path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling inside the harness need the module registered
    try:
        spec.loader.exec_module(module)
    except _CANDIDATE_RAISES as exc:  # candidate code: any import-time failure is the candidate's, classified
        raise CandidateCodeError(
            Outcome.CANDIDATE_ERROR, f"importing {entry.path} raised {type(exc).__name__}: {exc}", entry.path
        ) from exc
    func = getattr(module, entry.function, None)
    if not callable(func):
        raise CandidateCodeError(
            Outcome.CANDIDATE_ERROR, f"{entry.path} has no function {entry.function!r}", entry.path
        )
    return func  # type: ignore[no-any-return]


def env_declaration(make_env: Callable[..., Any], entry: str) -> tuple[Isolation, Callable[[], Any] | None]:
    """The isolation and reset function the module of `make_env` declares (`harness.env`: `ISOLATION_NAME`,
    `RESET_NAME`).

    Raises:
        CandidateCodeError: an isolation outside `ISOLATIONS`, or a reset that names no function of the module.
    """
    module = getattr(make_env, "__globals__", {})
    path = entry.partition(":")[0]
    isolation = module.get(ISOLATION_NAME, "shared")
    if isolation not in ISOLATIONS:
        message = f"{path}: {ISOLATION_NAME} = {isolation!r}; use one of {', '.join(ISOLATIONS)}"
        raise CandidateCodeError(Outcome.CANDIDATE_ERROR, message, path)
    name = module.get(RESET_NAME)
    if name is None:
        return isolation, None
    reset = module.get(name) if isinstance(name, str) else None
    if not callable(reset):
        message = f"{path}: {RESET_NAME} = {name!r} must name a module-level function of the env module"
        raise CandidateCodeError(Outcome.CANDIDATE_ERROR, message, path)
    return isolation, reset


def _keep_all(group_rewards: list[list[float]], state: dict[str, Any]) -> list[bool]:
    return [True] * len(group_rewards)


class InProcessCalls:
    """Call the harness's reward and group filter in this process (no isolation: trusted code only)."""

    def __init__(self, harness: Harness) -> None:
        """Import the reward and (optional) group filter named in the manifest."""
        self.reward_entry = harness.reward
        self.filter_entry = harness.group_filter
        self._reward = load_function(harness.root, self.reward_entry)
        self._filter = _keep_all if self.filter_entry is None else load_function(harness.root, self.filter_entry)
        self.env_entry = harness.env
        self.root = harness.root
        self._make_env = None if self.env_entry is None else load_function(harness.root, self.env_entry)
        self._episodes: dict[int, Any] = {}
        self._next_episode = 0

    def compute_rewards(self, batch: list[dict[str, Any]]) -> list[object]:
        """Return the reward function's raw return value for each item of `batch` (unvalidated)."""
        out: list[object] = []
        for item in batch:
            try:
                out.append(
                    self._reward(item["data_source"], item["solution_str"], item["ground_truth"], item["extra_info"])
                )
            except _CANDIDATE_RAISES as exc:  # candidate code: re-raised as a classified failure, never a default
                raise CandidateCodeError(
                    Outcome.CANDIDATE_ERROR,
                    f"{self.reward_entry} raised {type(exc).__name__}: {exc}",
                    self.reward_entry.path,
                ) from exc
        return out

    def filter_groups(
        self, group_rewards: list[list[float]], state: dict[str, Any]
    ) -> tuple[list[bool], dict[str, Any]]:
        """Return the filter's keep flags (validated) and the state it left (the filter may mutate it)."""
        entry = "(no group filter)" if self.filter_entry is None else str(self.filter_entry)
        try:
            keep = self._filter(group_rewards, state)
        except _CANDIDATE_RAISES as exc:  # candidate code: re-raised as a classified failure, never a default
            path = "" if self.filter_entry is None else self.filter_entry.path
            raise CandidateCodeError(
                Outcome.CANDIDATE_ERROR, f"{entry} raised {type(exc).__name__}: {exc}", path
            ) from exc
        flags = validate_keep_flags(keep, len(group_rewards), entry)
        return flags, validate_filter_state(state, entry)

    def open_episodes(self, rows: list[dict[str, Any]], isolation: Isolation | None = None) -> list[int]:
        """Make one environment per row with the harness's `make_env` (candidate faults classified), honouring
        the env module's isolation declaration (`harness.env`; `isolation` overrides it)."""
        if self._make_env is None or self.env_entry is None:
            raise ValueError("this harness declares no env: it has no episodes")
        ids = []
        for row in rows:
            try:
                make_env = self._make_env
                declared, reset = env_declaration(make_env, str(self.env_entry))
                if (isolation or declared) == "fresh_module":
                    make_env = load_function(self.root, self.env_entry)
                    reset = env_declaration(make_env, str(self.env_entry))[1]
                if reset is not None:
                    reset()
                env = make_env(row)
            except _CANDIDATE_RAISES as exc:
                raise CandidateCodeError(
                    Outcome.CANDIDATE_ERROR, f"{self.env_entry} raised {type(exc).__name__}: {exc}", self.env_entry.path
                ) from exc
            self._next_episode += 1
            self._episodes[self._next_episode] = env
            ids.append(self._next_episode)
        return ids

    def env_calls(self, calls: list[tuple[int, str, dict[str, Any]]]) -> list[object]:
        """Run each `(episode, tool, arguments)` call in its episode's environment; return the raw results."""
        assert self.env_entry is not None, "env_calls without an env"
        out: list[object] = []
        for episode, tool, arguments in calls:
            env = self._episodes[episode]
            try:
                out.append(env.call(tool, arguments))
            except _CANDIDATE_RAISES as exc:
                raise CandidateCodeError(
                    Outcome.CANDIDATE_ERROR,
                    f"{self.env_entry}: {tool} call raised {type(exc).__name__}: {exc}",
                    self.env_entry.path,
                ) from exc
        return out

    def close_episodes(self, episodes: list[int]) -> None:
        """Drop the environments of finished episodes."""
        for episode in episodes:
            self._episodes.pop(episode, None)

    def close(self) -> None:
        """Nothing to release in-process."""
        self._episodes.clear()
