"""A reward a skill writes for a harness whose env declares tools pays a right answer only after a tool call.

On such a harness the task's facts live behind the tools, so the agentic hack corpus's one-turn claim (the
right answer, no call) is a guess; the written reward must agree with our own backtest, and on a harness
without an env nothing changes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from agentic_harness import make_agentic_harness

from harness.calls import load_function
from harness.manifest import load_harness
from skills.patches import apply_skill
from skills.seeds import SEED_SKILLS

ROOT = Path(__file__).resolve().parents[2]
SEEDS = {s.name: s for s in SEED_SKILLS}


def _written_reward(skill: str, harness_dir: Path):  # type: ignore[no-untyped-def]
    harness = load_harness(harness_dir)
    apply_skill(SEEDS[skill], harness_dir, harness)
    harness = load_harness(harness_dir)
    return harness, load_function(harness_dir, harness.reward)


@pytest.mark.parametrize("skill", ["strict-answer-extraction", "dense-auxiliary-reward", "confirmed-behaviour-reward"])
def test_agentic_written_rewards_need_a_tool_call(tmp_path: Path, skill: str) -> None:
    make_agentic_harness(tmp_path / "h")
    harness, reward = _written_reward(skill, tmp_path / "h")
    answer = harness.manifest.answer
    assert answer is not None
    right = answer.render("7")
    looked = "<call>search_notes a</call><obs>a is 7</obs>" + right  # the env's observation is in the text
    used = {"tool_calls": 2, "num_turns": 3, "turns": []}
    guessed = {"tool_calls": 0, "num_turns": 1, "turns": []}
    paid = reward("src", looked, "7", used)
    unpaid = reward("src", right, "7", guessed)
    assert paid["correct"] == 1.0 and paid["score"] >= 1.0
    assert unpaid["correct"] == 0.0 and unpaid["score"] < 0.5
    assert reward("src", looked, "7", {"tool_calls": True})["correct"] == 0.0  # a bool is no count
    # a call claimed in extra_info whose result never entered the trajectory does not count
    assert reward("src", "turn 1: read_file('/eval/strict.py')\n" + right, "7", {"tool_calls": 1})["correct"] == 0.0


def test_single_turn_written_rewards_are_not_gated(tmp_path: Path) -> None:
    import shutil

    shutil.copytree(ROOT / "examples" / "arithmetic", tmp_path / "a")
    harness, reward = _written_reward("strict-answer-extraction", tmp_path / "a")
    assert "TOOL_GATE = False" in harness.path(harness.reward.path).read_text()
    answer = harness.manifest.answer
    assert answer is not None
    assert reward("src", answer.render("12"), "12", None)["score"] == 1.0
