"""Static-shape sampling: a preallocated KV cache, a fixed-shape decode step, one CUDA graph per bucket.

`StaticSampler` is built once per run for a model and a device. It owns a KV cache for (max batch, max
length), a decode copy of the weights (`DecodeWeights`, refreshed in place), rotary tables and the step's
input buffers. A generation picks a bucket (the smallest batch and length buckets that fit), prefills the
prompts eagerly, then repeats one decode step whose shapes depend only on the bucket: token ids `[b]`,
positions `[b]`, the write slot as a device tensor `[1]` and the key mask `[b, S]`. On CUDA that step is
captured into a `torch.cuda.CUDAGraph` the first time its bucket is used (all graphs share one memory pool)
and replayed after; elsewhere (and with `graphs=False`) the very same function runs eagerly, which is what the
CPU tests exercise.

Sampling stays outside the graph: temperature softmax and `torch.multinomial` with the caller's generator
(greedy argmax at temperature 0) over all B rows every step, as `trainer_backend.local.decode.sample` does,
so a row's random stream does not depend on which other rows are still running. Stops are handled on the
device; the host looks at the batch only every `check_every` steps, to end early once every row has stopped
and to move the live rows into a smaller batch bucket.

`fast_sample` is the one entry point the trainer calls: a `StaticSampler` for a Hugging Face model, the
existing dynamic decoder for the tiny character Llama on CPU (bit-identical to before).
Pure torch: no I/O.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from trainer_backend.local import decode
from trainer_backend.local.fastgen.arch import DecodeWeights, rotary_module, supports
from trainer_backend.local.fastgen.forward import KVCache, attention_bias, final_logits, run_layers

Result = tuple[Tensor, Tensor, Tensor]  # response [B, T], response_mask [B, T], finished [B]


def _pick(buckets: Sequence[int], need: int) -> int:
    return next(b for b in buckets if b >= need)


class StaticSampler:
    """Sample from a supported Hugging Face causal LM with static shapes (see the module docstring).

    Attributes:
        device, dtype: where and in which precision decoding runs (the decode weights are a copy).
        graphs: capture and replay CUDA graphs (True by default on CUDA); False runs the step eagerly.
        batch_buckets, len_buckets: the batch sizes and cache lengths the step is specialised to.
        capture_seconds: time spent capturing graphs so far (report it apart from generation).
        compactions: how many times live rows moved to a smaller batch bucket.
    """

    def __init__(
        self,
        model: Any,
        *,
        max_batch: int,
        max_len: int,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
        graphs: bool | None = None,
        batch_buckets: Sequence[int] | None = None,
        len_buckets: Sequence[int] | None = None,
        check_every: int = 8,
    ) -> None:
        """Allocate the cache and the decode weights for up to `max_batch` rows of `max_len` tokens (prompt + response).

        Raises:
            ValueError: the model is not supported (the reason says why), or a size is out of range.
        """
        reason = supports(model, max_len)
        if reason is not None:
            raise ValueError(f"the static sampler cannot decode this model exactly: {reason}")
        if max_batch < 1 or max_len < 2 or check_every < 1:
            raise ValueError(f"max_batch {max_batch}, max_len {max_len}, check_every {check_every}: need >= 1, 2, 1")
        param = model.model.embed_tokens.weight
        self.device = torch.device(device) if device is not None else param.device
        self.dtype = dtype or param.dtype
        self.graphs = self.device.type == "cuda" if graphs is None else graphs
        if self.graphs and self.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a cuda device, not {self.device}")
        batches = batch_buckets or _powers_of_two(max_batch)
        self.batch_buckets = sorted({b for b in batches if b < max_batch} | {max_batch})
        self.len_buckets = sorted({s for s in (len_buckets or ()) if s < max_len} | {max_len})
        if self.batch_buckets[0] < 1 or self.len_buckets[0] < 2:
            raise ValueError(f"buckets must be positive: batch {self.batch_buckets}, length {self.len_buckets}")
        self.check_every = check_every
        self.capture_seconds = 0.0
        self.compactions = 0

        self.weights = DecodeWeights(model, self.dtype, self.device)
        self.refresh()
        w, dev = self.weights, self.device
        probe = torch.zeros(1, dtype=self.dtype, device=dev)  # only its dtype and device matter to the module
        cos, sin = rotary_module(model)(probe, torch.arange(max_len, device=dev)[None])
        self._cos, self._sin = cos[0].contiguous(), sin[0].contiguous()  # [max_len, D]
        shape = (max_batch, w.kv_heads, max_len, w.head_dim)
        # Zeros, not empty: masked slots are still multiplied by 0 in attention, and 0 * NaN would leak.
        self._cache = [
            (torch.zeros(shape, dtype=self.dtype, device=dev), torch.zeros(shape, dtype=self.dtype, device=dev))
            for _ in w.layers
        ]
        self._tok = torch.zeros(max_batch, dtype=torch.long, device=dev)
        self._pos = torch.zeros(max_batch, dtype=torch.long, device=dev)
        self._slot = torch.zeros(1, dtype=torch.long, device=dev)
        self._keymask = torch.zeros(max_batch, max_len, dtype=torch.bool, device=dev)
        self._logits = torch.zeros(max_batch, w.head.shape[0], dtype=torch.float32, device=dev)
        self._graph_of: dict[tuple[int, int], Any] = {}
        self._pool: Any = None
        # The current generation: bucket (b, S), live cache rows n (rows 0..n-1), next write slot, last slot + 1.
        self._b = self._s = self._n = self._next = self._end = 0

    def refresh(self) -> None:
        """Copy the model's current weights into the decode copy in place (captured graphs stay valid).

        `prefill` and `sample` call it themselves when a parameter's version moved (an optimizer step,
        `load_state_dict`); call it after changing weights through `.data`.
        """
        self.weights.refresh()
        self._version = self.weights.version()

    def _views(self, rows: int, slots: int) -> KVCache:
        return [(k[:rows, :, :slots], v[:rows, :, :slots]) for k, v in self._cache]

    @torch.no_grad()
    def prefill(self, ids: Tensor, mask: Tensor, max_new_tokens: int) -> Tensor:
        """Start a generation: run left-padded prompts `ids[B, P]` (`mask[B, P]` 1 = real token) through the model.

        Returns the fp32 next-token logits `[B, V]` at each prompt's last position. Afterwards the cache rows
        0..B-1 hold the prompts and `step` feeds up to `max_new_tokens - 1` more tokens.
        """
        if self.weights.version() != self._version:
            self.refresh()
        rows, width = ids.shape
        total = width + max_new_tokens
        if rows > self.batch_buckets[-1] or total > self.len_buckets[-1]:
            raise ValueError(
                f"{rows} prompts x ({width} + {max_new_tokens}) tokens exceed the sampler's "
                f"{self.batch_buckets[-1]} x {self.len_buckets[-1]}: build it with a larger max_batch/max_len"
            )
        ids, real = ids.to(self.device), mask.to(self.device).bool()
        self._b, self._s = _pick(self.batch_buckets, rows), _pick(self.len_buckets, total)
        self._n, self._next, self._end = rows, width, total
        keymask = self._keymask[: self._b, : self._s]
        keymask.zero_()
        keymask[:rows, :width] = real
        positions = (real.long().cumsum(-1) - 1).clamp(min=0)
        # Causal over real tokens; every slot also sees itself, so a padding row is never all-masked.
        causal = torch.ones(width, width, dtype=torch.bool, device=self.device).tril()
        eye = torch.eye(width, dtype=torch.bool, device=self.device)
        allowed = (causal[None] & real[:, None, :]) | eye[None]
        w = self.weights
        hidden = run_layers(
            w,
            F.embedding(ids, w.embed),
            self._cos[positions][:, :, None],
            self._sin[positions][:, :, None],
            self._views(rows, width),
            torch.arange(width, device=self.device),
            attention_bias(allowed[:, None], self.dtype),
        )
        self._pos[:rows] = positions[:, -1] + 1
        self._pos[rows : self._b] = 0
        self._tok[: self._b] = 0
        return final_logits(w, hidden[:, -1]).float()

    def _step_body(self) -> None:
        """The decode step of the current bucket: read `_tok`, `_pos`, `_slot`; write the cache, mask, `_logits`.

        Fixed shapes and no host synchronisation, so it can be captured; running it twice on the same inputs
        leaves the same state (it writes the slot it then reads), which makes graph warm-up harmless.
        """
        b, s, w = self._b, self._s, self.weights
        keymask = self._keymask[:b, :s]
        keymask.index_fill_(1, self._slot, True)
        pos = self._pos[:b]
        hidden = run_layers(
            w,
            F.embedding(self._tok[:b, None], w.embed),
            self._cos.index_select(0, pos)[:, None, None],
            self._sin.index_select(0, pos)[:, None, None],
            self._views(b, s),
            self._slot,
            attention_bias(keymask[:, None, None], self.dtype),
        )
        self._logits[:b].copy_(final_logits(w, hidden[:, -1]))

    def _run_step(self) -> None:
        if not self.graphs:
            self._step_body()
            return
        key = (self._b, self._s)
        graph = self._graph_of.get(key)
        if graph is None:
            graph = self._capture()
            self._graph_of[key] = graph
        graph.replay()

    def _capture(self) -> Any:
        """Capture the current bucket's step (after a warm-up on a side stream, as CUDA graphs require)."""
        started = time.perf_counter()
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream(device=self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self._step_body()
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self._pool):
                self._step_body()
        except RuntimeError as exc:
            raise RuntimeError(
                f"CUDA graph capture failed for batch {self._b} x length {self._s}: {exc}; "
                "StaticSampler(graphs=False) runs the same step eagerly"
            ) from exc
        torch.cuda.synchronize(self.device)
        self.capture_seconds += time.perf_counter() - started
        return graph

    @torch.no_grad()
    def step(self, tokens: Tensor) -> Tensor:
        """Feed one token per live cache row (`tokens[n]`); return the fp32 next-token logits `[n, V]`.

        The result is a view of a buffer the next step overwrites.
        """
        n = self._n
        if self._next >= self._end:
            raise ValueError(f"the generation started by prefill holds {self._end} tokens; no slot is left")
        if tokens.shape != (n,):
            raise ValueError(f"step takes one token per live row: shape ({n},), got {tuple(tokens.shape)}")
        self._tok[:n].copy_(tokens)
        self._slot.fill_(self._next)
        self._run_step()
        self._pos[:n] += 1
        self._next += 1
        return self._logits[:n]

    @torch.no_grad()
    def compact(self, keep: Tensor) -> None:
        """Keep only the live cache rows `keep[m]` (ascending indices among 0..n-1), in the smallest fitting bucket."""
        m, s = int(keep.shape[0]), self._s
        keep = keep.to(self.device)
        for k, v in self._cache:
            k[:m, :, :s] = k[: self._n, :, :s].index_select(0, keep)
            v[:m, :, :s] = v[: self._n, :, :s].index_select(0, keep)
        self._keymask[:m, :s] = self._keymask[: self._n, :s].index_select(0, keep)
        self._pos[:m] = self._pos[: self._n].index_select(0, keep)
        self._n, self._b = m, _pick(self.batch_buckets, max(m, 1))
        self.compactions += 1

    @torch.no_grad()
    def sample(
        self,
        ids: Tensor,
        mask: Tensor,
        max_new_tokens: int,
        stop_ids: Sequence[int],
        pad_id: int,
        temperature: float,
        generator: torch.Generator | None,
    ) -> Result:
        """Sample continuations of left-padded prompts `ids[B, P]` (`mask[B, P]` 1 = real token).

        Returns, on the sampler's device, `response[B, T]` (the stop token included, `pad_id` after),
        `response_mask[B, T]` (1 up to and including the token that stopped the row) and `finished[B]`
        (True when the row ended with one of `stop_ids`; False = cut at `max_new_tokens`). T is the
        longest response. `generator` must live on the sampler's device (unused at temperature 0).
        """
        rows = ids.shape[0]
        if generator is not None and temperature > 0 and generator.device.type != self.device.type:
            raise ValueError(f"generator on {generator.device}, sampler on {self.device}: use one on the device")
        dev = self.device
        tokens = torch.full((rows, max(max_new_tokens, 0)), pad_id, dtype=torch.long, device=dev)
        alive = torch.zeros_like(tokens)
        finished = torch.zeros(rows, dtype=torch.bool, device=dev)
        if max_new_tokens <= 0:
            return tokens, alive, finished
        full = self.prefill(ids, mask, max_new_tokens)  # [B, V]; rows that left the cache keep stale logits
        live_rows = torch.arange(rows, device=dev)
        stops = torch.tensor(list(stop_ids), dtype=torch.long, device=dev)
        for i in range(max_new_tokens):
            if temperature > 0:
                probs = torch.softmax(full / temperature, dim=-1)
                tok = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
            else:
                tok = full.argmax(-1)
            tok.masked_fill_(finished, pad_id)
            tokens[:, i] = tok
            alive[:, i] = (~finished).long()
            if stops.numel():
                finished |= (tok[:, None] == stops).any(-1)
            if i == max_new_tokens - 1:
                break
            if (i + 1) % self.check_every == 0:  # the only host synchronisation in the loop
                live = ~finished[live_rows]
                count = int(live.sum())
                if count == 0:
                    break
                if _pick(self.batch_buckets, count) < self._b:
                    keep = live.nonzero().squeeze(1)
                    live_rows = live_rows[keep]
                    self.compact(keep)
            full.index_copy_(0, live_rows, self.step(tok[live_rows]))
        length = int(alive.sum(1).max())
        return tokens[:, :length], alive[:, :length], finished


