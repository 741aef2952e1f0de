"""A candidate that only moves settings back into their documented range is held to non-inferiority.

`agent.decisions.knobs.range_restoration` says which candidates qualify (read from the real scenario harnesses:
cold-sampling's defective and oracle forms differ in `temperature` only, 0.1 against the documented
[0.7, 1.2]); `agent.decisions.evidence` (`classify_restoration`, `replicate_check`) decides them. Every
other candidate keeps the superiority rule, so a null candidate is never helped by this.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from scenario_cache import scenario_dir

from agent.decisions.evidence import Evaluation, classify_outcome, classify_restoration, decide, replicate_check
from agent.decisions.knobs import range_restoration
from diagnostics.stats import paired_bootstrap
from harness.manifest import load_harness

SETTINGS = "harness/trainer.yaml"
MIN_EFFECT = 0.05


def _cold(form: str) -> Path:
    """A form of the cold-sampling scenario (temperature 0.1; its oracle 1.0, inside the documented range)."""
    return scenario_dir("cold-sampling", form)


def _scores(n_right: int, n: int = 300) -> list[float]:
    return [1.0] * n_right + [0.0] * (n - n_right)


def _swapped(n_right: int, lost: int, gained: int, n: int = 300) -> list[float]:
    """`_scores(n_right)` with the first `lost` right prompts now wrong and the next `gained` wrong ones right."""
    return [0.0] * lost + [1.0] * (n_right - lost + gained) + [0.0] * (n - n_right - gained)


def _set(folder: Path, key: str, value: str) -> None:
    path = folder / SETTINGS
    lines = path.read_text().splitlines()
    hit = [i for i, line in enumerate(lines) if line.startswith(f"{key}:")]
    if hit:
        lines[hit[0]] = f"{key}: {value}"
    else:
        lines.append(f"{key}: {value}")
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    parent, cand = tmp_path / "parent", tmp_path / "cand"
    shutil.copytree(_cold("defective"), parent)
    shutil.copytree(_cold("defective"), cand)
    return parent, cand


def _restored(parent: Path, cand: Path, changed: list[str] | None = None) -> tuple[str, ...]:
    return range_restoration(load_harness(parent), load_harness(cand), "local", changed or [SETTINGS])


def test_the_scenarios_fix_is_a_restoration(pair: tuple[Path, Path]) -> None:
    assert _restored(_cold("defective"), _cold("oracle")) == ("temperature",)
    parent, cand = pair
    _set(cand, "temperature", "0.8")  # any in-range value, not only the default
    assert _restored(parent, cand) == ("temperature",)


def test_anything_more_or_else_is_not_a_restoration(pair: tuple[Path, Path]) -> None:
    parent, cand = pair
    _set(cand, "temperature", "0.5")  # still outside [0.7, 1.2]
    assert _restored(parent, cand) == ()
    _set(cand, "temperature", "1.0")
    _set(cand, "lr", "2.0e-4")  # an in-range setting moved too
    assert _restored(parent, cand) == ()
    _set(cand, "lr", "1.0e-4")
    _set(cand, "warmstart_steps", "10")  # a setting that is no knob
    assert _restored(parent, cand) == ()
    _set(cand, "warmstart_steps", "1000")
    assert _restored(parent, cand) == ("temperature",)
    assert _restored(parent, cand, [SETTINGS, "harness/reward.py"]) == ()  # another file changed
    assert _restored(_cold("oracle"), _cold("defective")) == ()  # moving a setting out of its range
    assert _restored(parent, parent) == ()  # a null candidate changes nothing: it is never a restoration


def test_a_candidate_whose_harness_does_not_load_is_no_restoration(pair: tuple[Path, Path]) -> None:
    from agent.context import Context
    from agent.decisions.candidates import _restored as flag

    parent, cand = pair
    (cand / "evotrainer.yaml").write_text("name: [unclosed\n")
    assert flag(Context(), load_harness(parent), cand, [SETTINGS]) == ()
    assert flag(Context(), load_harness(parent), _cold("oracle"), [SETTINGS]) == ("temperature",)


def test_a_setting_the_runs_do_not_read_is_no_restoration(pair: tuple[Path, Path]) -> None:
    parent, cand = pair
    _set(parent, "max_turn_tokens", "500")  # read by agentic episodes only; this harness is single-turn
    _set(cand, "max_turn_tokens", "32")
    _set(parent, "temperature", "1.0")
    _set(cand, "temperature", "1.0")
    assert _restored(parent, cand) == ()


def test_non_inferiority_merges_a_small_gain_the_superiority_rule_calls_insufficient() -> None:
    small = paired_bootstrap(_scores(260), _swapped(260, 20, 29))  # +0.030, CI reaching below 0
    assert small.ci_low < 0 < small.delta < MIN_EFFECT
    assert classify_outcome(small, [], [], MIN_EFFECT) == "insufficient"
    assert classify_restoration(small, [], [], MIN_EFFECT) == "improvement"
    tie = paired_bootstrap(_scores(260), _scores(260))
    assert classify_restoration(tie, [], [], MIN_EFFECT) == "insufficient"  # a gain is still needed
    loss = paired_bootstrap(_scores(260), _scores(230))
    assert classify_restoration(loss, [], [], MIN_EFFECT) == "regression"
    noisy = paired_bootstrap([1.0, 0.0] * 10, [0.0, 1.0] * 9 + [1.0, 1.0])  # +0.05 on 20 prompts: CI too wide
    assert noisy.delta > 0 and noisy.ci_low <= -MIN_EFFECT
    assert classify_restoration(noisy, [], [], MIN_EFFECT) == "insufficient"


def test_the_decision_says_which_rule_decided() -> None:
    cmp = paired_bootstrap(_scores(260), _swapped(260, 20, 29))
    restoring = Evaluation(candidate_id="c1", run_ok=True, message="", comparison=cmp,
                           outcome_class=classify_restoration(cmp, [], [], MIN_EFFECT), train_reward=0.5,
                           control_train_reward=0.5, restoration=True)  # fmt: skip
    [d] = decide([restoring], "evotrainer")
    assert d["decision"] == "merge" and "non-inferiority" in d["rationale"]
    plain = Evaluation(candidate_id="c2", run_ok=True, message="", comparison=cmp,
                       outcome_class=classify_outcome(cmp, [], [], MIN_EFFECT), train_reward=0.5,
                       control_train_reward=0.5)  # fmt: skip
    [d] = decide([plain], "evotrainer")
    assert d["decision"] == "prune" and "non-inferiority" not in d["rationale"]


def _pair(control_right: int, cand_right: int) -> tuple[dict[str, float], dict[str, float]]:
    ids = [f"p{i}" for i in range(300)]
    return dict(zip(ids, _scores(control_right), strict=True)), dict(zip(ids, _scores(cand_right), strict=True))


def test_a_restoration_replicates_unless_a_fresh_seed_loses() -> None:
    first = _pair(259, 281)  # +0.073 (cold-sampling seed 1, iteration 2)
    tied = [_pair(277, 277)]  # its replicate tied
    assert not replicate_check(first, tied, [], [], MIN_EFFECT).confirmed  # superiority: every replicate > 0
    assert replicate_check(first, tied, [], [], MIN_EFFECT, restoration=True).confirmed
    lost = [_pair(277, 270)]
    assert not replicate_check(first, lost, [], [], MIN_EFFECT, restoration=True).confirmed


def test_a_code_constant_moved_back_into_its_declared_range_is_a_restoration(tmp_path: Path) -> None:
    """The reward's own knobs (`EVOTRAINER_KNOBS`) restore like trainer settings, and only that."""
    from harness.code_knobs import set_constant

    demo = Path(__file__).resolve().parents[2] / "examples" / "synth-fn"  # STEP_LIMIT = 12, safe [200, 20000]
    reward = "harness/reward.py"
    parent, cand = tmp_path / "parent", tmp_path / "cand"
    shutil.copytree(demo, parent)
    source = (parent / reward).read_text()

    def restored(text: str) -> tuple[str, ...]:
        shutil.rmtree(cand, ignore_errors=True)
        shutil.copytree(demo, cand)
        (cand / reward).write_text(text)
        return _restored(parent, cand, [reward])

    fixed = set_constant(source, "STEP_LIMIT", 2000)[0]
    assert restored(fixed) == ("STEP_LIMIT",)
    assert restored(set_constant(source, "STEP_LIMIT", 300)[0]) == ("STEP_LIMIT",)  # any in-range value
    assert restored(set_constant(source, "STEP_LIMIT", 100)[0]) == ()  # still below 200
    assert restored(set_constant(fixed, "PROGRAM_STEP_LIMIT", 40000)[0]) == ()  # an in-range knob moved too
    assert restored(fixed + "\n# and another edit\n") == ()
    assert restored(fixed.replace('"safe": [200, 20000]', '"safe": [1, 20000]', 1)) == ()  # the declaration too
    assert restored(source) == ()  # a null candidate
    (parent / reward).write_text(fixed)
    assert restored(source) == ()  # moving a constant out of its range
