"""Build a run's policy from its settings: the tiny model or a Hugging Face model, checked before training.

`build_policy` returns the `Policy` (`policy.py`) and what names it: the warm start's cache identity and
what a checkpoint records, so a run that continues the checkpoint can tell it is the same model
(`check_continuation`: a lineage never changes its model, e.g. a candidate editing ``model:``).
`check_policy` runs the same checks without loading any weights (the CLI's preflight: one line, exit 2,
nothing created): the model folder and tokenizer, the harness's special tokens, the device, and whether
prompts plus the response budget fit the model's context.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from harness.manifest import Harness
from trainer_backend.local import hf
from trainer_backend.local.config import TINY, LocalTrainerConfig
from trainer_backend.local.episodes import MAX_OBSERVATION_TOKENS
from trainer_backend.local.model import build_model
from trainer_backend.local.policy import Policy
from trainer_backend.local.vocab import tokenizer_for


class PolicyError(ValueError):
    """The settings name a policy that cannot train here: the message names the setting and the fix."""


def check_continuation(cfg: LocalTrainerConfig, continued: dict[str, Any] | None) -> None:
    """Refuse a run whose `model:` is not the model of the checkpoint it continues.

    Raises:
        PolicyError: the lineage's model and the run's differ (named both, with the fix).
    """
    if continued is None:
        return
    facts = continued.get(POLICY_KEY)
    before = TINY if facts is None else str(facts.get("model"))
    if before != cfg.model:
        raise PolicyError(
            f"trainer.yaml field 'model' is {cfg.model!r}, but this run continues a policy of model {before!r}: a "
            "lineage keeps its model (start a new session to train another one)"
        )


POLICY_KEY = "policy"  # checkpoint and config.json key: what a Hugging Face policy is


def build_policy(
    harness: Harness, cfg: LocalTrainerConfig, continued: dict[str, Any] | None, seed: int, log: Callable[[str], None]
) -> tuple[Policy, dict[str, Any]]:
    """The run's policy (fresh weights: the tiny model's random init, or the pretrained folder) and its identity.

    Returns `(policy, identity)`: ``identity["warmstart"]`` keys the warm-start cache, ``identity["checkpoint"]``
    goes into every checkpoint.

    Raises:
        VocabularyError: (tiny) a text holds a character the continued policy's vocabulary lacks.
        PolicyError: (Hugging Face) the model, tokenizer, device or lengths do not fit (see `check_policy`).
    """
    device = _device(cfg)
    if cfg.model == TINY:
        tok = tokenizer_for(harness, cfg.warmstart_data, None if continued is None else continued.get("vocab"))
        model = build_model(cfg.shape(), len(tok), seed)
        warm: dict[str, Any] = {"shape": cfg.shape().__dict__, "vocab": tok.vocab}
        if cfg.prompt_template != "{prompt}":  # default templates keep every cache key made before prompt templates
            warm["prompt_template"] = cfg.prompt_template
        policy = Policy(model, tok, device, cfg.render_prompt, "tiny")
        return policy, {"warmstart": warm, "checkpoint": {"vocab": tok.vocab}}
    folder, hf_tok = _tokenizer(harness, cfg)
    try:
        model = hf.load_model(folder, device, cfg.gradient_checkpointing)
    except hf.ModelError as exc:
        raise PolicyError(str(exc)) from None
    fingerprint = hf.fingerprint(folder)
    policy = Policy(model, hf_tok, device, cfg.render_prompt, "pretrained")
    warm = {
        "model": fingerprint,
        "tokenizer": hf_tok.identity,
        "prompt": [cfg.prompt_format, cfg.prompt_template],
        "device": device.type,
    }
    facts = {"model": cfg.model, "folder": str(folder), "fingerprint": fingerprint, "tokenizer": hf_tok.identity}
    return policy, {"warmstart": warm, "checkpoint": {POLICY_KEY: facts}}


def _device(cfg: LocalTrainerConfig) -> Any:
    import torch

    if cfg.model == TINY:  # the settings refuse device: cuda for it
        return torch.device("cpu")
    try:
        return hf.pick_device(cfg.device)
    except hf.ModelError as exc:
        raise PolicyError(str(exc)) from None


def _tokenizer(harness: Harness, cfg: LocalTrainerConfig) -> tuple[Path, hf.HFTokenizer]:
    try:
        folder = hf.resolve_model(cfg.model)
        tok = hf.load_tokenizer(folder, cfg.prompt_format)
    except hf.ModelError as exc:
        raise PolicyError(f"trainer.yaml field 'model': {exc}") from None
    for token in harness.manifest.special_tokens:
        if tok.id_of(token) is None:
            raise PolicyError(
                f"evotrainer.yaml special_tokens: {token!r} is not one token of {cfg.model}'s tokenizer; remove "
                "special_tokens (a pretrained tokenizer writes tags as text) or add the token to the tokenizer "
                "(tokenizer.add_tokens, model.resize_token_embeddings, save_pretrained)"
            )
    return folder, tok


def check_policy(harness: Harness, cfg: LocalTrainerConfig, prompts: Iterable[tuple[str, int, str]]) -> None:
    """Check a Hugging Face policy's settings without loading its weights (nothing to check for the tiny model).

    `prompts` are `(file, line, prompt text)` of the data the run reads.

    Raises:
        PolicyError: one line naming the setting, file or row, and the fix.
    """
    if cfg.model == TINY:
        return
    _device(cfg)
    folder, tok = _tokenizer(harness, cfg)
    try:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    except (OSError, ValueError, KeyError) as exc:
        raise PolicyError(f"trainer.yaml field 'model': {folder}/{hf.CONFIG} cannot be read ({exc})") from None
    limit = getattr(config, "max_position_embeddings", None)
    if isinstance(limit, int) and limit > 0:
        check_lengths(tok, cfg, harness, prompts, limit)


def response_budget(cfg: LocalTrainerConfig, harness: Harness) -> int:
    """The most tokens a response (single-turn) or a whole episode after its prompt (agentic) may add."""
    if harness.manifest.env is None:
        return cfg.max_new_tokens
    return cfg.max_turns * (cfg.max_turn_tokens + MAX_OBSERVATION_TOKENS + 16)  # 16: the observation template


def check_lengths(
    tok: hf.HFTokenizer,
    cfg: LocalTrainerConfig,
    harness: Harness,
    prompts: Iterable[tuple[str, int, str]],
    limit: int | None,
) -> int:
    """Return the longest prompt plus the response budget, in tokens; refuse a prompt that is empty or whose
    tokens plus the budget exceed the model's context (`limit` positions; None: the model declares none).

    Raises:
        PolicyError: naming the file, line, both lengths and the fix.
    """
    budget = response_budget(cfg, harness)
    render = cfg.render_prompt
    longest = 0
    for file, line, prompt in prompts:
        n = len(tok.prompt_ids(render(prompt)))
        if n == 0:
            raise PolicyError(f"{file}:{line}: the prompt is no token at all for {cfg.model}'s tokenizer; give it text")
        longest = max(longest, n)
        if limit is not None and n + budget > limit:
            raise PolicyError(
                f"{file}:{line}: the prompt is {n} tokens and the response budget {budget} "
                f"(max_new_tokens, or max_turns x turn budget), together more than {cfg.model}'s context of {limit} "
                "positions; shorten the prompt or lower max_new_tokens"
            )
    return longest + budget
