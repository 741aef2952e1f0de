"""The model card of a local run (`diagnostics.model_card.ModelCard`): computed from the policy, checked on resume.

`describe` reads the policy as `setup.build_policy` made it (the tiny model's seeded init, or a Hugging Face
folder's weights as loaded); `with_start` adds the digest of the weights step 1 trains from. The card also
travels in every checkpoint (`CHECKPOINT_KEY`), so a resume or a candidate that continues one compares the
model it finds under the same ``model:`` path with the one its lineage started on (`check_same_model`): a
folder whose weights or architecture changed under a session is refused, naming both, rather than trained
as if it were the same model.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

import torch

from diagnostics.model_card import ModelCard, card_from_json
from trainer_backend.local.policy import Policy

CHECKPOINT_KEY = "model_card"  # checkpoint key of the card (what a continuation compares)


class ModelMismatchError(ValueError):
    """The checkpoint a run continues was trained on another model than the one under its ``model:`` path."""


def weights_digest(state: Mapping[str, torch.Tensor]) -> str:
    """sha256 over a state dict: each tensor's name, dtype, shape and bytes, in key order."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().to("cpu").contiguous()
        digest.update(f"{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().data)
    return digest.hexdigest()


def describe(policy: Policy, path: str) -> ModelCard:
    """The card of `policy` as built from `path` (``tiny`` or a model folder), before any training."""
    model, tok = policy.model, policy.tok
    return ModelCard(
        path=path,
        architecture=type(model).__name__,
        model_type=str(getattr(getattr(model, "config", None), "model_type", "")),
        parameters=sum(p.numel() for p in model.parameters()),
        tokenizer_class=type(getattr(tok, "tokenizer", tok)).__name__,  # a Hugging Face wrapper's, or the tiny one
        vocab_size=len(tok),
        weights_sha256=weights_digest(model.state_dict()),
        dtype=policy.dtype_name,
        device=str(policy.device),
    )


def with_start(card: ModelCard, policy: Policy) -> ModelCard:
    """The card with ``start_weights_sha256``: the weights step 1 trains from (a parent's, or warm-started)."""
    return dataclasses.replace(card, start_weights_sha256=weights_digest(policy.model.state_dict()))


def check_same_model(card: ModelCard, continued: dict[str, Any] | None, where: str) -> None:
    """Refuse to continue the checkpoint `where` when it was trained on another model than `card` describes
    (`ModelCard.identity`). A checkpoint without a card (written before runs recorded one) is not compared.

    Raises:
        ModelMismatchError: naming both models and the fix.
    """
    before = None if continued is None else card_from_json(continued.get(CHECKPOINT_KEY))
    if before is None or before.identity() == card.identity():
        return
    raise ModelMismatchError(
        f"{where} was trained on {before.line()}, but its model path now holds {card.line()}: a lineage keeps "
        "its model; restore the model it started on, or start a new session to train this one"
    )
