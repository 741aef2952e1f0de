"""A Hugging Face model the settings name but that cannot train here is refused before anything exists.

A folder without a config, a tokenizer without the harness's special tokens, prompts plus the response budget
beyond the model's context, a CUDA request on a machine without CUDA: `evotrainer train` prints one line
naming the setting and the fix, exits 2, and creates no run folder. The model folder is real
(`tests/hf_models.py`), loaded through the product's `from_pretrained` path.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arithmetic-oracle"
SETTINGS = "model: {folder}\nprompt_format: chat\nmax_new_tokens: 24\nwarmstart_steps: 0\n"


@pytest.fixture()
def harness(tmp_path: Path, hf_arith_folder: Path) -> Path:
    """The oracle harness on the Hugging Face folder (no one-id special tokens: the tokenizer writes tags as text)."""
    root = tmp_path / "h"
    shutil.copytree(EXAMPLE, root)
    manifest = (root / "evotrainer.yaml").read_text().splitlines()
    (root / "evotrainer.yaml").write_text(
        "\n".join(x for x in manifest if not x.startswith(("special_tokens:", "alphabet:"))) + "\n"
    )
    (root / "harness" / "trainer.yaml").write_text(SETTINGS.format(folder=hf_arith_folder))
    return root


def _train(harness: Path, out: Path) -> tuple[int, str]:
    from agent.cli import app

    result = CliRunner().invoke(app, ["train", "--harness", str(harness), "--steps", "1", "--out", str(out)])
    return result.exit_code, " ".join(result.output.split())


def _set(harness: Path, key: str, value: str) -> None:
    path = harness / "harness" / "trainer.yaml"
    lines = [x for x in path.read_text().splitlines() if not x.startswith(f"{key}:")]
    path.write_text("\n".join([*lines, f"{key}: {value}"]) + "\n")


def test_a_folder_without_a_config_is_refused(harness: Path, tmp_path: Path) -> None:
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    (empty / "tokenizer.json").write_text("{}")
    _set(harness, "model", str(empty))
    code, text = _train(harness, tmp_path / "out")
    assert code == 2 and "has no config.json" in text and "trainer.yaml field 'model'" in text
    assert not (tmp_path / "out").exists()


def test_a_name_that_is_no_folder_and_not_cached_is_refused_without_downloading(harness: Path, tmp_path: Path) -> None:
    _set(harness, "model", "someone/no-such-model")
    code, text = _train(harness, tmp_path / "out")
    assert code == 2 and "nothing is downloaded" in text and "evotrainer models get" in text
    assert not (tmp_path / "out").exists()


def test_a_tokenizer_without_the_harness_special_tokens_is_refused(harness: Path, tmp_path: Path) -> None:
    manifest = harness / "evotrainer.yaml"
    manifest.write_text(manifest.read_text() + "special_tokens: ['<ans>', '</ans>']\n")
    code, text = _train(harness, tmp_path / "out")
    assert code == 2 and "'<ans>' is not one token" in text and "special_tokens" in text
    assert not (tmp_path / "out").exists()


def test_prompts_longer_than_the_model_context_are_refused(harness: Path, tmp_path: Path) -> None:
    _set(harness, "max_new_tokens", "500")  # the folder's model has 512 positions
    code, text = _train(harness, tmp_path / "out")
    assert code == 2 and "context of 512 positions" in text and "data/train.jsonl:1" in text
    assert not (tmp_path / "out").exists()


def test_cuda_on_a_machine_without_cuda_is_refused(harness: Path, tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    _set(harness, "device", "cuda")
    code, text = _train(harness, tmp_path / "out")
    assert code == 2 and "torch sees no CUDA device" in text
    assert not (tmp_path / "out").exists()


def test_chat_format_on_the_tiny_model_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "h"
    shutil.copytree(EXAMPLE, root)
    _set(root, "prompt_format", "chat")
    code, text = _train(root, tmp_path / "out")
    assert code == 2 and "prompt_format 'chat' needs a model with a chat template" in text
    assert not (tmp_path / "out").exists()
