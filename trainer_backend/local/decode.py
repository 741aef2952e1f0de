"""Fast batched sampling for the tiny Llama policy: one preallocated KV cache, no per-token framework overhead.

The local trainer spends most of a step generating (generation with the KV cache dominated the
profile). The policy is tiny (3 layers, hidden 128), so a `LlamaForCausalLM.forward` per generated token
costs far more in Python and cache bookkeeping than in floating-point work. `sample` runs the same maths — RMSNorm,
rotary embeddings (the model's own `rotary_emb` table), causal multi-head attention, SiLU-gated MLP, tied
head — directly on the model's weights with a cache allocated once per call. Its logits match the
model's own forward to float rounding (`tests/unit/test_local_fast_decode.py`).

Only what `build_model` builds is supported (Llama, no biases, no rope scaling beyond the model's table);
`supports` says whether a model qualifies, and `model.generate` falls back to the framework path otherwise.
Pure torch: no I/O.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor


def supports(model: Any) -> bool:
    """True when `model` is a plain Llama this decoder reproduces exactly (no biases, SiLU, default rope)."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", "") != "llama":
        return False
    rope = getattr(cfg, "rope_parameters", None) or {}
    return (
        not cfg.attention_bias
        and not cfg.mlp_bias
        and cfg.hidden_act == "silu"
        and rope.get("rope_type", "default") == "default"
        and bool(cfg.tie_word_embeddings)
    )


