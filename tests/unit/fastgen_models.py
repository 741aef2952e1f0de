"""Tiny random-init Hugging Face decoders of every architecture the static sampler supports.

Weights, biases and norm scales are all drawn at random (transformers initialises biases to 0 and norms to 1,
which would let a missing bias or norm go unnoticed), with a spread that makes the logits far from ties.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

VOCAB, PAD, BOS, EOS = 97, 0, 1, 2
_SHAPE: dict[str, Any] = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    pad_token_id=PAD,
    bos_token_id=BOS,
    eos_token_id=EOS,
    max_position_embeddings=128,
)
_ARCH = {
    "llama": (LlamaConfig, LlamaForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
    "mistral": (MistralConfig, MistralForCausalLM),
}
# name -> (architecture, config overrides): tied and untied heads, GQA and MHA, biases, q/k norms, explicit
# head_dim, a scaled rope, a sliding window longer than any test sequence.
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama-tied-gqa": ("llama", {"tie_word_embeddings": True}),
    "llama-untied-bias-headdim-linear-rope": (
        "llama",
        {
            "tie_word_embeddings": False,
            "attention_bias": True,
            "mlp_bias": True,
            "head_dim": 24,
            "num_key_value_heads": 4,
            "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
        },
    ),
    "qwen2-tied-qkv-bias": ("qwen2", {"tie_word_embeddings": True}),
    "qwen2-untied-mha": ("qwen2", {"tie_word_embeddings": False, "num_key_value_heads": 4}),
    "qwen3-qk-norm-gqa": ("qwen3", {"tie_word_embeddings": True, "head_dim": 16}),
    "qwen3-untied-attention-bias": (
        "qwen3",
        {"tie_word_embeddings": False, "head_dim": 32, "attention_bias": True, "num_key_value_heads": 1},
    ),
    "mistral-window-covers": ("mistral", {"tie_word_embeddings": False, "sliding_window": 128}),
}


def build(arch: str, seed: int = 0, **overrides: Any) -> Any:
    """Return a random-init fp32 model of `arch` ("llama", "qwen2", "qwen3", "mistral") in eval mode."""
    config_cls, model_cls = _ARCH[arch]
    torch.manual_seed(seed)
    model = model_cls(config_cls(**{**_SHAPE, **overrides})).float().eval()
    randomize(model, seed)
    return model


def build_case(name: str, seed: int = 0) -> Any:
    """Return the model of `CASES[name]`."""
    arch, overrides = CASES[name]
    return build(arch, seed, **overrides)


@torch.no_grad()
def randomize(model: Any, seed: int) -> None:
    """Draw every parameter at random: norms around 1, the rest around 0 (tied weights stay tied)."""
    gen = torch.Generator().manual_seed(seed + 1000)
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=gen)
        p.copy_(1 + 0.3 * noise if "norm" in name else 0.15 * noise)


def prompts(rows: int, seed: int, lengths: tuple[int, ...] = (3, 9, 5, 1, 7)) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompts `ids[rows, P]`, `mask[rows, P]` of mixed lengths (cycling `lengths`), BOS first."""
    gen = torch.Generator().manual_seed(seed)
    seqs = [
        [BOS, *torch.randint(3, VOCAB, (lengths[i % len(lengths)] - 1,), generator=gen).tolist()] for i in range(rows)
    ]
    width = max(len(s) for s in seqs)
    ids = torch.full((rows, width), PAD, dtype=torch.long)
    mask = torch.zeros((rows, width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, width - len(seq) :] = torch.tensor(seq)
        mask[row, width - len(seq) :] = 1
    return ids, mask


@torch.no_grad()
def forward_logits(model: Any, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The model's own logits `[B, L, V]` (fp32) for left-padded `ids[B, L]` (positions count real tokens)."""
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return model(input_ids=ids, attention_mask=mask, position_ids=positions).logits.float()
