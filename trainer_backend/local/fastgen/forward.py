"""The decoder forward over `DecodeWeights` and a preallocated KV cache, for any number of new tokens.

One function, `run_layers`, serves both the eager prefill (T prompt tokens) and the fixed-shape decode step
(T = 1) that the sampler captures into a CUDA graph, so the tests that run it on CPU test the captured code.
Each operation mirrors transformers' own modeling code in order and dtype (RMSNorm statistics in fp32 then
cast back before the weight; rope, residual adds and the gated MLP in the model dtype), so a bf16 run
matches the model's bf16 forward within bf16 rounding and an fp32 run matches to float rounding.

Shapes: B batch rows, T new tokens, S cache slots attended over, C hidden, H/K query/key-value heads,
G = H / K query heads per key-value head, D head dim, V vocabulary.
Pure torch: no I/O.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from trainer_backend.local.fastgen.arch import DecodeWeights

KVCache = list[tuple[Tensor, Tensor]]  # per layer: keys, values `[B, K, S, D]` (views into the sampler's cache)


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """RMSNorm over the last dim as transformers computes it: statistics in fp32, cast back, then scaled."""
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Apply rotary embeddings: `x[..., D] * cos + rotate_half(x) * sin` (cos/sin broadcast to x)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def attention_bias(keymask: Tensor, dtype: torch.dtype) -> Tensor:
    """Additive mask (0 where attended, -inf elsewhere) from a boolean `keymask[B, 1, T, S]`; built once a step."""
    return torch.zeros(keymask.shape, dtype=dtype, device=keymask.device).masked_fill_(~keymask, float("-inf"))


def _attend(q: Tensor, keys: Tensor, values: Tensor, bias: Tensor, scale: float) -> Tensor:
    """Grouped-query attention of `q[B, H, T, D]` over `keys`, `values` `[B, K, S, D]`; return `[B, T, H * D]`.

    The G query heads sharing a key-value head are folded into the query length (`[B, K, G * T, D]`), so the
    cache is read once per key-value head with no `repeat_kv` copy; `bias[B, 1, T, S]` is repeated G times.
    Head h uses key-value head h // G, as in transformers' `repeat_kv`.
    """
    b, h, t, d = q.shape
    kv_heads = keys.shape[1]
    groups = h // kv_heads
    folded = q.reshape(b, kv_heads, groups * t, d)
    if t > 1 and groups > 1:
        bias = bias[:, :, None].expand(b, 1, groups, t, bias.shape[-1]).reshape(b, 1, groups * t, bias.shape[-1])
    out = F.scaled_dot_product_attention(folded, keys, values, attn_mask=bias, scale=scale)
    return out.reshape(b, h, t, d).transpose(1, 2).reshape(b, t, h * d)


def run_layers(
    w: DecodeWeights, x: Tensor, cos: Tensor, sin: Tensor, cache: KVCache, write: Tensor, bias: Tensor
) -> Tensor:
    """Run embeddings `x[B, T, C]` through every layer; return the final hidden states `[B, T, C]` (before the norm).

    Args:
        cos, sin: `[B, T, 1, D]` rotary tables at the new tokens' positions.
        cache: per layer `[B, K, S, D]` key and value views; the new tokens' keys and values are written at
            slots `write[T]` (`index_copy_`, so a slot held in a device tensor works inside a CUDA graph).
        bias: `[B, 1, T, S]` additive attention mask over the S slots (see `attention_bias`).
    """
    b, t, _ = x.shape
    h, kvh, d = w.heads, w.kv_heads, w.head_dim
    for lw, (keys, values) in zip(w.layers, cache, strict=True):
        y = rms_norm(x, lw.ln1, lw.eps1)
        qkv = F.linear(y, lw.wqkv, lw.bqkv)
        v = qkv[..., (h + kvh) * d :].view(b, t, kvh, d)
        if lw.q_norm is not None and lw.k_norm is not None:
            q = rotate(rms_norm(qkv[..., : h * d].view(b, t, h, d), lw.q_norm, lw.eps_qk), cos, sin)
            k = rotate(rms_norm(qkv[..., h * d : (h + kvh) * d].view(b, t, kvh, d), lw.k_norm, lw.eps_qk), cos, sin)
        else:  # one rotation for q and k together: the same elementwise maths, half the kernels
            qk = rotate(qkv[..., : (h + kvh) * d].view(b, t, h + kvh, d), cos, sin)
            q, k = qk[:, :, :h], qk[:, :, h:]
        keys.index_copy_(2, write, k.transpose(1, 2))
        values.index_copy_(2, write, v.transpose(1, 2))
        x = x + F.linear(_attend(q.transpose(1, 2), keys, values, bias, w.scaling), lw.wo, lw.bo)
        gate, up = F.linear(rms_norm(x, lw.ln2, lw.eps2), lw.wgu, lw.bgu).chunk(2, dim=-1)
        x = x + F.linear(F.silu(gate) * up, lw.wdown, lw.bdown)
    return x


def final_logits(w: DecodeWeights, hidden: Tensor) -> Tensor:
    """Logits `[B, V]` (decode dtype) of hidden states `[B, C]`: final norm, then the LM head."""
    return F.linear(rms_norm(hidden, w.norm, w.eps), w.head, w.head_bias)
