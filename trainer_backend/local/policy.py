"""The policy a local run trains: a model, its tokenizer, the device, and how it samples.

One object for both kinds of model the local backend trains, so the trainer, the episode loop and the warm
start read the same way whatever trains:

- ``tiny``: the built-in character Llama (`model.py`), fp32, sampled by its own fast decoder (`decode.py`);
  on the CPU every number is what it always was;
- a Hugging Face causal LM (`hf.py`): fp32 master weights, bf16 autocast on CUDA (the loss's log-softmax in
  fp32, `grpo.token_logprobs`), sampled by the fast static-cache sampler where it supports the architecture,
  else by the model's own ``generate`` (slower, correct; the reason is logged once in ``train.log``).

Sampling returns CPU tensors (ids, masks): the bookkeeping (texts, rollouts, advantages) stays on the CPU and
the update moves what it needs to the device.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from trainer_backend.local.model import generate as tiny_generate
from trainer_backend.local.model import left_pad


class Tokenizer(Protocol):
    """What the trainer needs of a tokenizer (`CharTokenizer` and `hf.HFTokenizer` both provide it)."""

    pad_id: int
    end_id: int
    stop_ids: tuple[int, ...]

    def prompt_ids(self, prompt: str) -> list[int]:
        """The ids the model reads before its response."""
        ...

    def encode(self, text: str) -> list[int]:
        """The ids of text the policy writes."""
        ...

    def encode_known(self, text: str) -> list[int]:
        """The ids of untrusted text (a tool result), without anything that would act as a control token."""
        ...

    def decode(self, ids: list[int]) -> str:
        """The text of response ids, up to the first stop id."""
        ...

    def id_of(self, token: str) -> int | None:
        """The id of a text that is exactly one token, else None."""
        ...


@dataclass
class Policy:
    """The model being trained and everything needed to sample from it and score its tokens.

    Attributes:
        model: the torch module (fp32 master weights on `device`).
        tok: its tokenizer.
        device: where it trains.
        render: the trainer setting `prompt_template` applied to a row's prompt.
        kind: ``tiny`` or ``pretrained``.
        sampler: the fast sampler of a Hugging Face model (None: the tiny decoder, or `generate` fallback).
        note: why the fast sampler is not used ("" when it is, or for the tiny model).
    """

    model: Any
    tok: Any
    device: torch.device
    render: Callable[[str], str]
    kind: str = "tiny"
    sampler: Any | None = None
    note: str = ""
    _autocast: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self._autocast = self.device.type == "cuda"

    @property
    def sample_device(self) -> str:
        """The device of the sampling random stream (a CUDA generator for a model sampled on the GPU)."""
        return self.device.type

    @property
    def dtype_name(self) -> str:
        """The compute dtype of forwards: ``bfloat16`` under CUDA autocast, else ``float32``."""
        return "bfloat16" if self._autocast else "float32"

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        """bf16 autocast on CUDA (fp32 master weights); nothing on the CPU."""
        if self._autocast:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                yield
        else:
            yield

    def prompt_ids(self, prompt: str) -> list[int]:
        """The ids of a row's prompt, through the run's prompt template and the tokenizer's format."""
        return list(self.tok.prompt_ids(self.render(prompt)))

    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        temperature: float,
        generator: torch.Generator | None,
        extra_stops: tuple[int, ...] = (),
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample responses (greedy at temperature 0); see `model.generate` for the returned CPU tensors.

        A response ends at any of the tokenizer's stop ids or `extra_stops` (kept as its last token).
        """
        stops = tuple(self.tok.stop_ids)
        if self.kind == "tiny":
            return tiny_generate(
                self.model, prompts, max_new_tokens, stops[0], self.tok.pad_id, temperature, generator,
                (*stops[1:], *extra_stops),
            )  # fmt: skip
        size = len(prompts) if self.sampler is None else self.sampler.batch_buckets[-1]
        parts = [self._generate(prompts[i : i + size], max_new_tokens, temperature, generator, (*stops, *extra_stops))
                 for i in range(0, len(prompts), size)]  # fmt: skip
        if len(parts) == 1:
            return parts[0]
        width = max(p[0].shape[1] for p in parts)
        pad = self.tok.pad_id
        resp = torch.cat([F.pad(p[0], (0, width - p[0].shape[1]), value=pad) for p in parts])
        mask = torch.cat([F.pad(p[1], (0, width - p[1].shape[1])) for p in parts])
        return resp, mask, torch.cat([p[2] for p in parts])

    def _generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        temperature: float,
        generator: torch.Generator | None,
        stops: tuple[int, ...],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One batch through the fast sampler (when it has room for it) or the model's own `generate`."""
        ids, mask = left_pad(prompts, self.tok.pad_id)
        ids, mask = ids.to(self.device), mask.to(self.device)
        was_training = self.model.training
        self.model.eval()
        try:
            if self.sampler is not None and ids.shape[1] + max_new_tokens <= self.sampler.len_buckets[-1]:
                out = self.sampler.sample(ids, mask, max_new_tokens, stops, self.tok.pad_id, temperature, generator)
            else:  # no fast sampler, or a context longer than it was sized for (an unusually long episode)
                with self.autocast():
                    out = hf_generate(
                        self.model, ids, mask, max_new_tokens, stops, self.tok.pad_id, temperature, generator
                    )
        finally:
            self.model.train(was_training)
        resp, resp_mask, finished = out
        return resp.cpu(), resp_mask.cpu(), finished.cpu()

    def sequence_logits(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, resp: torch.Tensor, resp_mask: torch.Tensor
    ) -> torch.Tensor:
        """Return response-position logits `[B, T, V]` for prompts `[B, Lp]` followed by responses `[B, T]`."""
        ids = torch.cat([prompt_ids, resp], dim=1).to(self.device)
        attn = torch.cat([prompt_mask, resp_mask], dim=1).to(self.device)
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        with self.autocast():
            if self.kind == "tiny":
                logits: torch.Tensor = self.model(input_ids=ids, attention_mask=attn, position_ids=positions).logits
            else:
                logits = self.model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=False).logits
        lp = prompt_ids.shape[1]
        return logits[:, lp - 1 : lp - 1 + resp.shape[1]]

    def updated(self) -> None:
        """Tell the sampler the weights changed (after every optimizer step)."""
        if self.sampler is not None:
            self.sampler.refresh()


