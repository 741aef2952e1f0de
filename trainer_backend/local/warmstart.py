"""Supervised warm start of the policy on worked solutions (with the task's injected mistakes).

RL needs a policy that sometimes succeeds; a random-init model never does, and a pretrained one may never
write the answer format its task declares (SmolLM2 as shipped never does). The warm start trains
on the harness's `warmstart_data` (prompt + imperfect worked solution) so the base policy is mediocre, then
caches the weights under ``$EVOTRAINER_CACHE/warmstart/<hash>.pt`` (default ``~/.cache/evotrainer``), keyed
by the data file's bytes, what the model is (the tiny model's shape and vocabulary; a Hugging Face model's
folder fingerprint, tokenizer, prompt format and device), the step count, batch size, learning rate and
seed. Later runs load it in well under a second.

The warm start stops on evidence (300 steps gave a letters task a policy that never wrote its
answer): after the configured steps a `probe` reads the greedy answer-format rate on the task's training
prompts; below the threshold it trains another round of the same length, up to a step cap. What it
reached (steps, rate) is kept beside the cached weights (``<hash>.json``) and reported by the run.

Prompts are what the policy reads in RL (`Policy.prompt_ids`: the prompt template and, for ``chat``, the
chat template); every target ends with the tokenizer's `end_id`, the token sampling stops on (the chat
template's end of turn: never ``tokenizer.eos_token`` alone).

For an agentic harness a warm-start response is a whole worked trajectory, observations included (a
tool call, the environment's observation, then the final answer, each in the harness's own syntax): the
observation spans (the manifest's ``observation`` template) are context, not targets, exactly as in RL
with ``mask_observations``, so the warm start never teaches the policy to write tool results itself.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.atomic import atomic_path, write_atomic
from harness.rows import iter_rows
from trainer_backend.local.model import left_pad
from trainer_backend.local.policy import Policy

BATCH_SIZE = 64  # the tiny model's defaults (trainer.yaml: warmstart_batch_size, warmstart_lr)
PEAK_LR = 3e-3
MIN_FORMAT = 0.5  # trainer.yaml warmstart_min_format: the answer-format rate the warm start must reach
MAX_ROUNDS = 8  # warmstart_max_steps defaults to this many rounds of warmstart_steps


@dataclass(frozen=True)
class Evidence:
    """When the warm start stops: a format-rate threshold and a step cap (None: MAX_ROUNDS rounds)."""

    probe: Callable[[], float | None] | None = None  # the greedy answer-format rate now (None: not measurable)
    min_format: float = MIN_FORMAT
    max_steps: int | None = None

    def cap(self, steps: int) -> int:
        return MAX_ROUNDS * steps if self.max_steps is None else max(steps, self.max_steps)

    def short(self, rate: float | None) -> bool:
        return rate is not None and rate < self.min_format


@dataclass(frozen=True)
class WarmStart:
    """One warm start's outcome: cached or trained now, its weights file, the steps trained in all, and the
    answer-format rate it reached (None: not measured: no answer protocol, an agentic harness, an old cache)."""

    cached: bool
    path: Path
    steps: int
    format_rate: float | None
    min_format: float

    @property
    def reached(self) -> bool:
        return self.format_rate is None or self.format_rate >= self.min_format


def cache_dir() -> Path:
    """Return the warm-start cache folder (``$EVOTRAINER_CACHE/warmstart`` or ``~/.cache/evotrainer/warmstart``)."""
    root = os.environ.get("EVOTRAINER_CACHE") or str(Path.home() / ".cache" / "evotrainer")
    return Path(root) / "warmstart"


def cache_key(
    data: bytes,
    identity: dict[str, Any],
    steps: int,
    seed: int,
    observation: str | None = None,
    batch_size: int = BATCH_SIZE,
    lr: float = PEAK_LR,
    stop: tuple[float, int | None] = (MIN_FORMAT, None),
) -> str:
    """Return the content hash naming one warm start.

    `identity` says what the model is (the tiny model: ``shape`` and ``vocab``, as the keys of older
    caches were made, so they stay valid); `observation` is the masked template (agentic only); `stop` the
    format threshold and step cap (keyed only when not the defaults, so existing keys stay valid)."""
    fields = {**identity, "steps": steps, "seed": seed}
    fields.update(bs=batch_size, lr=lr)
    if observation is not None:  # only agentic harnesses: every single-turn key stays what it was
        fields["masked_observation"] = observation
    if stop != (MIN_FORMAT, None):
        fields["stop"] = list(stop)
    meta = json.dumps(fields, sort_keys=True)
    return hashlib.sha256(data + meta.encode()).hexdigest()[:24]


def observation_regex(observation: str) -> re.Pattern[str] | None:
    """The spans of a response that are observations, from the template (None: no text around ``{result}``)."""
    prefix, _, suffix = observation.partition("{result}")
    if not prefix or not suffix:
        return None
    return re.compile(re.escape(prefix) + ".*?" + re.escape(suffix), re.S)


def _encode_response(text: str, tok: Any, observation: re.Pattern[str] | None) -> tuple[list[int], list[int]]:
    """Response ids (the end id added) and their labels: -100 inside observation spans, else the id."""
    if observation is None:
        ids = [*tok.encode(text), tok.end_id]
        return ids, ids
    ids, labels, at = [], [], 0
    for match in observation.finditer(text):
        policy, obs = tok.encode(text[at : match.start()]), tok.encode(match.group(0))
        ids += policy + obs
        labels += policy + [-100] * len(obs)
        at = match.end()
    tail = [*tok.encode(text[at:]), tok.end_id]
    return ids + tail, labels + tail


def _load_pairs(
    path: Path, policy: Policy, observation: re.Pattern[str] | None = None
) -> list[tuple[list[int], list[int], list[int]]]:
    pairs = []
    for _, row in iter_rows(path, "warmstart"):  # the row rules the session's preflight checks
        pairs.append((policy.prompt_ids(row["prompt"]), *_encode_response(row["response"], policy.tok, observation)))
    return pairs


def sft_batch(pairs: list[tuple[list[int], list[int], list[int]]], pad_id: int) -> tuple[torch.Tensor, ...]:
    """Return `ids[B, L]`, `attn[B, L]`, `positions[B, L]`, `labels[B, L]` (-100 outside the response).

    Each pair is `(prompt ids, response ids, response labels)`; labels are the response ids except -100 at
    tokens that are context only (observations)."""
    seqs = [p + r for p, r, _ in pairs]
    ids, attn = left_pad(seqs, pad_id)
    labels = torch.full_like(ids, -100)
    width = ids.shape[1]
    for row, (_, _, response_labels) in enumerate(pairs):
        labels[row, width - len(response_labels) :] = torch.tensor(response_labels)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    return ids, attn, positions, labels


def train_warmstart(
    policy: Policy,
    pairs: list[tuple[list[int], list[int], list[int]]],
    steps: int,
    seed: int,
    log: Callable[[str], None],
    batch_size: int = BATCH_SIZE,
    peak_lr: float = PEAK_LR,
) -> None:
    """Run `steps` AdamW steps of next-token cross-entropy on response tokens (warm-up + cosine schedule)."""
    model = policy.model
    opt = torch.optim.AdamW(model.parameters(), lr=peak_lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    warmup = max(1, steps // 20)
    for step in range(steps):
        lr = peak_lr * min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * step / max(1, steps)))
        for group in opt.param_groups:
            group["lr"] = lr
        idx = torch.randint(len(pairs), (batch_size,), generator=gen).tolist()
        batch = sft_batch([pairs[i] for i in idx], policy.tok.pad_id)
        ids, attn, positions, labels = (t.to(policy.device) for t in batch)
        with policy.autocast():
            logits = model(input_ids=ids, attention_mask=attn, position_ids=positions).logits
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].float().reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 250 == 0 or step == steps - 1:
            log(f"warmstart step {step}/{steps} loss {loss.item():.4f} lr {lr:.2e}")


PROBE_ROWS = 64  # training prompts the format probe answers greedily


def format_probe(
    policy: Policy, prompts: list[str], extract: Callable[[str], Any], max_new_tokens: int
) -> Callable[[], float | None]:
    """The share of the first PROBE_ROWS `prompts` whose greedy response `extract` reads a non-empty answer from.

    It draws no random numbers the run uses (greedy, in a forked RNG) and leaves the model's mode as it was."""
    ids = [policy.prompt_ids(p) for p in prompts[:PROBE_ROWS]]

    def probe() -> float | None:
        if not ids:
            return None
        model, training = policy.model, policy.model.training
        policy.updated()
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            resp, _, _ = policy.generate(ids, max_new_tokens, 0.0, None)
        model.train(training)
        return sum(bool(extract(policy.tok.decode(r.tolist()))) for r in resp) / len(ids)  # an empty answer: none

    return probe


