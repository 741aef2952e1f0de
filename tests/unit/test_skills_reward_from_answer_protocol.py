"""Every reward a skill writes is generated from the manifest's declared answer protocol.

`strict-answer-extraction` must never pay ``<ans>45</ans>`` for ground truth ``045`` when the protocol says
``compare: exact``; on the demo it must judge like the demo's strict evaluator; without a declared protocol
a reward-writing skill does not apply, and says why.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

import pytest

from harness.calls import load_function
from harness.manifest import load_harness
from skills.patches import SkillPatchError, apply_skill, skill_fits
from skills.seeds import SEED_SKILLS
from skills.templates import ANSWER_PROTOCOL_MARK, TemplateError, render_answer_protocol

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "arithmetic"
SEEDS = {s.name: s for s in SEED_SKILLS}
REWARD_SKILLS = ("strict-answer-extraction", "dense-auxiliary-reward")


def _harness(tmp_path: Path, answer: str | None) -> Path:
    root = tmp_path / "h"
    shutil.copytree(DEMO, root)
    text = (root / "evotrainer.yaml").read_text()
    line = "answer: {pattern: '<ans>(.*?)</ans>', compare: integer, final: true}\n"
    (root / "evotrainer.yaml").write_text(text.replace(line, "" if answer is None else f"answer: {answer}\n"))
    return root


def _reward(tmp_path: Path, answer: str | None, skill: str = "strict-answer-extraction"):  # type: ignore[no-untyped-def]
    root = _harness(tmp_path, answer)
    harness = load_harness(root)
    applied = apply_skill(SEEDS[skill], root, harness)
    assert applied.files == ("harness/reward.py",)
    return lambda text, truth: load_function(root, harness.reward)("src", text, truth)["score"]


def test_exact_protocol_never_pays_a_leading_zero_near_miss(tmp_path: Path) -> None:
    reward = _reward(tmp_path, "{pattern: '<ans>(.*?)</ans>', compare: exact, final: true}")
    assert reward("<ans>045</ans>", "045") == 1.0
    assert reward("<ans>45</ans>", "045") == 0.0
    assert reward("<ans>045</ans> <ans>045</ans>", "045") == 0.0  # one answer only
    assert reward("<ans>045</ans> and more", "045") == 0.0  # final: nothing after it


def test_letters_and_an_answer_line_need_no_tags(tmp_path: Path) -> None:
    reward = _reward(tmp_path, r"{pattern: 'ANSWER: (\S+)', compare: exact, final: true}")
    assert reward("reversing... ANSWER: olleh", "olleh") == 1.0
    assert reward("ANSWER: hello", "olleh") == 0.0
    assert reward("<ans>olleh</ans>", "olleh") == 0.0
    source = (tmp_path / "h" / "harness" / "reward.py").read_text()
    assert "<ans>" not in source and "ANSWER_PATTERN = 'ANSWER: (\\\\S+)'" in source
    dense = _reward(tmp_path / "d", r"{pattern: 'ANSWER: (\S+)', compare: exact}", "dense-auxiliary-reward")
    assert dense("ANSWER: olleh", "olleh") == 1.0
    assert 0.0 < dense("ANSWER: ollex", "olleh") < 0.2  # a near miss earns a little, never close to a right answer
    assert dense("no answer", "olleh") == 0.0


def test_number_protocol_uses_the_declared_tolerance(tmp_path: Path) -> None:
    reward = _reward(tmp_path, "{pattern: '= ([-0-9.e]+)$', compare: number, tolerance: 0.01}")
    assert reward("x = 3.141", "3.14") == 1.0
    assert reward("x = 3.2", "3.14") == 0.0
    assert reward("x = nan", "3.14") == 0.0


def test_on_the_demo_the_generated_reward_judges_like_its_strict_evaluator(tmp_path: Path) -> None:
    reward = _reward(tmp_path, "{pattern: '<ans>(.*?)</ans>', compare: integer, final: true}")
    harness = load_harness(DEMO)
    strict = load_function(harness.root, harness.strict_eval)
    rows = [json.loads(x) for x in (DEMO / "data" / "warmstart.jsonl").read_text().splitlines()[:300]]
    rng = random.Random(0)
    texts: list[tuple[str, str]] = []
    for row in rows:
        truth = re.findall(r"<ans>(.*?)</ans>", row["response"])[-1]
        good = row["response"]
        texts += [(good, truth), (good + "1;2", truth), (good + good, truth), ("<ans></ans>", truth)]
        texts += [(good.replace(f"<ans>{truth}</ans>", f"<ans>{int(truth) + rng.randint(1, 9)}</ans>"), truth)]
        texts += [(good.replace("<ans>", "", 1), truth), (f"  {good}  ", truth)]
    disagree = [(t, g) for t, g in texts if reward(t, g) != strict(t, g)]
    assert not disagree, disagree[:5]


def test_without_a_declared_protocol_reward_skills_do_not_fit_and_say_why(tmp_path: Path) -> None:
    root = _harness(tmp_path, None)
    harness = load_harness(root)
    for name in REWARD_SKILLS:
        assert "declares no answer protocol" in (skill_fits(SEEDS[name], harness) or "")
        with pytest.raises(SkillPatchError, match=r"declares no answer protocol.*add e\.g\. answer:"):
            apply_skill(SEEDS[name], root, harness)
    assert (root / "harness" / "reward.py").read_text() == (DEMO / "harness" / "reward.py").read_text()
    assert skill_fits(SEEDS["raise-length-budget"], harness) is None
    assert skill_fits(SEEDS["strict-answer-extraction"], load_harness(DEMO)) is None


def test_no_seed_reward_assumes_a_tag_or_a_number_format() -> None:
    for name in REWARD_SKILLS:
        content = json.loads(SEEDS[name].patch)[0]["content"]
        assert "<ans>" not in content and "int(str(ground_truth)" not in content
        assert content.count(ANSWER_PROTOCOL_MARK) == 1
    with pytest.raises(TemplateError, match="exactly once"):
        render_answer_protocol("no mark", load_harness(DEMO).manifest.answer)  # type: ignore[arg-type]
