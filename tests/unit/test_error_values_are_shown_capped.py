"""A value inside an error message is its repr, capped, and never runs the value's own code.

A reward returning the text "1.0" was reported as `<str object at 0x…>`; now as `'1.0'`. The rendering
(`harness.failures.shown`) is the one every message uses: candidate values, manifest and trainer-setting
values, CLI arguments.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.calls import RewardContractError, validate_reward
from harness.failures import SHOWN_CHARS, shown
from harness.manifest import HarnessError, load_harness

DEMO = Path(__file__).resolve().parents[2] / "examples" / "arithmetic"


class Hostile(str):
    """A str whose repr and len misbehave: rendering it must not call them."""

    def __repr__(self) -> str:
        raise RuntimeError("repr called")

    def __len__(self) -> int:
        raise RuntimeError("len called")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1.0", "'1.0'"),
        (b"1.0", "b'1.0'"),
        (None, "None"),
        (True, "True"),
        (1.5, "1.5"),
        (10**400, "<an integer of about 10^400>"),
        ([1, "a"], "[1, 'a']"),
        ((1,), "(1,)"),
        ({"score": "1"}, "{'score': '1'}"),
        (object(), "<object object>"),
    ],
)
def test_a_value_is_shown_by_its_repr(value: object, expected: str) -> None:
    assert shown(value) == expected


def test_a_hostile_value_runs_none_of_its_own_code() -> None:
    assert shown(Hostile("1.0")) == "'1.0'"
    assert shown([Hostile("x")]) == "['x']"


def test_long_values_are_capped_and_say_how_long_they_were() -> None:
    text = shown("x" * 10_000)
    assert len(text) <= SHOWN_CHARS and text.endswith("(10000 characters)"), text
    many = shown(list(range(1000)))
    assert len(many) <= SHOWN_CHARS and "…" in many, many
    nested = shown([[[["deep"]]]])
    assert "deep" not in nested and "<list object>" in nested


def test_a_reward_returning_text_is_reported_with_its_value() -> None:
    with pytest.raises(RewardContractError) as info:
        validate_reward("1.0", "harness/reward.py:compute_score")
    message = str(info.value)
    assert "returned score '1.0': type str is not a number" in message, message
    assert "object at" not in message


def test_a_bad_manifest_value_is_shown(tmp_path: Path) -> None:
    import shutil

    harness = Path(shutil.copytree(DEMO, tmp_path / "h", ignore=shutil.ignore_patterns("__pycache__")))
    manifest = harness / "evotrainer.yaml"
    manifest.write_text(manifest.read_text().replace("name: arithmetic", "name: 'my task!'"))
    with pytest.raises(HarnessError, match=r"field 'name': .*\(got 'my task!'\)"):
        load_harness(harness)
