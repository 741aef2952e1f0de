"""A bad data row stops a session before anything exists, naming the file, the line and the field.

The run's preflight (`agent.launch.preflight.check_backend` → `check_data`) streams every row of the training,
held-out and warm-start files and checks the data selection, by the rules the trainer itself applies
(`harness.rows`, one definition): each broken demo copy below is refused by the preflight and by the
trainer's own readers with the same words. `evotrainer run` and `train` exit 2 with that one line, and a
Studio / SDK session (`agent.launch.bootstrap.ensure_session`) refuses it too; no session folder, repository or
store is created.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.context import Context
from agent.launch.input_checks import SetupError
from agent.launch.preflight import check_backend
from harness.rows import RowError

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "arithmetic"


def _demo(tmp_path: Path) -> Path:
    return Path(shutil.copytree(DEMO, tmp_path / "mine", ignore=shutil.ignore_patterns("__pycache__")))


def _edit_row(path: Path, line: int, change: Callable[[dict[str, object]], object]) -> None:
    rows = path.read_text().splitlines()
    rows[line - 1] = json.dumps(change(json.loads(rows[line - 1])))
    path.write_text("\n".join(rows) + "\n")


def _renamed(row: dict[str, object], old: str, new: str) -> dict[str, object]:
    return {(new if k == old else k): v for k, v in row.items()}


# (what breaks, file, line, what the message must say): each edits one row of a demo copy
CASES: list[tuple[str, str, int, Callable[[dict[str, object]], object], str]] = [
    ("train-prompt-renamed", "data/train.jsonl", 7, lambda r: _renamed(r, "prompt", "question"),
     "field 'prompt' is missing (fields: "),
    ("train-ground-truth-renamed", "data/train.jsonl", 2999, lambda r: _renamed(r, "ground_truth", "answer"),
     "field 'ground_truth' is missing"),
    ("val-prompt-not-text", "data/val.jsonl", 12, lambda r: {**r, "prompt": ["1+1=>"]},
     "field 'prompt' must be text, got ['1+1=>']"),
    ("val-not-an-object", "data/val.jsonl", 300, lambda r: [r], "expected a JSON object"),
    ("train-prompt-id-a-number", "data/train.jsonl", 40, lambda r: {**r, "prompt_id": 40},
     "field 'prompt_id' must be non-empty text, got 40"),
    ("warmstart-response-missing", "data/warmstart.jsonl", 11999, lambda r: {"prompt": r["prompt"]},
     "field 'response' is missing"),
]  # fmt: skip


@pytest.mark.parametrize(("file", "line", "change", "says"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_preflight_names_the_file_the_line_and_the_field(
    tmp_path: Path, file: str, line: int, change: Callable[[dict[str, object]], object], says: str
) -> None:
    harness = _demo(tmp_path)
    _edit_row(harness / file, line, change)
    with pytest.raises(RowError) as info:
        check_backend("local", harness)
    assert str(info.value).startswith(f"{harness / file}:{line}: {says}"), str(info.value)
    assert _trainer_refusal(harness, file) == str(info.value), "the trainer reads rows by other rules"


def _trainer_refusal(harness: Path, file: str) -> str:
    """What the local trainer's own readers say about `file` (one definition of a valid row)."""
    import torch

    from harness.manifest import load_harness
    from trainer_backend.local.artifacts import read_rows
    from trainer_backend.local.policy import Policy
    from trainer_backend.local.vocab import tokenizer_for
    from trainer_backend.local.warmstart import _load_pairs

    with pytest.raises(RowError) as info:
        if file.endswith("warmstart.jsonl"):
            tok = tokenizer_for(load_harness(harness), file, None)
            _load_pairs(harness / file, Policy(None, tok, torch.device("cpu"), str))
        else:
            read_rows(harness / file)
    return str(info.value)


def test_a_selection_field_no_row_has_is_refused_by_preflight_and_trainer(tmp_path: Path) -> None:
    harness = _demo(tmp_path)
    manifest = harness / "evotrainer.yaml"
    manifest.write_text(manifest.read_text().replace("val: data/val.jsonl}", "val: data/val.jsonl, select_by: tier}"))
    with pytest.raises(RowError) as info:
        check_backend("local", harness)
    message = str(info.value)
    assert message.startswith(f"{harness / 'data/train.jsonl'}: data selection weights {{'arithmetic/level1': 0.4")
    assert "match no row's field 'tier' (the manifest's data.select_by); no row has the field 'tier'" in message

    from trainer_backend.local.artifacts import read_rows, sample_rows

    weights = {"arithmetic/level1": 0.4, "arithmetic/level5": 0.3}
    with pytest.raises(RowError, match="match no row's field 'tier'"):
        sample_rows(read_rows(harness / "data/train.jsonl"), weights, "tier", 1, random.Random(0))


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "EVOTRAINER_DB"}
    env.update(PYTHONPATH=str(ROOT), HOME=str(cwd))
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


@pytest.mark.parametrize("command", ["run", "train"])
def test_run_and_train_exit_2_with_the_row_before_creating_anything(tmp_path: Path, command: str) -> None:
    harness = _demo(tmp_path)
    _edit_row(harness / "data/train.jsonl", 7, lambda r: _renamed(r, "prompt", "question"))
    extra = ["--sandbox", "process"] if command == "run" else []
    done = _cli(tmp_path, command, "--harness", str(harness), *extra)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        f"error: {harness / 'data/train.jsonl'}:7: field 'prompt' is missing (fields: 'data_source', "
        "'ground_truth', 'level', 'question', 'prompt_id'); every row needs one"
    ], done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"], "something was created for bad input"


def test_a_studio_session_is_refused_before_its_repository_exists(tmp_path: Path) -> None:
    from agent.launch.bootstrap import ensure_session

    harness = _demo(tmp_path)
    _edit_row(harness / "data/val.jsonl", 3, lambda r: _renamed(r, "ground_truth", "answer"))
    ctx = Context(workdir=str(tmp_path), sandbox="process")
    with pytest.raises(SetupError, match=rf"{harness / 'data/val.jsonl'}:3: field 'ground_truth' is missing"):
        ensure_session(ctx, "s-bad-data", harness, None)
    assert sorted(p.name for p in tmp_path.iterdir()) in (["mine"], [".evotrainer", "mine"])
    assert not (tmp_path / "evotrainer-arithmetic").exists()
