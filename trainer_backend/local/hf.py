"""Hugging Face causal LMs for the local backend: resolve `model:`, load the model, wrap its tokenizer.

`trainer.yaml`'s ``model:`` names what trains. ``tiny`` is the built-in character model
(`trainer_backend/local/model.py`); anything else is a Hugging Face model folder (``config.json``, weights,
tokenizer files), found as:

- a name in the models cache (`trainer_backend.models`, e.g. ``smollm2-135m-instruct`` after
  ``evotrainer models get``);
- an absolute folder path (``~`` expands);
- a hub id (``Qwen/Qwen2.5-0.5B-Instruct``) already in the local Hugging Face cache: nothing is downloaded.

The tokenizer adapter `HFTokenizer` gives the trainer the same interface as `CharTokenizer`: prompt ids,
encode/decode, stop ids, the id a warm-start target ends with, a pad id. End of turn is decided once, here,
for every model: the stop ids are the generation config's ``eos_token_id`` plus, with a chat
template, the special token the template writes right after an assistant's text (``<|im_end|>``); never
``tokenizer.eos_token`` alone, which a converted tokenizer may get wrong. A chat template that ends an
assistant turn with no special token cannot be stopped on and is refused. Padding never uses a stop id.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import torch

CONFIG = "config.json"
GENERATION_CONFIG = "generation_config.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


class ModelError(ValueError):
    """`model:` names no usable Hugging Face model (or tokenizer): the message names the setting and the fix."""


def resolve_model(value: str) -> Path:
    """Return the folder `value` (a `model:` setting other than ``tiny``) names; see the module docstring.

    Raises:
        ModelError: nothing usable is found; nothing is downloaded.
    """
    cached = _models_cache(value)
    if cached is not None:
        return cached
    if value.startswith(("/", "~")):
        folder = Path(value).expanduser()
        if not folder.is_dir():
            raise ModelError(
                f"model folder {value} does not exist; give a Hugging Face model folder or a models-cache name"
            )
        if not (folder / CONFIG).is_file():
            raise ModelError(
                f"model folder {value} has no {CONFIG}: a Hugging Face model folder holds {CONFIG}, the weights "
                "(*.safetensors) and the tokenizer files (save them with save_pretrained)"
            )
        return folder
    if value.count("/") == 1 and not value.startswith("."):
        try:
            from huggingface_hub import snapshot_download

            return Path(snapshot_download(value, local_files_only=True))
        except Exception:  # not in the local cache (the hub raises several kinds); we never download
            pass
    raise ModelError(
        f"model {value!r} is not a models-cache name ({', '.join(_names())}; `evotrainer models get NAME`), "
        "an absolute folder path, or a hub id in the local Hugging Face cache; nothing is downloaded: fetch it "
        "first (huggingface-cli download ID) or give the folder's absolute path"
    )


def _models_cache(value: str) -> Path | None:
    """The models-cache folder of registry name `value` (`evotrainer models get`), None for another value.

    Raises:
        ModelError: `value` is a registry name whose model was not fetched yet (names the get command).
    """
    from trainer_backend import models

    if value not in models.MODELS:
        return None
    try:
        return models.path(value)
    except models.ModelError as exc:
        raise ModelError(str(exc)) from None


def _names() -> list[str]:
    from trainer_backend import models

    return sorted(models.MODELS)


def fingerprint(folder: Path) -> str:
    """A content fingerprint of a model folder: config and tokenizer bytes, weight files' names and sizes."""
    digest = hashlib.sha256()
    for path in sorted(folder.iterdir()):
        if not path.is_file():
            continue
        if path.suffix in (".json", ".jinja", ".model", ".txt"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
        elif path.suffix in (".safetensors", ".bin", ".gguf"):
            stat = path.stat()
            digest.update(f"{path.name}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:24]


def load_model(folder: Path, device: torch.device, gradient_checkpointing: bool = False) -> Any:
    """Load a decoder-only causal LM from `folder` in fp32 (the master weights) onto `device`.

    Raises:
        ModelError: the folder holds no causal LM transformers can load (named, with the reason).
    """
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # train.log gets our lines, not a weight-loading bar

    try:
        config = AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelError(f"model folder {folder}: {CONFIG} cannot be read ({_short(exc)})") from None
    if getattr(config, "is_encoder_decoder", False):
        raise ModelError(
            f"model folder {folder}: {config.model_type} is an encoder-decoder; the local backend trains "
            "decoder-only causal LMs"
        )
    try:
        model = AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.float32, local_files_only=True, trust_remote_code=False, attn_implementation="sdpa"
        )
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise ModelError(f"model folder {folder}: transformers cannot load it as a causal LM ({_short(exc)})") from None
    model.config.use_cache = False  # training forwards keep no cache; sampling has its own
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    moved: Any = model.to(device)  # type: ignore[arg-type]  # transformers' stubs type only dtype moves
    return moved


def context_length(model: Any) -> int | None:
    """The longest sequence (prompt + response) the model's positions cover, None when it declares none."""
    value = getattr(model.config, "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None


def _short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:limit]}{'...' if len(text) > limit else ''}"