def hf_generate(
    model: Any,
    ids: torch.Tensor,
    mask: torch.Tensor,
    max_new_tokens: int,
    stop_ids: tuple[int, ...],
    pad_id: int,
    temperature: float,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sample with the model's own ``generate`` (the fallback for architectures the fast sampler lacks).

    ``generate`` draws from torch's global random stream, so the draw is seeded from `generator` inside a
    forked stream: the same generator state gives the same tokens, and the global stream is left alone.
    Returns `response[B, T]`, `response_mask[B, T]`, `finished[B]` as `decode.sample` does.
    """
    seed = 0
    if generator is not None:
        seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device).item())
    devices = [ids.device] if ids.device.type == "cuda" else []
    from transformers import GenerationConfig

    # Only these settings, with the model's own generation config out of the way for the call: its top-p,
    # repetition penalty, suppressed tokens, ... would sample from another distribution than the one the
    # update scores (the policy at `temperature`).
    sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if temperature > 0 else {}
    settings = GenerationConfig(
        max_new_tokens=max_new_tokens, eos_token_id=list(stop_ids), pad_token_id=pad_id, use_cache=True, **sampling
    )
    own, model.generation_config = model.generation_config, settings
    try:
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            torch.manual_seed(seed)
            out = model.generate(input_ids=ids, attention_mask=mask)
    finally:
        model.generation_config = own
    resp = out[:, ids.shape[1] :]
    if resp.shape[1] == 0:
        resp = torch.full((ids.shape[0], 1), pad_id, dtype=torch.long, device=ids.device)
    is_stop = torch.isin(resp, torch.tensor(stop_ids, device=resp.device))
    before_stop = (is_stop.long().cumsum(-1) - is_stop.long()) == 0  # up to and including the first stop
    finished = is_stop.any(-1)
    resp = torch.where(before_stop, resp, torch.full_like(resp, pad_id))
    return resp, before_stop.long(), finished


MAX_SAMPLER_BATCH = {"cuda": 2048, "cpu": 256}  # rows one sampler call holds (larger batches go in chunks)


def fast_sampler(model: Any, device: torch.device, max_batch: int, max_len: int) -> tuple[Any | None, str]:
    """The static-shape sampler for a Hugging Face model (`fastgen`: bf16 and CUDA graphs on a GPU, fp32
    eager on the CPU), sized for `max_batch` rows of `max_len` tokens; or (None, why not) when it cannot
    reproduce the model exactly, in which case the model's own ``generate`` samples."""
    from trainer_backend.local.fastgen import StaticSampler, supports

    reason = supports(model, max_len)
    if reason is not None:
        return None, reason
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    rows = max(1, min(max_batch, MAX_SAMPLER_BATCH.get(device.type, 256)))
    return StaticSampler(model, max_batch=rows, max_len=max_len, dtype=dtype, device=device), ""