def _rms(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def _rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class _Stack:
    """The model's weights, laid out for decoding (views; q/k/v fused into one matrix per layer)."""

    def __init__(self, model: Any) -> None:
        cfg = model.config
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.eps = cfg.rms_norm_eps
        self.scale = self.head_dim**-0.5
        core = model.model
        self.embed: Tensor = core.embed_tokens.weight
        self.norm: Tensor = core.norm.weight
        self.head: Tensor = model.lm_head.weight
        self.rotary: Any = core.rotary_emb
        self.layers: list[tuple[Tensor, ...]] = [
            (
                layer.input_layernorm.weight,
                torch.cat(
                    [layer.self_attn.q_proj.weight, layer.self_attn.k_proj.weight, layer.self_attn.v_proj.weight]
                ),
                layer.self_attn.o_proj.weight,
                layer.post_attention_layernorm.weight,
                torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight]),
                layer.mlp.down_proj.weight,
            )
            for layer in core.layers
        ]

    def rope_table(self, size: int) -> tuple[Tensor, Tensor]:
        """cos, sin `[size, D]` for positions 0..size-1, from the model's own rotary module."""
        cos, sin = self.rotary(self.embed[:1], torch.arange(size)[None])
        return cos[0], sin[0]

    def step(
        self, x: Tensor, cos: Tensor, sin: Tensor, kv: list[tuple[Tensor, Tensor]], start: int, mask: Tensor
    ) -> Tensor:
        """Run `x[B, T, C]` (tokens at cache slots start..start+T) through every layer; return hidden `[B, T, C]`.

        `cos`, `sin` are `[B, 1, T, D]` for the tokens' positions; `mask[B, 1, T, S]` (S = start + T) says which
        cache slots each token attends to.
        """
        b, t, _ = x.shape
        h, kvh, d = self.heads, self.kv_heads, self.head_dim
        end = start + t
        for (ln1, wqkv, wo, ln2, wgu, wdown), (kcache, vcache) in zip(self.layers, kv, strict=True):
            y = _rms(x, ln1, self.eps)
            q, k, v = (y @ wqkv.T).split([h * d, kvh * d, kvh * d], dim=-1)
            q = q.view(b, t, h, d).transpose(1, 2)
            k = k.view(b, t, kvh, d).transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            kcache[:, :, start:end] = k * cos + _rotate_half(k) * sin
            vcache[:, :, start:end] = v.view(b, t, kvh, d).transpose(1, 2)
            keys, values = kcache[:, :, :end], vcache[:, :, :end]
            if kvh != h:
                keys = keys.repeat_interleave(h // kvh, dim=1)
                values = values.repeat_interleave(h // kvh, dim=1)
            scores = (q @ keys.transpose(-1, -2)) * self.scale  # [B, H, T, S]
            att = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ values
            x = x + att.transpose(1, 2).reshape(b, t, h * d) @ wo.T
            y = _rms(x, ln2, self.eps)
            gate, up = (y @ wgu.T).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ wdown.T
        return x

    def logits(self, hidden: Tensor) -> Tensor:
        """Next-token logits `[B, V]` of the last position of `hidden[B, T, C]`."""
        return _rms(hidden[:, -1], self.norm, self.eps) @ self.head.T


@torch.no_grad()
def sample(
    model: Any,
    ids: Tensor,
    mask: Tensor,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    temperature: float,
    generator: torch.Generator | None,
    stop_ids: tuple[int, ...] = (),
) -> tuple[Tensor, Tensor, Tensor]:
    """Sample continuations of left-padded prompts `ids[B, P]` (`mask[B, P]` 1 = real token).

    One `torch.multinomial` draw per step over the whole batch, as the framework's decode loop makes.
    Returns `response[B, T]`, `response_mask[B, T]` (1 for generated tokens up to and including the one that
    stopped the row) and `finished[B]` (True when the row ended with EOS or one of `stop_ids`; False = cut
    at `max_new_tokens`).
    """
    stack = _Stack(model)
    batch, prompt_len = ids.shape
    total = prompt_len + max_new_tokens
    kv_heads, head_dim = stack.kv_heads, stack.head_dim
    dtype = stack.embed.dtype
    kv = [
        (
            torch.empty(batch, kv_heads, total, head_dim, dtype=dtype),
            torch.empty(batch, kv_heads, total, head_dim, dtype=dtype),
        )
        for _ in stack.layers
    ]
    keymask = torch.zeros(batch, total, dtype=torch.bool)
    keymask[:, :prompt_len] = mask.bool()
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cos_table, sin_table = stack.rope_table(int(positions.max()) + max_new_tokens + 1)
    # Prefill: causal over real prompt tokens; every slot also sees itself, so a padding row is never all-masked.
    causal = torch.ones(prompt_len, prompt_len, dtype=torch.bool).tril()
    prefill_mask = (causal[None] & keymask[:, None, :prompt_len]) | torch.eye(prompt_len, dtype=torch.bool)[None]
    hidden = stack.step(
        F.embedding(ids, stack.embed),
        cos_table[positions][:, None],
        sin_table[positions][:, None],
        kv,
        0,
        prefill_mask[:, None],
    )
    # `rows` are the batch rows whose state is in the cache; finished rows leave it once they are a quarter of
    # it. Logits of rows outside the cache are a placeholder: the full `[B, V]` draw keeps every live row's
    # random stream where it would be with no row removed, so the tokens do not depend on the compaction.
    rows = torch.arange(batch)
    full_logits = torch.zeros(batch, stack.head.shape[0], dtype=dtype)
    full_logits[rows] = stack.logits(hidden)
    next_pos = positions[:, -1] + 1
    stops = torch.tensor([eos_id, *stop_ids], dtype=torch.long)
    finished = torch.zeros(batch, dtype=torch.bool)
    tokens, alive = [], []
    for i in range(max_new_tokens):
        if temperature > 0:
            probs = torch.softmax(full_logits / temperature, dim=-1)
            tok = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        else:
            tok = full_logits.argmax(-1)
        tok = torch.where(finished, torch.full_like(tok, pad_id), tok)
        alive.append((~finished).long())
        tokens.append(tok)
        finished = finished | torch.isin(tok, stops)
        if bool(finished.all()) or i == max_new_tokens - 1:
            break
        live = ~finished[rows]
        if int(live.sum()) <= 0.75 * len(rows):
            rows, keymask, next_pos = rows[live], keymask[live], next_pos[live]
            kv = [(k[live], v[live]) for k, v in kv]
        slot = prompt_len + i
        keymask[:, slot] = True
        hidden = stack.step(
            F.embedding(tok[rows][:, None], stack.embed),
            cos_table[next_pos][:, None, None],
            sin_table[next_pos][:, None, None],
            kv,
            slot,
            keymask[:, None, None, : slot + 1],
        )
        full_logits[rows] = stack.logits(hidden)
        next_pos = next_pos + 1
    return torch.stack(tokens, dim=1), torch.stack(alive, dim=1), finished
