"""Which Hugging Face decoders the static sampler reproduces exactly, and their weights laid out for decoding.

`supports` reads a loaded `*ForCausalLM` (its config *and* its modules, so a config that says one thing while
the modules do another is caught) and names the first thing the fast path would compute differently.
`DecodeWeights` holds the decode copy of the weights: one fused q/k/v and one fused gate/up matrix per layer,
in the sampler's dtype and device, refreshed in place so that captured CUDA graphs stay valid.

The four architectures share one layer (transformers' `modeling_{llama,qwen2,qwen3,mistral}.py`, 5.x): pre-norm
RMSNorm (statistics in fp32, cast back, then scaled), rotary embeddings from the model's own `rotary_emb`
(so any static rope scaling is the model's), grouped-query attention, SiLU-gated MLP. They differ only in
which linears carry a bias (Qwen2: q/k/v; Llama: all attention and/or all MLP when configured; Qwen3: all
attention when configured; Mistral: none), Qwen3's per-head q/k RMSNorm, and sliding-window attention
(Mistral, Qwen2/3 `layer_types`) — the last is exact only while a window covers the whole sequence.
Pure torch: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

ARCHITECTURES = ("llama", "qwen2", "qwen3", "mistral")
# Rope types whose frequencies change with the longest sequence seen so far (`dynamic_rope_update`): a table
# computed once differs from the model's own per-call tables.
_STATEFUL_ROPE = ("dynamic", "longrope")
_SILU = ("SiLU", "SiLUActivation")
_ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj")


def rotary_module(model: Any) -> Any:
    """The model's rotary-embedding module (`model.model.rotary_emb`, else the first layer's), or None."""
    core = getattr(model, "model", None)
    found = getattr(core, "rotary_emb", None)
    if found is None and core is not None and len(getattr(core, "layers", ())):
        found = getattr(core.layers[0].self_attn, "rotary_emb", None)
    return found


def _windows(model: Any) -> set[int]:
    """Sliding-window sizes any layer of `model` applies (empty: every layer attends to the whole sequence)."""
    cfg = model.config
    found = {w for layer in model.model.layers if (w := getattr(layer.self_attn, "sliding_window", None))}
    window = getattr(cfg, "sliding_window", None)
    if window and (cfg.model_type == "mistral" or "sliding_attention" in (getattr(cfg, "layer_types", None) or ())):
        found.add(window)
    return found


def supports(model: Any, max_len: int | None = None) -> str | None:
    """Return None when the static sampler reproduces `model`'s forward exactly, else a one-line reason.

    Args:
        model: a loaded transformers causal LM.
        max_len: the longest prompt + response the caller will decode. A sliding window shorter than that
            changes the model's attention, so it is refused; with None a model with any window is refused.
    """
    cfg: Any = getattr(model, "config", None)
    kind = getattr(cfg, "model_type", None)
    if kind not in ARCHITECTURES:
        return f"model_type {kind} is not one of {', '.join(ARCHITECTURES)}"
    core: Any = getattr(model, "model", None)
    if not all(hasattr(core, n) for n in ("embed_tokens", "layers", "norm")) or not hasattr(model, "lm_head"):
        return f"{type(model).__name__} lacks the {kind} layout (model.embed_tokens, model.layers, model.norm, lm_head)"
    if not torch.is_floating_point(core.embed_tokens.weight):
        return f"weights of dtype {core.embed_tokens.weight.dtype} (quantized?) are not plain floating point"
    if cfg.hidden_act not in ("silu", "swish"):
        return f"hidden_act {cfg.hidden_act} is not silu"
    rope = getattr(cfg, "rope_parameters", None) or {}
    rope_type = rope.get("rope_type", "default") if isinstance(rope, dict) else "per-layer"
    if rope_type in _STATEFUL_ROPE or rope_type == "per-layer":
        return f"rope_type {rope_type} is not a static table"
    if rotary_module(model) is None:
        return "no rotary_emb module (model.model.rotary_emb or layers[0].self_attn.rotary_emb)"
    unknown = set(getattr(cfg, "layer_types", None) or ()) - {"full_attention", "sliding_attention"}
    if unknown:
        return f"layer_types {sorted(unknown)} are not full or sliding attention"
    windows = _windows(model)
    if windows and (max_len is None or min(windows) < max_len):
        need = "an unknown length" if max_len is None else f"{max_len} tokens"
        return f"sliding_window {min(windows)} is shorter than {need} (the fast path attends to every token)"
    if len(core.layers) < cfg.num_hidden_layers:
        return f"{len(core.layers)} layers, config says {cfg.num_hidden_layers}"
    for i, layer in enumerate(core.layers[: cfg.num_hidden_layers]):
        attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        linears = [(attn, n) for n in _ATTN] + [(mlp, n) for n in _MLP]
        missing = [n for owner, n in linears if not isinstance(getattr(owner, n, None), nn.Linear)]
        missing += [n for n in ("head_dim", "scaling") if not isinstance(getattr(attn, n, None), int | float)]
        if missing:
            return f"layer {i} attention/MLP has no {missing[0]}"
        for group in (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj")):
            owner = attn if group[0] == "q_proj" else mlp
            if len({getattr(owner, n).bias is None for n in group}) > 1:
                return f"layer {i}: only some of {', '.join(group)} have a bias (they are fused)"
        if type(getattr(mlp, "act_fn", None)).__name__ not in _SILU:
            return f"layer {i} MLP activation {type(getattr(mlp, 'act_fn', None)).__name__} is not SiLU"
        norms = ["input_layernorm", "post_attention_layernorm"]
        has_qk_norm = hasattr(attn, "q_norm") or hasattr(attn, "k_norm")
        if has_qk_norm != (kind == "qwen3"):
            return f"layer {i}: q/k norms {'present' if has_qk_norm else 'absent'} where {kind} has them the other way"
        owners = [(layer, n) for n in norms] + ([(attn, "q_norm"), (attn, "k_norm")] if has_qk_norm else [])
        for owner, n in owners:
            norm = getattr(owner, n, None)
            if getattr(norm, "variance_epsilon", None) is None or getattr(norm, "bias", None) is not None:
                return f"layer {i} {n} is not an RMSNorm (weight, variance_epsilon, no bias)"
    if getattr(model.lm_head, "weight", None) is None:
        return "lm_head has no weight"
    return None


@dataclass
class LayerWeights:
    """One decoder layer's decode weights (C = hidden, H/K = query/key-value heads, D = head dim, I = MLP).

    Attributes:
        ln1, ln2: `[C]` input / post-attention RMSNorm weights; eps1, eps2 their epsilons.
        wqkv: `[(H + 2K) * D, C]` fused q/k/v; bqkv its bias or None.
        q_norm, k_norm: `[D]` per-head RMSNorm weights (Qwen3) or None; eps_qk their epsilon.
        wo: `[C, H * D]`; bo its bias or None.
        wgu: `[2 * I, C]` fused gate/up; bgu its bias or None.
        wdown: `[C, I]`; bdown its bias or None.
    """

    ln1: Tensor
    eps1: float
    wqkv: Tensor
    bqkv: Tensor | None
    q_norm: Tensor | None
    k_norm: Tensor | None
    eps_qk: float
    wo: Tensor
    bo: Tensor | None
    ln2: Tensor
    eps2: float
    wgu: Tensor
    bgu: Tensor | None
    wdown: Tensor
    bdown: Tensor | None


_Part = tuple[nn.Module, str]  # a module and the name of one of its parameters


class DecodeWeights:
    """A supported model's weights copied to `dtype` on `device`, fused for decoding.

    Every decode tensor is filled from its parts (row slices, in order) by `refresh`, which copies in place:
    the addresses never change, so CUDA graphs captured over these tensors stay valid after an optimizer step.

    Attributes:
        heads, kv_heads, head_dim: attention shape; scaling: the model's softmax scale (head_dim ** -0.5).
        embed: `[V, C]`; head: `[V, C]` (the same tensor when the model ties them); head_bias: `[V]` or None.
        norm: `[C]` final RMSNorm weight; eps: its epsilon.
        layers: one `LayerWeights` per decoder layer.
    """

    def __init__(self, model: Any, dtype: torch.dtype, device: torch.device) -> None:
        cfg, core = model.config, model.model
        blocks = core.layers[: cfg.num_hidden_layers]
        first = blocks[0].self_attn
        self.head_dim: int = first.head_dim
        self.heads: int = first.q_proj.out_features // self.head_dim
        self.kv_heads: int = first.k_proj.out_features // self.head_dim
        self.scaling: float = first.scaling
        self._plan: list[tuple[Tensor, tuple[_Part, ...]]] = []
        self._dtype, self._device = dtype, device

        self.embed = self._alloc((core.embed_tokens, "weight"))
        tied = model.lm_head.weight.data_ptr() == core.embed_tokens.weight.data_ptr()
        self.head = self.embed if tied else self._alloc((model.lm_head, "weight"))
        self.head_bias = self._maybe((model.lm_head, "bias"))
        self.norm, self.eps = self._alloc((core.norm, "weight")), float(core.norm.variance_epsilon)
        self.layers = [self._layer(block) for block in blocks]

    def _alloc(self, *parts: _Part) -> Tensor:
        """Return an empty decode tensor shaped like `parts` stacked along dim 0, registered for `refresh`."""
        sources = [getattr(m, n) for m, n in parts]
        rows = sum(s.shape[0] for s in sources)
        out = torch.empty(rows, *sources[0].shape[1:], dtype=self._dtype, device=self._device)
        self._plan.append((out, parts))
        return out

    def _maybe(self, *parts: _Part) -> Tensor | None:
        """`_alloc` when every part exists (a bias), else None; a mix of present and absent biases is an error."""
        present = [getattr(m, n, None) is not None for m, n in parts]
        if not any(present):
            return None
        if not all(present):
            raise ValueError(f"some of {[n for _, n in parts]} have a bias and some do not; cannot fuse them")
        return self._alloc(*parts)

    def _layer(self, block: Any) -> LayerWeights:
        attn, mlp = block.self_attn, block.mlp
        qkv = (attn.q_proj, attn.k_proj, attn.v_proj)
        qk_norm = hasattr(attn, "q_norm")
        return LayerWeights(
            ln1=self._alloc((block.input_layernorm, "weight")),
            eps1=float(block.input_layernorm.variance_epsilon),
            wqkv=self._alloc(*((m, "weight") for m in qkv)),
            bqkv=self._maybe(*((m, "bias") for m in qkv)),
            q_norm=self._alloc((attn.q_norm, "weight")) if qk_norm else None,
            k_norm=self._alloc((attn.k_norm, "weight")) if qk_norm else None,
            eps_qk=float(attn.q_norm.variance_epsilon) if qk_norm else 0.0,
            wo=self._alloc((attn.o_proj, "weight")),
            bo=self._maybe((attn.o_proj, "bias")),
            ln2=self._alloc((block.post_attention_layernorm, "weight")),
            eps2=float(block.post_attention_layernorm.variance_epsilon),
            wgu=self._alloc((mlp.gate_proj, "weight"), (mlp.up_proj, "weight")),
            bgu=self._maybe((mlp.gate_proj, "bias"), (mlp.up_proj, "bias")),
            wdown=self._alloc((mlp.down_proj, "weight")),
            bdown=self._maybe((mlp.down_proj, "bias")),
        )

    def version(self) -> tuple[tuple[int, int], ...]:
        """Address and in-place version counter of every source parameter: changes when the model's weights do.

        An optimizer step or `load_state_dict` bumps a parameter's version; an update through `.data` does not
        (call `refresh` after one).
        """
        return tuple((p.data_ptr(), p._version) for _, parts in self._plan for p in (getattr(m, n) for m, n in parts))

    @torch.no_grad()
    def refresh(self) -> None:
        """Copy the model's current weights into the decode tensors, in place (cast to the decode dtype)."""
        for out, parts in self._plan:
            start = 0
            for module, name in parts:
                source = getattr(module, name)
                out[start : start + source.shape[0]].copy_(source)
                start += source.shape[0]
