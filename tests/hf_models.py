"""Real Hugging Face model folders for tests: random-init Qwen2 / Llama / Qwen3 with a trained BPE tokenizer.

A folder made here is what a user's model folder is: ``config.json``, safetensors weights, tokenizer files,
a chat template and a generation config, written with ``save_pretrained`` and loaded by the product through
the same ``from_pretrained`` path. The tokenizer is a byte-level BPE trained with the `tokenizers` library on
the texts given (a harness's data), with ChatML turn tokens (``<|im_start|>``, ``<|im_end|>``), an
``<|endoftext|>`` pad, and any extra special tokens a harness declares (one id each).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
TURN_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def harness_texts(root: Path, names: Sequence[str] = ("train", "val", "warmstart")) -> list[str]:
    """The prompts, answers and responses of a harness's data files (what its tokenizer should cover)."""
    out: list[str] = []
    for name in names:
        path = root / "data" / f"{name}.jsonl"
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            row = json.loads(line)
            out += [str(row[k]) for k in ("prompt", "response", "ground_truth") if isinstance(row.get(k), str | int)]
    return out


def train_tokenizer(texts: Iterable[str], extra_special: Sequence[str] = (), vocab_size: int = 400) -> Any:
    """A byte-level BPE `PreTrainedTokenizerFast` trained on `texts`, with ChatML turn tokens and `extra_special`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    specials = [*TURN_TOKENS, *extra_special]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    core.train_from_iterator(list(texts), trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=[*TURN_TOKENS[1:], *extra_special],
    )
    tok.chat_template = CHATML
    return tok


def make_model_folder(
    path: Path,
    texts: Iterable[str],
    arch: str = "qwen2",
    extra_special: Sequence[str] = (),
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    max_positions: int = 512,
    seed: int = 0,
    vocab_size: int = 400,
) -> Path:
    """Write a random-init causal LM folder of `arch` (qwen2, llama, qwen3, mistral) with its tokenizer; return it."""
    import torch
    import transformers

    tok = train_tokenizer(texts, extra_special, vocab_size)
    im_end, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    common: dict[str, Any] = {
        "vocab_size": len(tok),
        "hidden_size": hidden,
        "intermediate_size": hidden * 2,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "max_position_embeddings": max_positions,
        "bos_token_id": None,
        "eos_token_id": im_end,
        "pad_token_id": pad,
        "tie_word_embeddings": arch != "llama",
    }
    config_cls = {
        "qwen2": transformers.Qwen2Config,
        "llama": transformers.LlamaConfig,
        "qwen3": transformers.Qwen3Config,
        "mistral": transformers.MistralConfig,
    }[arch]
    if arch == "qwen3":
        common["head_dim"] = hidden // heads
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config_cls(**common))
    model.generation_config = transformers.GenerationConfig(eos_token_id=[im_end], pad_token_id=pad)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path