class HFTokenizer:
    """A Hugging Face tokenizer behind the interface the trainer uses for every policy (see `CharTokenizer`).

    Attributes:
        stop_ids: token ids that end a response (generation config's eos plus the template's end of turn).
        end_id: the id a warm-start target ends with (the template's end of turn, or the first stop id).
        pad_id: the id that fills positions after a response ends (never a stop id).
        identity: what names this tokenizer in checkpoints and cache keys.
        vocab: None (a character vocabulary only; kept for the shared interface).
    """

    vocab: list[str] | None = None

    def __init__(
        self,
        tokenizer: Any,
        *,
        stop_ids: Sequence[int],
        end_id: int,
        pad_id: int,
        prompt_format: Literal["raw", "chat"],
        identity: str,
    ) -> None:
        self.tokenizer = tokenizer
        self.stop_ids = tuple(dict.fromkeys(stop_ids))
        self.end_id = end_id
        self.pad_id = pad_id
        self.eos_id = self.stop_ids[0]
        self.prompt_format = prompt_format
        self.identity = identity
        specials = {str(t) for t in tokenizer.all_special_tokens} | _added(tokenizer)
        self._specials = sorted(specials, key=len, reverse=True)

    def __len__(self) -> int:
        return len(self.tokenizer)

    def prompt_ids(self, prompt: str) -> list[int]:
        """The ids the model reads before its response: one user turn and the generation prompt (``chat``), or
        the text with the tokenizer's own leading special tokens (``raw``)."""
        if self.prompt_format == "chat":
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
            )
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        ids = list(self.tokenizer.encode(prompt, add_special_tokens=True))
        while ids and ids[-1] in self.stop_ids:  # a tokenizer that appends its eos: the prompt must stay open
            ids.pop()
        return ids

    def encode(self, text: str) -> list[int]:
        """The ids of `text` as the model writes it (no special tokens added)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def encode_known(self, text: str) -> list[int]:
        """The ids of untrusted text (an environment's result): special-token texts are removed first, so a
        result can never write a turn boundary or a stop token into the context."""
        return self.encode(self.strip_specials(text))

    def strip_specials(self, text: str) -> str:
        """`text` without any special token's text (repeated until none is left: no nesting trick survives)."""
        while True:
            cleaned = text
            for special in self._specials:
                cleaned = cleaned.replace(special, "")
            if cleaned == text:
                return cleaned
            text = cleaned

    def id_of(self, token: str) -> int | None:
        """The id of `token` when the tokenizer reads it as exactly one token, else None."""
        ids = self.encode(token)
        return ids[0] if len(ids) == 1 else None

    def decode(self, ids: list[int]) -> str:
        """The text of response ids, up to (not including) the first stop id; special tokens stay visible."""
        stops = set(self.stop_ids)
        cut = next((i for i, t in enumerate(ids) if t in stops), len(ids))
        return str(self.tokenizer.decode(ids[:cut], skip_special_tokens=False))


def _added(tokenizer: Any) -> set[str]:
    try:
        return {str(t) for t in tokenizer.get_added_vocab()}
    except (AttributeError, NotImplementedError):
        return set()


def load_tokenizer(folder: Path, prompt_format: Literal["raw", "chat"]) -> HFTokenizer:
    """Load the folder's tokenizer and decide its stop, end-of-target and pad ids (module docstring).

    Raises:
        ModelError: no tokenizer, no chat template for ``chat``, or no token that can end a response.
    """
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelError(
            f"model folder {folder}: no usable tokenizer ({_short(exc)}); save one with save_pretrained"
        ) from None
    generation = _generation_eos(folder)
    if prompt_format == "chat":
        if not getattr(tokenizer, "chat_template", None):
            raise ModelError(
                f"model folder {folder}: trainer.yaml field 'prompt_format' is chat, but the tokenizer has no chat "
                "template; use prompt_format: raw or a model with a chat template"
            )
        from trainer_backend.models import ModelError as TemplateError
        from trainer_backend.models.convert import template_end_of_turn

        try:
            found = tokenizer.convert_tokens_to_ids(template_end_of_turn(tokenizer))
        except TemplateError as exc:
            raise ModelError(
                f"model folder {folder}: {exc}, so a response can never be stopped on its end of turn; use "
                "prompt_format: raw or fix the template"
            ) from None
        assert isinstance(found, int), found  # one token in, one id out
        end = found
        stops = [*generation, end]
    else:
        eos = tokenizer.eos_token_id
        stops = [*generation, *([eos] if isinstance(eos, int) else [])]
        if not stops:
            raise ModelError(
                f"model folder {folder}: neither {GENERATION_CONFIG} nor the tokenizer names an eos token, so a "
                "response can never end; add eos_token_id to the generation config"
            )
        end = stops[0]
    pad = tokenizer.pad_token_id
    if not isinstance(pad, int) or pad in stops:
        pad = next(i for i in range(len(tokenizer)) if i not in stops)
    identity = hashlib.sha256(
        json.dumps({"files": _tokenizer_digest(folder), "format": prompt_format, "stops": stops}).encode()
    ).hexdigest()[:24]
    return HFTokenizer(
        tokenizer, stop_ids=stops, end_id=end, pad_id=pad, prompt_format=prompt_format, identity=identity
    )


def _generation_eos(folder: Path) -> list[int]:
    path = folder / GENERATION_CONFIG
    if not path.is_file():
        return []
    try:
        value = json.loads(path.read_text()).get("eos_token_id")
    except (OSError, ValueError, AttributeError):
        return []
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, int) and not isinstance(v, bool)]


def _tokenizer_digest(folder: Path) -> dict[str, str]:
    return {
        name: hashlib.sha256((folder / name).read_bytes()).hexdigest()[:16]
        for name in TOKENIZER_FILES
        if (folder / name).is_file()
    }


def pick_device(setting: str) -> torch.device:
    """The device a run trains on: `EVOTRAINER_DEVICE` overrides the setting; ``auto`` is cuda when available.

    Raises:
        ModelError: cuda was asked for and torch sees no CUDA device.
    """
    value = os.environ.get("EVOTRAINER_DEVICE") or setting
    if value == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if value not in ("cpu", "cuda"):
        raise ModelError(
            f"device {value!r} (EVOTRAINER_DEVICE or trainer.yaml field 'device') is not auto, cpu or cuda"
        )
    if value == "cuda" and not torch.cuda.is_available():
        raise ModelError(
            "trainer.yaml field 'device' (or EVOTRAINER_DEVICE) asks for cuda, but torch sees no CUDA device here; "
            "use device: auto or cpu, or install a CUDA build of torch"
        )
    return torch.device(value)
