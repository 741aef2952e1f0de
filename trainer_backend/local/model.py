"""The local backend's policy: a tiny random-init causal LM, its character tokenizer, and KV-cache sampling.

Nothing is downloaded: the model is a `transformers.LlamaForCausalLM` built from a small `LlamaConfig`.
The tokenizer is a character vocabulary with multi-character special tokens that count as one token
each; nothing about it is fixed here: `trainer_backend/local/vocab.py` builds it from the harness's data
files and the special tokens (and alphabet order) its manifest declares.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from harness.manifest import RESERVED_TOKENS
from trainer_backend.local import decode

PAD, BOS, EOS = RESERVED_TOKENS


class TokenizerError(ValueError):
    """Text holds a character outside the tokenizer's vocabulary.

    Attributes:
        char: the character; index: its position in the text.
    """

    def __init__(self, char: str, index: int, text: str) -> None:
        super().__init__(f"character {char!r} (U+{ord(char):04X}) at {index} of {text!r} is not in the vocabulary")
        self.char, self.index = char, index


class CharTokenizer:
    """Character-level tokenizer with single-token specials; ids 0/1/2 are PAD/BOS/EOS.

    ``vocab`` is the whole token list (index = id): PAD, BOS, EOS, then special tokens (entries longer
    than one character), then single characters. A checkpoint stores it, so a run that continues a policy
    reads its text exactly as the policy was trained to.

    Attributes:
        vocab: the token strings, index = id.
    """

    def __init__(self, vocab: Sequence[str]) -> None:
        vocab = list(vocab)
        if vocab[:3] != [PAD, BOS, EOS]:
            raise ValueError(f"a vocabulary starts with {PAD}, {BOS}, {EOS}; got {vocab[:3]}")
        if len(set(vocab)) != len(vocab):
            raise ValueError("the vocabulary repeats a token")
        self.vocab: list[str] = vocab
        self.specials = tuple(sorted((t for t in vocab[3:] if len(t) > 1), key=len, reverse=True))  # longest wins
        self._ids = {tok: i for i, tok in enumerate(self.vocab)}
        self.pad_id, self.bos_id, self.eos_id = 0, 1, 2
        self.end_id = self.eos_id  # what a warm-start target ends with
        self.stop_ids: tuple[int, ...] = (self.eos_id,)

    @classmethod
    def build(cls, texts: Iterable[str], special_tokens: Sequence[str] = (), alphabet: str = "") -> CharTokenizer:
        """Return the tokenizer of `texts`: specials, then `alphabet` in its order, then the other characters sorted.

        A special token in a text counts as one token (its characters are not added on its account).
        """
        specials = tuple(sorted(special_tokens, key=len, reverse=True))
        found: set[str] = set()
        for text in texts:
            found.update(p for p in _pieces(text, specials) if len(p) == 1)
        rest = sorted(found - set(alphabet))
        return cls([PAD, BOS, EOS, *special_tokens, *alphabet, *rest])

    def __len__(self) -> int:
        return len(self.vocab)

    def prompt_ids(self, prompt: str) -> list[int]:
        """The ids the model reads before its response: BOS, then the prompt's characters.

        Raises:
            TokenizerError: a character is not in the vocabulary.
        """
        return [self.bos_id, *self.encode(prompt)]

    def encode(self, text: str) -> list[int]:
        """Return the ids of `text` (no BOS/EOS added).

        Raises:
            TokenizerError: a character is not in the vocabulary.
        """
        ids: list[int] = []
        index = 0
        for piece in _pieces(text, self.specials):
            token = self._ids.get(piece)
            if token is None:
                raise TokenizerError(piece, index, text)
            ids.append(token)
            index += len(piece)
        return ids

    def encode_known(self, text: str) -> list[int]:
        """Return the ids of `text`, dropping characters outside the vocabulary.

        For text the harness does not control ahead of time (an environment's tool results): the policy
        sees what its vocabulary can hold, and the episode goes on.
        """
        return [i for i in (self._ids.get(p) for p in _pieces(text, self.specials)) if i is not None]

    def id_of(self, token: str) -> int | None:
        """The id of one token (a special token or a single character), None when it is not in the vocabulary."""
        return self._ids.get(token)

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


def _pieces(text: str, specials: Sequence[str]) -> Iterator[str]:
    """Split `text` into special tokens (longest first, greedy from the left) and single characters."""
    i = 0
    while i < len(text):
        special = next((t for t in specials if text.startswith(t, i)), None)
        piece = special if special is not None else text[i]
        yield piece
        i += len(piece)


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


def generate(
    model: LlamaForCausalLM,
    prompts: list[list[int]],
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    temperature: float,
    generator: torch.Generator | None,
    stop_ids: tuple[int, ...] = (),
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sample responses for a batch of prompts with a KV cache (greedy when `temperature` == 0).

    Args:
        prompts: B token lists (each starting with BOS).
        stop_ids: token ids besides EOS that end a response (kept as its last token), e.g. the end of a tool call.

    Returns:
        `response[B, T]` token ids (PAD after the stop), `response_mask[B, T]` (1 for generated tokens up to
        and including the stop token) and `finished[B]` (True when the response ended with EOS or a stop id;
        False = truncated at `max_new_tokens`). Decoding runs in `trainer_backend.local.decode` (the same
        maths as the model's forward, without its per-token overhead).
    """
    assert decode.supports(model), "generate expects a model from build_model"
    was_training = model.training
    model.eval()
    ids, mask = left_pad(prompts, pad_id)
    try:
        return decode.sample(model, ids, mask, max_new_tokens, eos_id, pad_id, temperature, generator, stop_ids)
    finally:
        model.train(was_training)
