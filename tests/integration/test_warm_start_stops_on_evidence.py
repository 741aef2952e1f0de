"""The warm start stops on evidence, not on a step count a newcomer cannot know.

The skeleton's `warmstart_steps: 300` gave a "reverse a word" task made with `evotrainer init` a policy that
never wrote its answer (strict 0.050 -> 0.000, exit 0). Now the warm start reads the greedy answer-format
rate on the task's training prompts after its steps and trains further rounds below `warmstart_min_format`,
up to `warmstart_max_steps`; the run records what it reached, and says plainly when the cap stopped it.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _evotrainer(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVOTRAINER_CACHE": str(cwd / "cache"), "COLUMNS": "200"}
    env.pop("EVOTRAINER_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=1500
    )


def letters_task(tmp_path: Path) -> Path:
    """`evotrainer init` plus the user's own data: reverse a word of 4-9 letters (no hand tuning)."""
    folder = tmp_path / "reverse"
    done = _evotrainer("init", str(folder), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    rng = random.Random(5)
    words = sorted({"".join(rng.choice(LETTERS) for _ in range(rng.randint(4, 9))) for _ in range(4000)})
    rng.shuffle(words)

    def row(word: str, i: int, split: str) -> dict[str, str]:
        return {"prompt": f"{word}>", "ground_truth": word[::-1], "data_source": f"len{len(word)}",
                "prompt_id": f"{split}-{i}"}  # fmt: skip

    splits = {"train": words[:600], "val": words[600:720]}
    for split, chosen in splits.items():
        lines = [json.dumps(row(w, i, split)) for i, w in enumerate(chosen)]
        (folder / "data" / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    warm = [json.dumps({"prompt": f"{w}>", "response": f"<answer>{w[::-1]}</answer>"}) for w in words[720:3720]]
    (folder / "data" / "warmstart.jsonl").write_text("\n".join(warm) + "\n")
    weights = ", ".join(f"len{n}: 1.0" for n in range(4, 10))
    (folder / "harness" / "data.yaml").write_text("weights: {" + weights + "}\n")
    return folder


def _summary(folder: Path) -> dict:
    [found] = folder.rglob("summary.json")
    return json.loads(found.read_text())


def test_a_letters_task_from_init_writes_its_answer_format_after_the_warm_start(tmp_path: Path) -> None:
    folder = letters_task(tmp_path)
    done = _evotrainer("train", "--harness", str(folder), "--steps", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = _summary(tmp_path / "runs")
    assert summary["warmstart_format_rate"] >= 0.5, summary
    assert summary["warmstart_steps"] >= 300
    metrics = [json.loads(x) for x in next(Path(tmp_path).rglob("metrics.jsonl")).read_text().splitlines()]
    assert metrics[0]["data"]["val/format_rate"] > 0.3, metrics[0]
    assert not summary.get("warnings"), summary["warnings"]


def test_a_warm_start_cut_by_its_cap_says_so_and_a_second_run_reuses_what_it_reached(tmp_path: Path) -> None:
    folder = letters_task(tmp_path)
    settings = folder / "harness" / "trainer.yaml"
    text = re.sub(r"^warmstart_steps: .*$", "warmstart_steps: 4", settings.read_text(), flags=re.M)
    settings.write_text(text + "warmstart_max_steps: 12\nwarmstart_min_format: 0.95\n")
    done = _evotrainer("train", "--harness", str(folder), "--steps", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout + done.stderr
    summary = _summary(tmp_path / "runs")
    assert summary["warmstart_steps"] == 12.0  # three rounds of 4: below the threshold after each
    assert summary["warmstart_format_rate"] < 0.95
    [warning] = [w for w in summary["warnings"] if "warm start stopped at its cap" in w]
    assert "warmstart_max_steps" in warning and "<answer>" in warning
    assert "warm start stopped at its cap" in out  # the CLI says it too
    [log_file] = (tmp_path / "runs").rglob("train.log")
    log = log_file.read_text()
    assert log.count("more") == 2 and "answer-format rate" in log
    again = _evotrainer("train", "--harness", str(folder), "--steps", "1", "--out", "second", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    second = _summary(tmp_path / "second")
    assert second["warmstart_cache_hit"] == 1.0 and second["warmstart_steps"] == 12.0
    assert second["warmstart_format_rate"] == summary["warmstart_format_rate"]
