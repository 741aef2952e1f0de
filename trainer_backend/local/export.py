"""Write a local run's trained Hugging Face policy as a model folder any transformers user can load.

A run's ``checkpoints/last.pt`` holds the policy's state dict (fp32 master weights), the optimizer, random
streams and, for a Hugging Face policy, which model folder it started from (``policy``: the folder and its
fingerprint). The export loads that base folder's config, builds the model, loads the trained weights into
it (strictly: every tensor, no extra) and writes safetensors weights, config, tokenizer (with its chat
template) and a generation config whose stop ids are the ones the run sampled with. It refuses a
checkpoint of the built-in tiny model (no Hugging Face architecture or tokenizer to export: the checkpoint
itself is the artefact) and a base folder that changed since the run (its config or tokenizer might no
longer match the weights).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from diagnostics.schema import CONFIG_FILE, LAST_CHECKPOINT
from trainer_backend.local import artifacts as art
from trainer_backend.local.hf import fingerprint
from trainer_backend.local.setup import POLICY_KEY


class ExportRefused(ValueError):
    """The checkpoint cannot be exported as a Hugging Face folder; the message says why and what to use."""


def export_run(run_dir: Path, out: Path, card: str) -> Path:
    """Export the policy the local run in `run_dir` trained to `out`; `card` is the session's part of README.md.

    Raises:
        ExportRefused: the run trained the tiny model, left no checkpoint, or see `export_folder`.
    """
    config_path = run_dir / CONFIG_FILE
    if not config_path.is_file():
        raise ExportRefused(f"{run_dir} holds no {CONFIG_FILE}: the run never started, so it has no weights")
    config = json.loads(config_path.read_text())
    checkpoint = run_dir / LAST_CHECKPOINT
    facts = config.get(POLICY_KEY)
    if not isinstance(facts, dict):
        where = f"; its checkpoint is {checkpoint}" if checkpoint.is_file() else ""
        raise ExportRefused(
            f"the run in {run_dir} trained the built-in tiny character model, which has no Hugging Face "
            f"architecture or tokenizer to export: nothing is written{where} (torch.load it: 'model' holds the "
            "weights, 'vocab' the vocabulary)"
        )
    if not checkpoint.is_file():
        raise ExportRefused(f"the run in {run_dir} left no weights ({checkpoint} is missing): it failed or was cut")
    trainer = config.get("trainer", {})
    template = str(trainer.get("prompt_template", "{prompt}"))
    header = [
        "# EvoTrainer export",
        "",
        f"- base model: `{facts.get('model')}` (folder `{facts.get('folder')}`)",
        f"- prompts: `{json.dumps(template)}` with `{{prompt}}` the task's text, "
        + ("as one user turn of the chat template" if facts.get("prompt_format") == "chat" else "as raw text"),
        f"- stop tokens: {', '.join(f'`{t}`' for t in facts.get('stop_tokens', []))} "
        f"(ids {facts.get('stop_ids', [])}, in generation_config.json)",
        f"- trained weights from `{checkpoint}`",
        "",
    ]
    return export_folder(checkpoint, out, [int(i) for i in facts.get("stop_ids", [])], "\n".join(header) + card)


def policy_of(checkpoint: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The run's policy facts (model, base folder, fingerprint) and trained weights from `checkpoint`.

    Raises:
        ExportRefused: the checkpoint trained the built-in tiny model, or is not a local trainer checkpoint.
    """
    try:
        state = art.read_checkpoint(checkpoint, "the exported run's checkpoint")
    except art.CheckpointError as exc:
        raise ExportRefused(str(exc)) from None
    if not isinstance(state, dict) or "model" not in state:
        raise ExportRefused(f"{checkpoint} is not a local trainer checkpoint (no 'model' weights)")
    facts = state.get(POLICY_KEY)
    if not isinstance(facts, dict):
        raise ExportRefused(
            f"{checkpoint} trained the built-in tiny character model, which has no Hugging Face architecture or "
            f"tokenizer to export; the checkpoint itself is its only artefact (torch.load it: 'model' holds the "
            "weights, 'vocab' the vocabulary)"
        )
    return facts, state["model"]


def export_folder(checkpoint: Path, out: Path, stop_ids: list[int], card: str) -> Path:
    """Write the trained policy of `checkpoint` as a Hugging Face folder at `out` (it must not exist yet).

    `stop_ids` are the token ids the run stopped sampling on (its config.json); `card` is README.md's text.
    The folder is written beside `out` and renamed into place, so a failed export leaves nothing behind.

    Raises:
        ExportRefused: see `policy_of`; the base folder is gone or changed; `out` exists.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    if out.exists():
        raise ExportRefused(f"{out} exists; name a new folder with --out")
    facts, weights = policy_of(checkpoint)
    base = Path(str(facts.get("folder", "")))
    if not (base / "config.json").is_file():
        raise ExportRefused(f"the run's base model folder {base} is gone; fetch it again (evotrainer models get)")
    if facts.get("fingerprint") and fingerprint(base) != facts["fingerprint"]:
        raise ExportRefused(f"the base model folder {base} changed since the run; its config or tokenizer may not fit")
    config = AutoConfig.from_pretrained(base, local_files_only=True)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(weights, strict=True)
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else config.pad_token_id
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=list(stop_ids), pad_token_id=pad
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        template = base / "chat_template.jinja"
        if template.is_file() and not (staging / template.name).is_file():
            shutil.copyfile(template, staging / template.name)
        (staging / "README.md").write_text(card)
        (staging / "evotrainer-export.json").write_text(
            json.dumps({"checkpoint": str(checkpoint), "base": facts, "stop_ids": list(stop_ids)}, indent=2) + "\n"
        )
        os.replace(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return out
