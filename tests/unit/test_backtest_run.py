"""`run_backtest` end to end in-process (mode none): grading, idempotence, classified failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnostics.backtest import Verdict
from diagnostics.schema import Rollout, write_rollouts
from harness.failures import Outcome
from sandboxes.backtest import REPORT_FILE, find_length_budget, run_backtest

STRICT_REWARD = """
import re
from pathlib import Path

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    with open(Path(__file__).parent / "calls.txt", "a") as fh:  # side-effect counter for the test
        fh.write("x")
    found = re.findall(r"<ans>(.*?)</ans>", solution_str)
    ok = float(len(found) == 1 and found[0].strip() == ground_truth)
    return {"score": ok, "acc": ok}
"""
LENIENT_REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0 if ground_truth in solution_str else 0.0
"""
FILTER = """
def filter_groups(group_rewards, state):
    state["calls"] = state.get("calls", 0) + 1
    return [max(g) > min(g) for g in group_rewards]
"""


def make_harness(root: Path, reward: str, *, group_filter: str | None = None, max_new_tokens: int = 64) -> Path:
    for rel, text in {
        "data/train.jsonl": '{"prompt": "12+21=>", "ground_truth": "33"}\n',
        "data/val.jsonl": '{"prompt": "1+2=>", "ground_truth": "3"}\n',
        "eval/strict.py": "def score(solution_str, ground_truth):\n    return 0.0\n",
        "harness/reward.py": reward,
        "harness/trainer.yaml": f"max_new_tokens: {max_new_tokens}\nlr: 1.0e-4\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    manifest = {
        "name": root.name,
        "domain": "arithmetic",
        "data": {"train": "data/train.jsonl", "val": "data/val.jsonl"},
        "reward": "harness/reward.py:compute_score",
        "eval": {"strict": "eval/strict.py:score"},
        "trainer": {"backend": "local", "config": "harness/trainer.yaml"},
        "surface": {"editable": ["harness/"], "protected": ["eval/", "data/val.jsonl", "evotrainer.yaml"]},
        "answer": {"pattern": "<ans>(.*?)</ans>", "compare": "integer"},
    }
    if group_filter is not None:
        (root / "harness/filters.py").write_text(group_filter)
        manifest["group_filter"] = "harness/filters.py:filter_groups"
    (root / "evotrainer.yaml").write_text(json.dumps(manifest))  # JSON is valid YAML
    return root


def make_cached_run(run: Path, n_groups: int = 10) -> Path:
    texts = [("<ans>33</ans>", 1.0), ("12+21 => <ans>33</ans>", 1.0), ("33 " * 12, 0.0), ("<ans>34</ans>", 0.0)]
    rows = [
        Rollout(
            "v0",
            0,
            "train",
            f"p{g}",
            f"g{g}",
            i,
            "12+21=>",
            t,
            "33",
            1.0 + 0.01 * len(t.split()),
            strict_score=s,
            response_tokens=8 * (i + 1),
        )
        for g in range(n_groups)
        for i, (t, s) in enumerate(texts)
    ]
    write_rollouts(run / "rollouts" / "train" / "step_0.jsonl", rows)
    (run / "config.json").write_text(json.dumps({"trainer": {"max_new_tokens": 128}}))
    return run


def test_strict_candidate_passes_and_second_call_does_not_rerun(tmp_path: Path) -> None:
    cand = make_harness(tmp_path / "strict", STRICT_REWARD, group_filter=FILTER, max_new_tokens=12)
    run = make_cached_run(tmp_path / "run")
    out = tmp_path / "bt"
    first = run_backtest(cand, run, out, mode="none")
    assert first.outcome is Outcome.OK and first.verdict is Verdict.PASS, first.reasons
    m = first.metrics
    assert m is not None and m.rank_violations_before > 0 and m.rank_violations_after == 0
    assert m.kept_sample_ratio == 1.0 and m.max_new_tokens_before == 128 and m.max_new_tokens_after == 12
    assert m.cut_successes == 10 and m.newly_truncated == 30  # responses of 16+ tokens exceed the new cap of 12
    assert first.hack is not None and first.hack.passed
    calls = (cand / "harness" / "calls.txt").read_text()
    # every cached rollout + every exploit and its reference: 14 templates written for 3 problems of the run
    assert len(calls) == 40 + 2 * 14 * 3
    assert (out / REPORT_FILE).is_file()
    second = run_backtest(cand, run, out, mode="none")
    assert second == first
    assert (cand / "harness" / "calls.txt").read_text() == calls  # nothing re-ran


def test_lenient_candidate_fails_on_hack_corpus(tmp_path: Path) -> None:
    cand = make_harness(tmp_path / "lenient", LENIENT_REWARD)
    result = run_backtest(cand, make_cached_run(tmp_path / "run"), tmp_path / "bt", mode="none")
    assert result.verdict is Verdict.FAIL
    assert result.hack is not None and not result.hack.passed
    assert any("hack corpus" in r for r in result.reasons)


@pytest.mark.parametrize(
    ("reward", "needle"),
    [
        ("def compute_score(*a, **k):\n    raise RuntimeError('boom')\n", "boom"),
        ("def compute_score(*a, **k):\n    return 'yes'\n", "return a float"),
        ("import nonexistent_module_xyz\n", "nonexistent_module_xyz"),
    ],
)
def test_candidate_errors_are_classified_not_crashes(tmp_path: Path, reward: str, needle: str) -> None:
    cand = make_harness(tmp_path / "bad", reward)
    out = tmp_path / "bt"
    result = run_backtest(cand, make_cached_run(tmp_path / "run"), out, mode="none")
    assert result.outcome is Outcome.CANDIDATE_ERROR and result.verdict is Verdict.FAIL
    assert needle in result.message and result.error_path == "harness/reward.py"
    assert result.metrics is None
    assert json.loads((out / REPORT_FILE).read_text())["outcome"] == "candidate_error"


def test_invalid_manifest_is_a_candidate_error(tmp_path: Path) -> None:
    cand = tmp_path / "nomanifest"
    cand.mkdir()
    result = run_backtest(cand, make_cached_run(tmp_path / "run"), tmp_path / "bt", mode="none")
    assert result.outcome is Outcome.CANDIDATE_ERROR and result.error_path == "evotrainer.yaml"


def test_find_length_budget_nested() -> None:
    assert find_length_budget({"actor_rollout_ref": {"rollout": {"response_length": 512}}}) == 512
    assert find_length_budget({"max_new_tokens": 32, "x": {"max_new_tokens": 1}}) == 32
    assert find_length_budget({"lr": 0.1}) is None


def test_unchanged_hackable_reward_is_not_held_against_a_candidate_of_another_factor(tmp_path: Path) -> None:
    """A length-budget candidate keeps the incumbent's (hackable) reward: that exposure is pre-existing."""
    base = make_harness(tmp_path / "base", LENIENT_REWARD, max_new_tokens=16)
    cand = make_harness(tmp_path / "cand", LENIENT_REWARD, max_new_tokens=64)
    run = make_cached_run(tmp_path / "run")
    result = run_backtest(cand, run, tmp_path / "bt", mode="none", base_dir=base)
    assert result.verdict is not Verdict.FAIL
    assert any("pre-existing" in r for r in result.reasons)
    changed = run_backtest(
        cand, run, tmp_path / "bt2", mode="none", base_dir=make_harness(tmp_path / "b2", STRICT_REWARD)
    )
    assert changed.verdict is Verdict.FAIL
