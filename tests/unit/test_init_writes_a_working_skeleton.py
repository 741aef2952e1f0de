"""`evotrainer init DIR` writes a valid, commented harness with its data and strict evaluator."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from typer.testing import CliRunner

from agent.cli import app
from agent.commands.init import SKELETON, harness_name, write_skeleton
from harness.calls import load_function
from harness.manifest import load_harness
from trainer_backend.local.artifacts import read_rows


def test_the_committed_skeleton_data_is_a_fresh_generation(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("skeleton_make_data", SKELETON / "make_data.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.main(tmp_path)
    for name in ("train", "val", "warmstart"):
        fresh, committed = tmp_path / "data" / f"{name}.jsonl", SKELETON / "data" / f"{name}.jsonl"
        assert fresh.read_text() == committed.read_text(), f"rerun examples/skeleton/make_data.py ({name})"


def test_init_writes_a_harness_that_loads_and_names_itself(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["init", str(tmp_path / "My Task!")])
    assert result.exit_code == 0, result.output
    harness = load_harness(tmp_path / "My Task!")
    assert harness.manifest.name == "My-Task-" and harness.manifest.answer is not None
    assert (harness.root / "README.md").is_file() and (harness.root / "make_data.py").is_file()
    text = (harness.root / "evotrainer.yaml").read_text()
    assert text.count("\n#") >= 8  # every field commented
    again = CliRunner().invoke(app, ["init", str(tmp_path / "My Task!")])
    assert again.exit_code == 2 and "not an empty folder" in again.output
    assert harness_name(Path("...")) == "harness"


def test_skeleton_data_is_disjoint_and_its_evaluator_judges_its_answers(tmp_path: Path) -> None:
    write_skeleton(tmp_path / "h")
    harness = load_harness(tmp_path / "h")
    train = read_rows(harness.path("data/train.jsonl"))
    val = read_rows(harness.path("data/val.jsonl"))
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in val}
    strict = load_function(harness.root, harness.strict_eval)
    reward = load_function(harness.root, harness.reward)
    row = val[0]
    good = harness.manifest.answer.render(row["ground_truth"])  # type: ignore[union-attr]
    assert strict(good, row["ground_truth"]) == 1.0 and reward("s", good, row["ground_truth"])["score"] == 1.0
    bad = harness.manifest.answer.render(row["ground_truth"][::-1] + "0")  # type: ignore[union-attr]
    assert strict(bad, row["ground_truth"]) == 0.0 and reward("s", bad, row["ground_truth"])["score"] == 0.1
    warm = [json.loads(x) for x in harness.path("data/warmstart.jsonl").read_text().splitlines()]
    wrong = sum(strict(w["response"], "".join(sorted(w["prompt"][:-1]))) == 0.0 for w in warm)
    assert 0.1 < wrong / len(warm) < 0.5  # the warm start errs, so RL has something to fix
