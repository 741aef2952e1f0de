"""Supervised warm start of the tiny policy on worked solutions (with the task's injected mistakes).

RL needs a policy that sometimes succeeds; a random-init model never does. The warm start trains on the
harness's `warmstart_data` (prompt + imperfect worked solution) so the base policy is mediocre, then caches
the weights under ``$EVOTRAINER_CACHE/warmstart/<hash>.pt`` (default ``~/.cache/evotrainer``), keyed by
the data file's bytes, the model shape, the tokenizer, the step count and the seed. Later runs load it in
well under a second.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import LlamaForCausalLM

from trainer_backend.local.model import CharTokenizer, ModelShape, build_model, left_pad

BATCH_SIZE = 64
PEAK_LR = 3e-3


def cache_dir() -> Path:
    """Return the warm-start cache folder (``$EVOTRAINER_CACHE/warmstart`` or ``~/.cache/evotrainer/warmstart``)."""
    root = os.environ.get("EVOTRAINER_CACHE") or str(Path.home() / ".cache" / "evotrainer")
    return Path(root) / "warmstart"


def cache_key(data: bytes, shape: ModelShape, tok: CharTokenizer, steps: int, seed: int) -> str:
    """Return the content hash naming one warm start."""
    meta = json.dumps(
        {"shape": shape.__dict__, "vocab": tok.vocab, "steps": steps, "seed": seed, "bs": BATCH_SIZE, "lr": PEAK_LR},
        sort_keys=True,
    )
    return hashlib.sha256(data + meta.encode()).hexdigest()[:24]


def _load_pairs(path: Path, tok: CharTokenizer) -> list[tuple[list[int], list[int]]]:
    pairs = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        if (
            not isinstance(row, dict)
            or not isinstance(row.get("prompt"), str)
            or not isinstance(row.get("response"), str)
        ):
            raise ValueError(f"{path}:{number}: expected {{'prompt': str, 'response': str}}")
        pairs.append(([tok.bos_id, *tok.encode(row["prompt"])], [*tok.encode(row["response"]), tok.eos_id]))
    if not pairs:
        raise ValueError(f"{path}: no warm-start rows")
    return pairs


def sft_batch(pairs: list[tuple[list[int], list[int]]], pad_id: int) -> tuple[torch.Tensor, ...]:
    """Return `ids[B, L]`, `attn[B, L]`, `positions[B, L]`, `labels[B, L]` (-100 outside the response)."""
    seqs = [p + r for p, r in pairs]
    ids, attn = left_pad(seqs, pad_id)
    labels = torch.full_like(ids, -100)
    width = ids.shape[1]
    for row, (_, response) in enumerate(pairs):
        labels[row, width - len(response) :] = torch.tensor(response)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    return ids, attn, positions, labels


def train_warmstart(
    model: LlamaForCausalLM,
    pairs: list[tuple[list[int], list[int]]],
    steps: int,
    seed: int,
    pad_id: int,
    log: Callable[[str], None],
) -> None:
    """Run `steps` AdamW steps of next-token cross-entropy on response tokens (warm-up + cosine schedule)."""
    opt = torch.optim.AdamW(model.parameters(), lr=PEAK_LR, weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    warmup = max(1, steps // 20)
    for step in range(steps):
        lr = PEAK_LR * min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * step / max(1, steps)))
        for group in opt.param_groups:
            group["lr"] = lr
        idx = torch.randint(len(pairs), (BATCH_SIZE,), generator=gen).tolist()
        ids, attn, positions, labels = sft_batch([pairs[i] for i in idx], pad_id)
        logits = model(input_ids=ids, attention_mask=attn, position_ids=positions).logits
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 250 == 0 or step == steps - 1:
            log(f"warmstart step {step}/{steps} loss {loss.item():.4f} lr {lr:.2e}")


def warm_start(
    data_path: Path, shape: ModelShape, tok: CharTokenizer, steps: int, seed: int, log: Callable[[str], None]
) -> tuple[LlamaForCausalLM, bool, Path]:
    """Return the warm-started model, whether it came from the cache, and the cache file.

    Raises:
        ValueError: the warm-start data file is missing or malformed.
    """
    if not data_path.is_file():
        raise ValueError(f"{data_path}: warm-start data not found (trainer.yaml field 'warmstart_data')")
    data = data_path.read_bytes()
    path = cache_dir() / f"{cache_key(data, shape, tok, steps, seed)}.pt"
    model = build_model(shape, len(tok), seed)
    if path.is_file():
        model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        return model, True, path
    t0 = time.time()
    train_warmstart(model, _load_pairs(data_path, tok), steps, seed, tok.pad_id, log)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    torch.save(model.state_dict(), tmp)
    tmp.replace(path)
    log(f"warmstart: trained {steps} steps in {time.time() - t0:.1f}s, cached at {path}")
    return model, False, path
