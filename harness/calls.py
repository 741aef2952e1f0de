"""How the trusted trainer calls candidate harness code (reward, group filter), and what it accepts back.

The trainer never calls candidate functions directly: it goes through a calls object with
``compute_rewards(batch) -> list[object]``, ``filter_groups(group_rewards, state) -> (keep, state)`` and
``close()``. `InProcessCalls` imports the harness files by path (``spec.sandbox == "none"``: trusted
harnesses, tests, the demo); `sandboxes.worker.SandboxCalls` (Docker container or child process) has the
same methods, and `sandboxes.calls.open_calls` picks one by sandbox mode. Either raises
`harness.failures.CandidateCodeError` when candidate code fails, so the run ends with a classified outcome
naming the harness file, never a traceback or a silent zero.

`validate_reward` is the pure reward contract check (verl's: a float, or a dict with ``"score"`` plus
numeric extras).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from harness.failures import CandidateCodeError, Outcome
from harness.manifest import EntryPoint, Harness


class RewardContractError(ValueError):
    """A reward returned something outside the contract; the message names `file.py:function`."""


class HarnessCalls(Protocol):
    """The three calls the trainer makes into candidate code."""

    def compute_rewards(self, batch: list[dict[str, Any]]) -> list[object]: ...

    def filter_groups(
        self, group_rewards: list[list[float]], state: dict[str, Any]
    ) -> tuple[list[bool], dict[str, Any]]: ...

    def close(self) -> None: ...


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def validate_reward(value: object, entry: str) -> tuple[float, dict[str, float]]:
    """Check one raw reward value against the contract and return `(score, components)`.

    Accepts an int/float, or a dict with a numeric ``"score"`` and numeric extras (components).

    Raises:
        RewardContractError: None, a string or other type, NaN/inf, a dict without ``"score"`` or with
            a non-numeric or non-finite extra; the message names `entry` (``harness/reward.py:compute_score``).
    """
    if isinstance(value, dict):
        if "score" not in value:
            raise RewardContractError(f"{entry} returned a dict without 'score' (keys: {sorted(value)[:8]})")
        score = _number(value["score"])
        if score is None:
            raise RewardContractError(f"{entry} returned 'score' of type {type(value['score']).__name__}")
        components: dict[str, float] = {}
        for key, extra in value.items():
            if key == "score":
                continue
            number = _number(extra)
            if number is None or not math.isfinite(number):
                raise RewardContractError(f"{entry} returned extra {key!r}={extra!r}: extras must be finite numbers")
            components[str(key)] = number
    else:
        number = _number(value)
        if number is None:
            raise RewardContractError(
                f"{entry} returned {type(value).__name__} {value!r:.40}; return a float or a dict with 'score'"
            )
        score, components = number, {}
    if not math.isfinite(score):
        raise RewardContractError(f"{entry} returned a non-finite score ({score})")
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


def load_function(root: Path, entry: EntryPoint) -> Callable[..., Any]:
    """Import `root/entry.path` as a fresh module and return `entry.function` from it.

    Raises:
        CandidateCodeError: the file fails to import or lacks the function.
    """
    path = root / entry.path
    name = "evotrainer_harness_" + "_".join(Path(entry.path).with_suffix("").parts)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CandidateCodeError(Outcome.CANDIDATE_ERROR, f"cannot import {entry.path}", entry.path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling inside the harness need the module registered
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # candidate code: any import-time failure is the candidate's, classified
        raise CandidateCodeError(
            Outcome.CANDIDATE_ERROR, f"importing {entry.path} raised {type(exc).__name__}: {exc}", entry.path
        ) from exc
    func = getattr(module, entry.function, None)
    if not callable(func):
        raise CandidateCodeError(
            Outcome.CANDIDATE_ERROR, f"{entry.path} has no function {entry.function!r}", entry.path
        )
    return func  # type: ignore[no-any-return]


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

    def compute_rewards(self, batch: list[dict[str, Any]]) -> list[object]:
        """Return the reward function's raw return value for each item of `batch` (unvalidated)."""
        out: list[object] = []
        for item in batch:
            try:
                out.append(
                    self._reward(item["data_source"], item["solution_str"], item["ground_truth"], item["extra_info"])
                )
            except Exception as exc:  # candidate code: re-raised as a classified failure, never a default
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
        except Exception as exc:  # candidate code: re-raised as a classified failure, never a default
            path = "" if self.filter_entry is None else self.filter_entry.path
            raise CandidateCodeError(
                Outcome.CANDIDATE_ERROR, f"{entry} raised {type(exc).__name__}: {exc}", path
            ) from exc
        return validate_keep_flags(keep, len(group_rewards), entry), state

    def close(self) -> None:
        """Nothing to release in-process."""