def warm_start(
    data_path: Path,
    policy: Policy,
    identity: dict[str, Any],
    steps: int,
    seed: int,
    log: Callable[[str], None],
    observation: str | None = None,
    batch_size: int = BATCH_SIZE,
    peak_lr: float = PEAK_LR,
    evidence: Evidence = Evidence(),
) -> WarmStart:
    """Warm-start `policy.model` in place (or load the cached result) until `evidence` says stop.

    `identity` names the model as `cache_key` needs it; `observation` is an agentic harness's observation
    template: its spans in the responses are masked. After `steps`, and after each further round of `steps`,
    `evidence.probe` reads the answer-format rate; training goes on while it is below `evidence.min_format`
    and the steps stay within `evidence.cap(steps)`.

    Raises:
        ValueError: the warm-start data file is missing or malformed.
    """
    if not data_path.is_file():
        raise ValueError(f"{data_path}: warm-start data not found (trainer.yaml field 'warmstart_data')")
    data = data_path.read_bytes()
    stop = (evidence.min_format, evidence.max_steps)
    path = cache_dir() / f"{cache_key(data, identity, steps, seed, observation, batch_size, peak_lr, stop)}.pt"
    facts = path.with_suffix(".json")
    cap = evidence.cap(steps)
    if path.is_file():
        policy.model.load_state_dict(torch.load(path, map_location=policy.device, weights_only=True))
        if facts.is_file():
            known = json.loads(facts.read_text())
            return WarmStart(True, path, int(known["steps"]), known["format_rate"], evidence.min_format)
        trained, cached = steps, True  # cached before the warm start stopped on evidence: check it now
    else:
        t0 = time.time()
        spans = None if observation is None else observation_regex(observation)
        pairs = _load_pairs(data_path, policy, spans)
        train_warmstart(policy, pairs, steps, seed, log, batch_size, peak_lr)
        log(f"warmstart: trained {steps} steps in {time.time() - t0:.1f}s")
        trained, cached = steps, False
    probe = evidence.probe
    rate = None if probe is None else probe()
    while probe is not None and evidence.short(rate) and 0 < steps <= cap - trained:
        log(f"warmstart: answer-format rate {rate:.2f} < {evidence.min_format} after {trained} steps: {steps} more")
        if cached:
            spans = None if observation is None else observation_regex(observation)
            pairs, cached = _load_pairs(data_path, policy, spans), False
        train_warmstart(policy, pairs, steps, seed + trained, log, batch_size, peak_lr)
        trained += steps
        rate = probe()
    if rate is not None:
        log(f"warmstart: answer-format rate {rate:.2f} after {trained} steps (threshold {evidence.min_format})")
    if not cached or not path.is_file():
        _store(path, policy.model.state_dict())
        log(f"warmstart: {trained} steps cached at {path}")
    _store_facts(facts, {"steps": trained, "format_rate": rate})
    return WarmStart(cached, path, trained, rate, evidence.min_format)


def _store(path: Path, state: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def _store_facts(path: Path, facts: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(facts))
