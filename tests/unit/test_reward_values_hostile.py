"""Every hostile reward value is a contract refusal naming the file, the value and the range.

Huge ints (`10**400`) are checked before any float conversion (never an `OverflowError`), values beyond
the manifest's `reward_range` (default +-1e6) are refused so a float32 trainer never sees inf, and
in-process candidate objects whose methods raise are refusals too. A group filter that leaves an
unserialisable state, and candidate code calling `sys.exit()`, fail the candidate, not the trainer.
"""

from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path

import pytest

from harness.calls import InProcessCalls, RewardContractError, validate_reward
from harness.failures import CandidateCodeError, Outcome
from harness.manifest import DEFAULT_REWARD_BOUND, HarnessError, load_harness

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ENTRY = "harness/reward.py:compute_score"
RANGE = (-DEFAULT_REWARD_BOUND, DEFAULT_REWARD_BOUND)


class EvilInt(int):
    def __float__(self) -> float:
        raise RuntimeError("boom")

    def __abs__(self) -> int:
        raise RuntimeError("boom")


class EvilFloat(float):
    def __float__(self) -> float:
        return math.inf

    def __le__(self, other: object) -> bool:
        return True

    def __ge__(self, other: object) -> bool:
        return True


class EvilDict(dict):  # type: ignore[type-arg]
    def __getitem__(self, key: object) -> object:
        raise RuntimeError("boom")

    def __contains__(self, key: object) -> bool:
        return True


class EvilKey(str):
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("boom")

    __hash__ = str.__hash__


OUT_OF_RANGE = [
    10**400,
    -(10**400),
    10**5000,  # no decimal repr at all under Python's int-to-str limit
    {"score": 10**400},
    1e300,
    -1e300,
    1e6 + 1,
    math.nan,
    math.inf,
    -math.inf,
    {"score": 1e300},
    {"score": 0.5, "x": 10**400},
    {"score": 0.5, "x": 1e300},
    {"score": 0.5, "x": math.inf},
]
WRONG_TYPE = [None, "1.0", True, [1.0], {"hit": 1.0}, {"score": "1"}, {"score": 1.0, 3: 1.0}, object()]


def _id(value: object) -> str:
    if isinstance(value, int):
        return f"int-{value.bit_length()}-bits"
    return repr(value)[:30] if not isinstance(value, dict) else f"dict-{sorted(value)}"


@pytest.mark.parametrize("value", OUT_OF_RANGE, ids=_id)
def test_out_of_range_values_are_refusals_naming_file_value_and_range(value: object) -> None:
    with pytest.raises(RewardContractError) as info:
        validate_reward(value, ENTRY, RANGE)
    message = str(info.value)
    assert "harness/reward.py" in message
    assert "[-1e+06, 1e+06]" in message or "extra" in message
    assert len(message) < 600  # a 10**5000 never turns into 5000 digits of message


@pytest.mark.parametrize("value", WRONG_TYPE, ids=lambda v: type(v).__name__)
def test_wrong_types_are_refusals(value: object) -> None:
    with pytest.raises(RewardContractError, match=r"harness/reward\.py"):
        validate_reward(value, ENTRY, RANGE)


@pytest.mark.parametrize(
    "value", [EvilInt(10**400), EvilInt(3), EvilFloat(1e300), EvilDict(score=1.0), {EvilKey("score"): 1.0}]
)
def test_candidate_objects_with_hostile_methods_are_read_safely(value: object) -> None:
    try:
        score, _ = validate_reward(value, ENTRY, RANGE)
    except RewardContractError:
        return
    assert math.isfinite(score) and abs(score) <= DEFAULT_REWARD_BOUND  # read as its plain value, never inf


def test_the_declared_range_is_the_bound() -> None:
    assert validate_reward(5.0e6, ENTRY, (-1e7, 1e7)) == (5.0e6, {})
    with pytest.raises(RewardContractError, match=r"1\.5.*\[0, 1\].*reward_range"):
        validate_reward(1.5, ENTRY, (0.0, 1.0))
    assert validate_reward({"score": 1.0, "length": 300.0}, ENTRY, (0.0, 1.0)) == (1.0, {"length": 300.0})


def _copy(tmp_path: Path, extra_manifest: str = "") -> Path:
    dst = tmp_path / "h"
    shutil.copytree(EXAMPLES / "arithmetic-oracle", dst, ignore=shutil.ignore_patterns("__pycache__"))
    if extra_manifest:
        manifest = dst / "evotrainer.yaml"
        manifest.write_text(manifest.read_text() + extra_manifest)
    return dst


@pytest.mark.parametrize("bad", ["[1, 0]", "[-1.0e300, 1.0e300]", "[0, .nan]", "[0]", "'x'"])
def test_a_manifest_range_must_be_finite_and_ordered(tmp_path: Path, bad: str) -> None:
    with pytest.raises(HarnessError, match="reward_range"):
        load_harness(_copy(tmp_path, f"reward_range: {bad}\n"))