def _powers_of_two(limit: int) -> list[int]:
    return [1 << i for i in range(limit.bit_length()) if 1 << i <= limit]


def fast_sample(
    sampler_or_model: StaticSampler | Any,
    ids: Tensor,
    mask: Tensor,
    max_new_tokens: int,
    stop_ids: Sequence[int],
    pad_id: int,
    temperature: float,
    generator: torch.Generator | None,
) -> Result:
    """Sample continuations of left-padded prompts `ids[B, P]` with the fastest exact path for the model.

    A `StaticSampler` (built once per run; CUDA graphs on a GPU) samples directly. A model the tiny-model
    decoder supports, on CPU in fp32, goes through `decode.sample`, bit-identical to the trainer's earlier
    path (its first stop id plays EOS). Any other supported model gets a one-off eager `StaticSampler`.
    Returns `response[B, T]`, `response_mask[B, T]`, `finished[B]` as `StaticSampler.sample` describes.

    Raises:
        ValueError: the model is not supported (fall back to the framework's `generate`).
    """
    if isinstance(sampler_or_model, StaticSampler):
        return sampler_or_model.sample(ids, mask, max_new_tokens, stop_ids, pad_id, temperature, generator)
    model = sampler_or_model
    weight = model.model.embed_tokens.weight if hasattr(model, "model") else None
    on_cpu_fp32 = weight is not None and weight.device.type == "cpu" and weight.dtype == torch.float32
    if on_cpu_fp32 and max_new_tokens > 0 and decode.supports(model):
        eos, *rest = list(stop_ids) or [-1]  # -1 matches no token: no stop at all
        return decode.sample(model, ids, mask, max_new_tokens, eos, pad_id, temperature, generator, tuple(rest))
    sampler = StaticSampler(model, max_batch=ids.shape[0], max_len=ids.shape[1] + max_new_tokens, graphs=False)
    return sampler.sample(ids, mask, max_new_tokens, stop_ids, pad_id, temperature, generator)
