"""A harness from `evotrainer init`, turned into another task, runs with the core unchanged.

The skeleton is changed the way a new user would: reversing letter strings (`reverse abc:` ->
`ANSWER: cba`), an ``ANSWER:`` answer protocol instead of tags, no declared special tokens, its own data
sources. Then `train`, `diagnose`, `backtest` and a short `run` go through the real CLI (subprocesses,
real torch training, the process sandbox, git, SQLite). Kept tiny so it fits a loaded 2-core box.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
LENGTHS = (3, 4, 5)
LETTERS = "abcdef"  # a small alphabet: the tiny policy learns to reverse it in a 500-step warm start

STRICT = '''
def score(solution_str, ground_truth):
    """1.0 when the response ends with exactly one 'ANSWER: <text>' line whose text is the ground truth."""
    text = solution_str.strip()
    if text.count("ANSWER: ") != 1 or "\\n" in text.partition("ANSWER: ")[2]:
        return 0.0
    return float(text.partition("ANSWER: ")[2].strip() == ground_truth)
'''
# v0 reward with a realistic defect, a format gate: its answer pattern allows at most three letters, so it
# fails every correct answer of the longer strings (strict-correct, unrewarded).
REWARD = '''
import re

_ANSWER = re.compile(r"ANSWER: ([a-z]{1,3})$")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """1.0 for a final 'ANSWER: <reversed>' line."""
    match = _ANSWER.search(solution_str.strip())
    ok = match is not None and match.group(1) == ground_truth
    return {"score": float(ok), "formatted": float(match is not None)}
'''
# A candidate reward that is hackable: it pays the reversed string wherever it appears (answer spam pays).
LENIENT = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """1.0 when the reversed string appears anywhere in the response."""
    return float(ground_truth in solution_str)
'''


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVOTRAINER_CACHE": str(cwd / "cache"), "COLUMNS": "200"}
    env.pop("EVOTRAINER_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def _word(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(LETTERS) for _ in range(n))


def make_reversal_task(harness: Path) -> None:
    """Rewrite the init skeleton into a string-reversal task (data, strict evaluator, reward, manifest)."""
    rng = random.Random(0)
    rows: dict[str, list[dict[str, str]]] = {"train": [], "val": []}
    for n in LENGTHS:
        for split, count in (("train", 60), ("val", 15)):
            for i in range(count):
                w = _word(rng, n)
                rows[split].append(
                    {"prompt": f"reverse {w}:", "ground_truth": w[::-1], "data_source": f"rev/len{n}",
                     "prompt_id": f"{split}-{n}-{i}"}
                )  # fmt: skip
    warm = []
    for _ in range(2000):
        w = _word(rng, rng.choice(LENGTHS))
        out = w[::-1]
        if len(w) >= 5 and rng.random() < 0.5:  # a habit the policy can unlearn: the first two letters swapped
            out = out[1] + out[0] + out[2:]
        warm.append({"prompt": f"reverse {w}:", "response": f"ANSWER: {out}"})
    for name, data in (*rows.items(), ("warmstart", warm)):
        (harness / "data" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data))
    (harness / "eval" / "strict.py").write_text(STRICT)
    (harness / "harness" / "reward.py").write_text(REWARD)
    weights = ", ".join(f"rev/len{n}: 1.0" for n in LENGTHS)
    (harness / "harness" / "data.yaml").write_text(f"weights: {{{weights}}}\n")
    trainer = yaml.safe_load((harness / "harness" / "trainer.yaml").read_text())
    trainer.update(lr=1.0e-4, max_new_tokens=16, warmstart_steps=500, val_every=4, save_every=4)
    (harness / "harness" / "trainer.yaml").write_text(yaml.safe_dump(trainer))
    manifest = yaml.safe_load((harness / "evotrainer.yaml").read_text())
    manifest.pop("special_tokens")
    manifest.update(name="reverse", domain="strings")
    manifest["answer"] = {"pattern": r"ANSWER: (\S+)", "compare": "exact", "final": True}
    (harness / "evotrainer.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))


def test_init_then_a_letters_task_trains_diagnoses_backtests_and_runs(tmp_path: Path, git_available: None) -> None:
    harness = tmp_path / "reverse"
    made = cli("init", str(harness), cwd=tmp_path)
    assert made.returncode == 0, made.stdout + made.stderr
    assert cli("init", str(harness), cwd=tmp_path).returncode == 2  # never overwrites a harness
    make_reversal_task(harness)

    run_dir = tmp_path / "runs" / "v0"
    trained = cli("train", "--harness", str(harness), "--steps", "8", "--out", str(run_dir), cwd=tmp_path)
    assert trained.returncode == 0, trained.stdout + trained.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["outcome"] == "ok" and summary["steps_done"] == 8
    config = json.loads((run_dir / "config.json").read_text())
    assert set(LETTERS + "ANSWER") <= set(config["vocab"]) and "<ans>" not in config["vocab"]
    assert config["answer"]["pattern"] == r"ANSWER: (\S+)"
    assert config["data_selection"]["weights"] == {f"rev/len{n}": 1.0 for n in LENGTHS}
    rollouts = [json.loads(x) for x in (run_dir / "rollouts" / "val" / "step_0.jsonl").read_text().splitlines()]
    assert any(r["strict_score"] == 1.0 for r in rollouts) and all("ANSWER" in r["response"] for r in rollouts[:5])

    diagnosed = cli("diagnose", str(run_dir), "--json", cwd=tmp_path)
    assert diagnosed.returncode == 0, diagnosed.stderr
    report = json.loads(diagnosed.stdout)
    assert set(report["metrics"]) >= {"strict_acc", "dead_group_ratio"}
    assert {f"source_groups/rev/len{n}" for n in LENGTHS} <= set(report["metrics"])

    candidate = tmp_path / "lenient"
    shutil.copytree(harness, candidate)
    (candidate / "harness" / "reward.py").write_text(LENIENT)
    backtested = cli(
        "backtest", "--harness", str(candidate), "--rollouts", str(run_dir), "--sandbox", "process", "--json",
        "--out", str(tmp_path / "bt"), cwd=tmp_path,
    )  # fmt: skip
    result = json.loads(backtested.stdout)
    assert result["outcome"] == "ok", result
    exploits = json.loads((tmp_path / "bt" / "report.json").read_text())["hack"]["per_item"]
    assert {"answer_spam", "many_candidates", "repeated_truth"} <= {e["kind"] for e in exploits}
    assert backtested.returncode == 1 and any("hack corpus rewarded above" in x for x in result["reasons"])
    assert result["metrics"]["n_strict"] > 0 and result["metrics"]["strict_right_failed_before"] > 0

    repo = tmp_path / "repo"
    session = cli(
        "run", "--harness", str(harness), "--repo", str(repo), "--sandbox", "process", "--iterations", "1",
        "--base-steps", "4", "--pilot-steps", "4", "--candidates", "1", "--replicates", "0",
        "--escalate-after", "0", "--max-steps", "40", cwd=tmp_path,
    )  # fmt: skip
    assert session.returncode == 0, session.stdout[-3000:] + session.stderr[-3000:]
    status = cli("status", cwd=tmp_path)
    assert status.returncode == 0 and "finished" in status.stdout, status.stdout + status.stderr
    branches = subprocess.run(
        ["git", "-C", str(repo), "branch", "--list", "evo/*", "--format=%(refname:short)"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    # the format gate fails correct answers: a reward skill is proposed, written for ANSWER: lines (the strict
    # reward, or the strict reward plus a dense term: the report also sees a discrete reward and dead groups)
    rewriters = ("-strict-answer-extraction", "-dense-auxiliary-reward")
    assert any(b.endswith(rewriters) for b in branches), branches
    for branch in branches:
        reward = subprocess.run(
            ["git", "-C", str(repo), "show", f"{branch}:harness/reward.py"], capture_output=True, text=True, check=True
        ).stdout
        assert "<ans>" not in reward  # whatever a skill wrote follows the declared protocol
        assert "ANSWER_PATTERN" in reward or not branch.endswith(rewriters), branch
        if "ANSWER_PATTERN" in reward:
            assert "ANSWER_PATTERN = 'ANSWER: (\\\\S+)'" in reward and "COMPARE = 'exact'" in reward