def test_the_manifest_range_is_read(tmp_path: Path) -> None:
    harness = load_harness(_copy(tmp_path, "reward_range: [-2.0, 2.0]\n"))
    assert harness.manifest.reward_range == (-2.0, 2.0)
    assert load_harness(_copy(tmp_path / "b")).manifest.reward_range == RANGE


def test_sys_exit_in_candidate_code_fails_the_candidate(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    (root / "harness" / "reward.py").write_text("import sys\ndef compute_score(*a, **k):\n    sys.exit(0)\n")
    calls = InProcessCalls(load_harness(root))
    item = {"data_source": "d", "solution_str": "x", "ground_truth": "1", "extra_info": {}}
    with pytest.raises(CandidateCodeError) as info:
        calls.compute_rewards([item])
    assert info.value.outcome is Outcome.CANDIDATE_ERROR and "SystemExit" in info.value.message
    (root / "harness" / "reward.py").write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(CandidateCodeError, match="SystemExit"):
        InProcessCalls(load_harness(root))


@pytest.mark.parametrize("state_code", ["state['f'] = lambda: 1", "state['big'] = 10**5000", "state['me'] = state"])
def test_a_filter_state_that_cannot_be_checkpointed_fails_the_candidate(tmp_path: Path, state_code: str) -> None:
    root = _copy(tmp_path)
    (root / "harness" / "filters.py").write_text(
        f"def filter_groups(group_rewards, state):\n    {state_code}\n    return [True] * len(group_rewards)\n"
    )
    calls = InProcessCalls(load_harness(root))
    with pytest.raises(CandidateCodeError) as info:
        calls.filter_groups([[0.0, 1.0]], {})
    assert info.value.outcome is Outcome.CANDIDATE_ERROR and "harness/filters.py" in info.value.path


def test_a_harness_without_a_filter_keeps_every_group_in_every_mode(tmp_path: Path) -> None:
    from sandboxes.calls import open_calls

    root = _copy(tmp_path)
    manifest = root / "evotrainer.yaml"
    manifest.write_text("".join(line for line in manifest.read_text().splitlines(True) if "group_filter" not in line))
    harness = load_harness(root)
    assert harness.group_filter is None
    for mode in ("none", "process"):
        calls = open_calls(harness, mode)
        try:
            assert calls.filter_groups([[0.0, 1.0], [1.0, 1.0]], {"k": 1}) == ([True, True], {"k": 1})
        finally:
            calls.close()


def test_big_ints_through_the_process_worker_are_classified(tmp_path: Path) -> None:
    """The worker's JSON carries 10**400 as is; a 10**5000 cannot be serialised: both fail the candidate."""
    from sandboxes.calls import open_calls

    root = _copy(tmp_path)
    item = {"data_source": "d", "solution_str": "x", "ground_truth": "1", "extra_info": {}}
    for value in ("10**400", "{'score': 10**400}", "10**5000"):
        (root / "harness" / "reward.py").write_text(f"def compute_score(*a, **k):\n    return {value}\n")
        harness = load_harness(root)
        calls = open_calls(harness, "process")
        try:
            try:
                raw = calls.compute_rewards([item])
            except CandidateCodeError as exc:
                assert exc.outcome is Outcome.CANDIDATE_ERROR, exc
                continue
        finally:
            calls.close()
        with pytest.raises(RewardContractError, match="reward_range"):
            validate_reward(raw[0], str(harness.reward), harness.manifest.reward_range)
    assert sys.get_int_max_str_digits() > 0


@pytest.mark.parametrize(
    "value",
    [
        {"score": 0.5, **{f"c{i}": 1.0 for i in range(65)}},
        {"score": 0.5, "x" * 101: 1.0},
        {"score": 0.5, "": 1.0},
    ],
    ids=["too-many-extras", "long-name", "empty-name"],
)
def test_extras_are_bounded_in_number_and_name(value: object) -> None:
    with pytest.raises(RewardContractError, match=r"harness/reward\.py"):
        validate_reward(value, ENTRY, RANGE)


def test_a_filter_state_that_grows_without_bound_fails_the_candidate(tmp_path: Path) -> None:
    from sandboxes.calls import open_calls

    root = _copy(tmp_path)
    (root / "harness" / "filters.py").write_text(
        "def filter_groups(group_rewards, state):\n    state['junk'] = 'x' * (2 << 20)\n"
        "    return [True] * len(group_rewards)\n"
    )
    for mode in ("none", "process"):
        calls = open_calls(load_harness(root), mode)
        try:
            with pytest.raises(CandidateCodeError, match="characters"):
                calls.filter_groups([[0.0, 1.0]], {})
        finally:
            calls.close()
