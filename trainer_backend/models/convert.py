"""De-quantize a verified GGUF file into a plain Hugging Face model folder with a correct end of turn.

transformers reads the GGUF (with the ``gguf`` package) and de-quantizes every tensor to fp32. The folder
keeps fp32: a Q4_1 / Q8_0 value is an fp16 scale times a small integer plus an fp16 offset, which fp32
holds exactly and bf16 (8 mantissa bits) would round a second time; training keeps fp32 master weights
anyway (bf16 autocast on a GPU), and 0.54 GB on disk is cheap.

What the GGUF conversion gets wrong, and this module repairs (each checked again after writing):

- the converted tokenizer names ``<|im_start|>`` its eos token, while the chat template ends every turn
  with ``<|im_end|>``: the eos becomes the template's end-of-turn token, found by rendering a turn;
- no pad token (and the model config pads with the eos): pad becomes the registry's `pad_token`, which
  is no stop token, so masking padding never masks the token a response must end on;
- the GGUF names its pre-tokenizer (``smollm``: every digit is its own pre-token, as in llama.cpp and the
  original tokenizer) but the converted tokenizer splits with plain GPT-2 rules, which tokenizes spaces
  before digits differently; the decoder is reduced to byte-level so ``decode(encode(text)) == text``;
- transformers >= 5.17 refuses ``save_pretrained`` on a GGUF-loaded model: the weights are loaded into a
  plain model built from the config, which every version saves;
- ``generation_config.json`` lists the stop ids (``eos_token_id``) and the pad id.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from trainer_backend.models.registry import ModelError, ModelSpec

_SENTINEL = "EVOTRAINER-END-OF-TURN-PROBE"  # a content string no template adds itself
_CONFIG_DROP = ("_name_or_path", "_model_name_or_path", "_commit_hash", "quantization_config", "transformers_version")


@dataclass(frozen=True)
class Token:
    """A token by text and id."""

    text: str
    id: int


@dataclass(frozen=True)
class FolderFacts:
    """What a conversion wrote: the special tokens, the stop ids and where the numbers came from."""

    bos: Token
    end_of_turn: Token
    pad: Token
    stop_token_ids: list[int]
    dtype: str
    parameters: int
    gguf: dict[str, Any]
    converted_with: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        """Return the facts as plain JSON values."""
        return asdict(self)


def gguf_metadata(path: Path) -> dict[str, Any]:
    """Return the GGUF header fields the conversion decides on (architecture, tokenizer ids, context length)."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    arch = reader.fields["general.architecture"].contents()
    wanted = {
        "architecture": "general.architecture",
        "name": "general.name",
        "file_type": "general.file_type",
        "context_length": f"{arch}.context_length",
        "tokenizer_model": "tokenizer.ggml.model",
        "pre_tokenizer": "tokenizer.ggml.pre",
        "bos_token_id": "tokenizer.ggml.bos_token_id",
        "eos_token_id": "tokenizer.ggml.eos_token_id",
        "padding_token_id": "tokenizer.ggml.padding_token_id",
        "unknown_token_id": "tokenizer.ggml.unknown_token_id",
        "add_bos_token": "tokenizer.ggml.add_bos_token",
    }
    return {key: reader.fields[field].contents() for key, field in wanted.items() if field in reader.fields}


def template_end_of_turn(tokenizer: Any) -> str:
    """Return the special token the chat template writes right after an assistant message's content.

    Whitespace the template writes first is skipped (a template may write ``" </s>"``); plain text first
    means the turn ends with no special token.

    Raises:
        ModelError: the tokenizer has no chat template, or the template ends a turn with no special token.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ModelError("the model's tokenizer has no chat template: cannot tell which token ends a turn")
    turn = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _SENTINEL}]
    text = tokenizer.apply_chat_template(turn, tokenize=False)
    tail = text[text.rindex(_SENTINEL) + len(_SENTINEL) :]
    special = {i for i, added in tokenizer.added_tokens_decoder.items() if added.special}
    special |= set(getattr(tokenizer, "all_special_ids", ()))
    for token in tokenizer(tail, add_special_tokens=False)["input_ids"] if tail else []:
        if token in special:
            return str(tokenizer.convert_ids_to_tokens(token))
        if tokenizer.decode([token]).strip():
            break
    raise ModelError(f"the chat template ends an assistant turn with {tail!r}, not a special token")


def _repair_tokenizer_pipeline(tokenizer: Any, pre: str) -> None:
    """Give the tokenizer the pre-tokenizer the GGUF names and a byte-level decoder."""
    from tokenizers import decoders, pre_tokenizers

    backend = tokenizer.backend_tokenizer
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":  # llama.cpp: "\p{N}" first, then the GPT-2 expression
        backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    elif pre in ("default", "gpt2"):
        backend.pre_tokenizer = byte_level
    else:
        raise ModelError(f"the GGUF names pre-tokenizer {pre!r}, which the conversion does not know; add it here")
    backend.decoder = decoders.ByteLevel()


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Silence transformers' progress bars and warnings while converting (the CLI prints its own lines)."""
    from transformers.utils import logging

    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.enable_progress_bar()
        logging.set_verbosity(verbosity)


