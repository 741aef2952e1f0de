"""The local backend's policy: a tiny random-init causal LM, its character tokenizer, and KV-cache sampling.

Nothing is downloaded: the model is a `transformers.LlamaForCausalLM` built from a small `LlamaConfig`,
and the tokenizer is a character vocabulary built from the task alphabet plus a few multi-character
tags (``<ans>``, ``</ans>``) that count as one token each.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import LlamaConfig, LlamaForCausalLM

DEFAULT_ALPHABET = "0123456789+-*=;> "
DEFAULT_TAGS = ("<ans>", "</ans>")
PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"


class TokenizerError(ValueError):
    """Text holds a character outside the tokenizer's alphabet."""


class CharTokenizer:
    """Character-level tokenizer with single-token tags; ids 0/1/2 are PAD/BOS/EOS.

    Attributes:
        vocab: the token strings, index = id.
    """

    def __init__(self, alphabet: str = DEFAULT_ALPHABET, tags: tuple[str, ...] = DEFAULT_TAGS) -> None:
        assert len(set(alphabet)) == len(alphabet), "alphabet has duplicate characters"
        self.tags = tuple(sorted(tags, key=len, reverse=True))  # longest tag wins
        self.vocab: list[str] = [PAD, BOS, EOS, *tags, *alphabet]
        self._ids = {tok: i for i, tok in enumerate(self.vocab)}
        self.pad_id, self.bos_id, self.eos_id = 0, 1, 2

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        """Return the ids of `text` (no BOS/EOS added).

        Raises:
            TokenizerError: a character is not in the alphabet.
        """
        ids: list[int] = []
        i = 0
        while i < len(text):
            tag = next((t for t in self.tags if text.startswith(t, i)), None)
            if tag is not None:
                ids.append(self._ids[tag])
                i += len(tag)
                continue
            if text[i] not in self._ids:
                raise TokenizerError(f"character {text[i]!r} at {i} of {text!r} is not in the alphabet")
            ids.append(self._ids[text[i]])
            i += 1
        return ids

    def decode(self, ids: list[int]) -> str:
        """Return the text of `ids`, dropping PAD/BOS and stopping at the first EOS."""
        out: list[str] = []
        for i in ids:
            if i == self.eos_id:
                break
            if i in (self.pad_id, self.bos_id):
                continue
            out.append(self.vocab[i])
        return "".join(out)


@dataclass(frozen=True)
class ModelShape:
    """The size knobs of the tiny policy."""

    n_layers: int = 3
    hidden: int = 128
    n_heads: int = 4
    max_len: int = 96


def build_model(shape: ModelShape, vocab_size: int, seed: int) -> LlamaForCausalLM:
    """Return a randomly initialised tiny Llama (fp32, eager-free SDPA attention) seeded by `seed`."""
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=shape.hidden,
        intermediate_size=shape.hidden * 2,
        num_hidden_layers=shape.n_layers,
        num_attention_heads=shape.n_heads,
        num_key_value_heads=shape.n_heads,
        max_position_embeddings=shape.max_len,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.float()  # in place: fp32 weights
    return model


def left_pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists into `ids[B, L]` and `mask[B, L]` (1 = real token)."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, seq in enumerate(seqs):
        ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
        mask[row, width - len(seq) :] = 1
    return ids, mask


@torch.no_grad()
def generate(
    model: LlamaForCausalLM,
    prompts: list[list[int]],
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    temperature: float,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sample responses for a batch of prompts with a KV cache (greedy when `temperature` == 0).

    Args:
        prompts: B token lists (each starting with BOS).

    Returns:
        `response[B, T]` token ids (PAD after EOS), `response_mask[B, T]` (1 for generated tokens up to
        and including EOS) and `finished[B]` (True when the response ended with EOS; False = truncated).
    """
    was_training = model.training
    model.eval()
    ids, mask = left_pad(prompts, pad_id)
    batch = ids.shape[0]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
    cache, logits = out.past_key_values, out.logits[:, -1, :]
    next_pos = positions[:, -1] + 1
    finished = torch.zeros(batch, dtype=torch.bool)
    tokens, alive_mask = [], []
    for _ in range(max_new_tokens):
        if temperature > 0:
            probs = torch.softmax(logits / temperature, dim=-1)
            tok = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        else:
            tok = logits.argmax(-1)
        tok = torch.where(finished, torch.full_like(tok, pad_id), tok)
        alive_mask.append((~finished).long())
        tokens.append(tok)
        finished = finished | (tok == eos_id)
        if bool(finished.all()):
            break
        mask = torch.cat([mask, torch.ones((batch, 1), dtype=torch.long)], dim=-1)
        out = model(
            input_ids=tok[:, None],
            attention_mask=mask,
            position_ids=next_pos[:, None],
            past_key_values=cache,
            use_cache=True,
        )
        cache, logits = out.past_key_values, out.logits[:, -1, :]
        next_pos = next_pos + 1
    model.train(was_training)
    return torch.stack(tokens, dim=1), torch.stack(alive_mask, dim=1), finished
