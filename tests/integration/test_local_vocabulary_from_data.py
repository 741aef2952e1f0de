"""The local trainer reads any characters from the data, and a continued policy's gaps are the
harness's fault: a pilot whose data holds a character its parent policy never saw ends `candidate_error`
naming the file, row and character (it was an unnamed `TokenizerError` classified `infra_error`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from harness.failures import Outcome
from trainer_backend import BACKENDS
from trainer_backend.base import RunSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TINY = """lr: 1.0e-3
group_size: 2
prompts_per_step: 2
max_new_tokens: 12
val_every: 1
save_every: 1
n_layers: 1
hidden: 32
warmstart_steps: 5
"""

pytestmark = pytest.mark.slow


def _letters_harness(tmp_path: Path) -> Path:
    """The init skeleton with letters in its prompts (`reverse ab:`), no special tokens declared."""
    root = tmp_path / "h"
    shutil.copytree(EXAMPLES / "skeleton", root)
    (root / "harness" / "trainer.yaml").write_text(TINY)
    rows = [{"prompt": f"reverse {w}:", "ground_truth": w[::-1], "data_source": "w"} for w in ("abc", "ba", "cab")]
    for name in ("train", "val"):
        (root / "data" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    warm = [{"prompt": r["prompt"], "response": f"<answer>{r['ground_truth']}</answer>"} for r in rows]
    (root / "data" / "warmstart.jsonl").write_text("".join(json.dumps(r) + "\n" for r in warm))
    (root / "harness" / "data.yaml").write_text("weights: {w: 1.0}\n")
    return root


def test_letters_train_and_a_pilot_with_an_unseen_character_is_the_harness_fault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVOTRAINER_CACHE", str(tmp_path / "cache"))
    root = _letters_harness(tmp_path)
    parent = BACKENDS["local"].run(RunSpec(run_id="v0", harness_dir=root, out_dir=tmp_path / "v0", steps=1))
    assert parent.outcome is Outcome.OK, parent.message
    checkpoint = tmp_path / "v0" / "checkpoints" / "last.pt"
    vocab = torch.load(checkpoint, weights_only=True)["vocab"]
    assert {"r", "e", "v", "<answer>"} <= set(vocab) and "z" not in vocab

    pilot = BACKENDS["local"].run(
        RunSpec(run_id="p", harness_dir=root, out_dir=tmp_path / "p", steps=1, init_checkpoint=checkpoint)
    )
    assert pilot.outcome is Outcome.OK, pilot.message  # same data: the parent's vocabulary reads it

    with (root / "data" / "train.jsonl").open("a") as fh:
        fh.write(json.dumps({"prompt": "reverse zab:", "ground_truth": "baz", "data_source": "w"}) + "\n")
    bad = BACKENDS["local"].run(
        RunSpec(run_id="q", harness_dir=root, out_dir=tmp_path / "q", steps=1, init_checkpoint=checkpoint)
    )
    assert bad.outcome is Outcome.CANDIDATE_ERROR
    assert "data/train.jsonl:4: field 'prompt' has character 'z'" in bad.message
    summary = json.loads((tmp_path / "q" / "summary.json").read_text())
    assert summary["path"] == "data/train.jsonl"

    fresh = BACKENDS["local"].run(RunSpec(run_id="v0b", harness_dir=root, out_dir=tmp_path / "v0b", steps=1))
    assert fresh.outcome is Outcome.OK, fresh.message  # a root run builds its vocabulary from the new data
