"""The model card a run records in ``summary.json``: what model it trained, named well enough to tell two apart.

The trainer writes it (`trainer_backend/local/model_card.py` computes the digests); `status` and the report read
it back through `read_card`. A card names the ``model:`` path, the architecture (model class and config
``model_type``), the parameter count, the tokenizer (class and vocabulary size), the sha256 of the weights as
built from the path (``weights_sha256``) and of the weights step 1 trained from (``start_weights_sha256``:
after a parent's checkpoint or the warm start), the compute dtype and the device. Pure: no torch here; reading
is tolerant (a summary without a card, or with a malformed one, gives None).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from diagnostics.schema import SUMMARY_FILE

SUMMARY_KEY = "model"  # summary.json key of the card
DIGEST_CHARS = 16  # hex characters of a digest in one-line names (the card keeps the full sha256)


@dataclass(frozen=True)
class ModelCard:
    """What model a run trained (see the module docstring for each field)."""

    path: str
    architecture: str
    model_type: str
    parameters: int
    tokenizer_class: str
    vocab_size: int
    weights_sha256: str
    dtype: str
    device: str
    start_weights_sha256: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The card as ``summary.json`` and checkpoints hold it (the tokenizer as one object)."""
        out: dict[str, Any] = {
            "path": self.path,
            "architecture": self.architecture,
            "model_type": self.model_type,
            "parameters": self.parameters,
            "tokenizer": {"class": self.tokenizer_class, "vocab_size": self.vocab_size},
            "weights_sha256": self.weights_sha256,
            "dtype": self.dtype,
            "device": self.device,
        }
        if self.start_weights_sha256 is not None:
            out["start_weights_sha256"] = self.start_weights_sha256
        return out

    def identity(self) -> tuple[object, ...]:
        """What must stay the same under one lineage: the architecture, its size and the path's weights (a tiny
        model has no stored weights: its seeded initialisation is not compared)."""
        weights = None if self.path == "tiny" else self.weights_sha256
        return (self.architecture, self.model_type, self.parameters, weights)

    def line(self) -> str:
        """One line naming the model: path, architecture, size, tokenizer, weights digest, dtype and device."""
        return (
            f"{self.path} ({self.architecture}, {self.model_type}; {_count(self.parameters)} parameters; tokenizer "
            f"{self.tokenizer_class}, {self.vocab_size} ids; weights sha256 {self.weights_sha256[:DIGEST_CHARS]}; "
            f"{self.dtype} on {self.device})"
        )


def card_from_json(raw: object) -> ModelCard | None:
    """Parse a card written by `ModelCard.as_json`; None when `raw` is not one."""
    if not isinstance(raw, Mapping):
        return None
    tok = raw.get("tokenizer")
    start = raw.get("start_weights_sha256")
    try:
        card = ModelCard(
            path=str(raw["path"]),
            architecture=str(raw["architecture"]),
            model_type=str(raw["model_type"]),
            parameters=int(raw["parameters"]),
            tokenizer_class=str(tok["class"]) if isinstance(tok, Mapping) else "",
            vocab_size=int(tok["vocab_size"]) if isinstance(tok, Mapping) else 0,
            weights_sha256=str(raw["weights_sha256"]),
            dtype=str(raw["dtype"]),
            device=str(raw["device"]),
            start_weights_sha256=None if start is None else str(start),
        )
    except (KeyError, TypeError, ValueError):
        return None
    return card


def read_card(run_dir: Path) -> ModelCard | None:
    """The card a run folder's ``summary.json`` records; None when the run has none (unfinished, another
    backend, a run from before cards, or an unreadable file)."""
    try:
        summary = orjson.loads((run_dir / SUMMARY_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return card_from_json(summary.get(SUMMARY_KEY)) if isinstance(summary, dict) else None


def _count(n: int) -> str:
    for unit, size in (("B", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)