def convert(gguf_path: Path, spec: ModelSpec, out: Path, log: Callable[[str], None]) -> FolderFacts:
    """Write the Hugging Face folder of the verified GGUF `gguf_path` into `out` (created) and check it.

    Returns:
        The tokens and ids the folder was written with.

    Raises:
        ModelError: the GGUF's tokenizer or template cannot give a correct end of turn or pad token, or the
            written folder does not read back as written.
        OSError: writing failed (ENOSPC included; the caller names it).
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    log("reading the GGUF header")
    meta = gguf_metadata(gguf_path)
    folder, name = str(gguf_path.parent), gguf_path.name
    with _quiet_transformers():
        log("reading the tokenizer from the GGUF file")
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        _repair_tokenizer_pipeline(tokenizer, str(meta.get("pre_tokenizer", "default")))
        end_of_turn = template_end_of_turn(tokenizer)
        tokenizer.eos_token = end_of_turn
        tokenizer.pad_token = spec.pad_token
        tokenizer.clean_up_tokenization_spaces = False  # decode must give back the text the model wrote
        tokenizer.model_max_length = int(meta.get("context_length", tokenizer.model_max_length))
        for flag in ("is_local", "local_files_only"):  # how this machine loaded it, not part of the tokenizer
            tokenizer.init_kwargs.pop(flag, None)
        facts_tokens = _tokens(tokenizer, spec)
        log("de-quantizing the weights to fp32 (about 20 s on a CPU)")
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
        settings = {k: v for k, v in loaded.config.to_dict().items() if k not in _CONFIG_DROP}
        bos, eot, pad = facts_tokens
        settings.update(bos_token_id=bos.id, eos_token_id=eot.id, pad_token_id=pad.id, dtype="float32")
        config = AutoConfig.for_model(**settings)
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain.load_state_dict(loaded.state_dict(), strict=True)
        parameters = sum(p.numel() for p in plain.parameters())
        if parameters != spec.parameters:
            raise ModelError(f"{gguf_path} de-quantized to {parameters:,} parameters, expected {spec.parameters:,}")
        plain.generation_config = GenerationConfig(bos_token_id=bos.id, eos_token_id=[eot.id], pad_token_id=pad.id)
        log(f"writing {out}")
        out.mkdir(parents=True, exist_ok=True)
        plain.save_pretrained(out)
        tokenizer.save_pretrained(out)
        readable = 0o666 & ~_umask()
        for written in out.iterdir():  # safetensors writes 0600; a shared cache must be readable like any file
            written.chmod(readable)
        _check_weights(out, loaded.state_dict())
    facts = FolderFacts(
        bos=bos,
        end_of_turn=eot,
        pad=pad,
        stop_token_ids=[eot.id],
        dtype="float32",
        parameters=parameters,
        gguf={k: v for k, v in meta.items() if isinstance(v, str | int | float | bool)},
        converted_with={pkg: version(pkg) for pkg in ("transformers", "gguf", "torch", "tokenizers")},
    )
    check_folder(out, facts)
    return facts


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _tokens(tokenizer: Any, spec: ModelSpec) -> tuple[Token, Token, Token]:
    """Return (bos, end of turn, pad) and refuse a pad token that is missing or a stop token."""
    pad_ids = tokenizer(spec.pad_token, add_special_tokens=False)["input_ids"]
    if len(pad_ids) != 1:
        raise ModelError(f"the pad token {spec.pad_token!r} is not one token of this vocabulary ({pad_ids})")
    bos = Token(str(tokenizer.bos_token), int(tokenizer.bos_token_id))
    eot = Token(str(tokenizer.eos_token), int(tokenizer.eos_token_id))
    pad = Token(str(tokenizer.pad_token), int(tokenizer.pad_token_id))
    if pad.id == eot.id:
        raise ModelError(f"the pad token {pad.text!r} is the end-of-turn token: pick another pad token")
    return bos, eot, pad


def _check_weights(out: Path, state: dict[str, Any]) -> None:
    """Refuse a folder whose safetensors differ from the de-quantized weights (tied copies are not stored)."""
    import torch
    from safetensors.torch import load_file

    stored: dict[str, torch.Tensor] = {}
    for shard in sorted(out.glob("*.safetensors")):
        stored.update(load_file(shard))
    missing = [key for key in state if key not in stored and key != "lm_head.weight"]
    differ = [key for key, tensor in stored.items() if not torch.equal(tensor, state[key])]
    if missing or differ:
        raise ModelError(f"{out}: the written weights differ from the de-quantized ones ({(missing + differ)[:3]})")


def check_folder(out: Path, facts: FolderFacts) -> None:
    """Read `out` back through `from_pretrained` and check its tokens, stop ids and chat template.

    Raises:
        ModelError: a check fails (the message names it).
    """
    from transformers import AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(str(out))
    generation = GenerationConfig.from_pretrained(str(out))
    config = json.loads((out / "config.json").read_text())
    stops = set(facts.stop_token_ids)
    problems = []
    if tokenizer.eos_token_id != facts.end_of_turn.id or tokenizer.eos_token != facts.end_of_turn.text:
        problems.append(f"tokenizer eos {tokenizer.eos_token!r}")
    if tokenizer.pad_token_id != facts.pad.id or tokenizer.pad_token_id in stops:
        problems.append(f"tokenizer pad {tokenizer.pad_token!r}")
    if list(generation.eos_token_id) != facts.stop_token_ids or generation.pad_token_id != facts.pad.id:
        problems.append(f"generation config eos {generation.eos_token_id} pad {generation.pad_token_id}")
    if config.get("pad_token_id") != facts.pad.id or config.get("eos_token_id") != facts.end_of_turn.id:
        problems.append(f"config eos {config.get('eos_token_id')} pad {config.get('pad_token_id')}")
    if template_end_of_turn(tokenizer) != facts.end_of_turn.text:
        problems.append("chat template end of turn")
    if problems:
        raise ModelError(f"{out} does not read back as written: {'; '.join(problems)}")
