"""What a local run of a pretrained model costs on a CPU, and the one line that says so before it starts.

A harness sized for a GPU (a warm start of 200 x 64 worked solutions, groups of 8 on 8 prompts) takes hours
on a 2-core CPU, and a run says nothing but "warm start" meanwhile. `cpu_line` gives `evotrainer train` and
`evotrainer run` one line to print before any work: the estimated time of one run on this CPU and, when its
warm start or its steps are sized for a GPU, the CPU profile to use instead (a sibling ``<harness>-cpu``
folder, as the bundled SmolLM2 example has; docs/models.md). The figures are first-order:
per-example and per-token costs measured on this project's 2-core machine for SmolLM2-135M-Instruct (one
torch thread per run), scaled by the model's parameter count; a machine busy with other jobs is slower (a
2-step run of the CPU profile measured 22 min at load 9 to 13 against the 3 min estimated). Nothing here imports
torch unless the device is ``auto`` (then it asks torch whether CUDA is there).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from trainer_backend.local.config import LocalTrainerConfig

REFERENCE_PARAMETERS = 134_515_008  # SmolLM2-135M-Instruct, whose runs gave the costs below
WARMSTART_S_PER_EXAMPLE = 1.5  # one worked solution's forward and backward in a supervised step
GRPO_S_PER_SAMPLED_TOKEN = 0.08  # a GRPO step per token of its responses: sampling plus the update
GREEDY_S_PER_TOKEN = 0.014  # a validation per held-out row and token of its greedy answer
# Settings whose warm start or GRPO step is expected to take longer than these on a CPU are sized for a GPU
# (the CPU profile: a warm start of about a minute and 20 to 40 s a step; a GPU profile: hours, minutes)
GPU_SIZED_WARMSTART_S = 15 * 60
GPU_SIZED_STEP_S = 90
CPU_PROFILE_SUFFIX = "-cpu"


@dataclass(frozen=True)
class CpuCost:
    """Estimated seconds of one run's parts on a 2-core CPU."""

    warmstart_s: float
    step_s: float
    validation_s: float

    def run_s(self, steps: int, val_every: int) -> float:
        """One run of `steps` GRPO steps, validating first and every `val_every` steps."""
        return self.warmstart_s + steps * self.step_s + (steps // val_every + 1) * self.validation_s


def cpu_cost(cfg: LocalTrainerConfig, parameters: int, val_rows: int) -> CpuCost:
    """The estimated cost of a run of `cfg` for a model of `parameters` with `val_rows` selection rows."""
    scale = parameters / REFERENCE_PARAMETERS
    return CpuCost(
        warmstart_s=scale * cfg.warmstart_steps * cfg.warmstart_batch_size * WARMSTART_S_PER_EXAMPLE,
        step_s=scale * cfg.group_size * cfg.prompts_per_step * cfg.max_new_tokens * GRPO_S_PER_SAMPLED_TOKEN,
        validation_s=scale * val_rows * cfg.max_new_tokens * GREEDY_S_PER_TOKEN,
    )


def model_parameters(model: str) -> int | None:
    """The parameter count of a `model:` setting: the registry's, the fetched folder's, else None."""
    from trainer_backend import models

    if model in models.MODELS:
        return models.get_spec(model).parameters
    folder = Path(model).expanduser()
    marker = folder / models.MARKER
    if marker.is_file():
        found = json.loads(marker.read_text()).get("parameters")
        if isinstance(found, int):
            return found
    weights = sum(p.stat().st_size for p in folder.glob("*.safetensors")) if folder.is_dir() else 0
    return weights // 4 if weights else None  # fp32 folders; a bf16 one is overestimated twice


def runs_on_cpu(setting: str) -> bool:
    """Whether a run with `device: setting` trains on the CPU here (`EVOTRAINER_DEVICE` overrides)."""
    value = os.environ.get("EVOTRAINER_DEVICE") or setting
    if value != "auto":
        return value == "cpu"
    import torch

    return not torch.cuda.is_available()


def duration(seconds: float) -> str:
    """`40 s`, `12 min`, `3.5 h`."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 90 * 60 else f"{seconds / 3600:.1f} h"


def cpu_line(harness_root: Path, cfg: LocalTrainerConfig, steps: int, val_rows: int) -> str | None:
    """The line to print before a pretrained model's run on a CPU (None: the tiny model, a GPU, unknown size)."""
    if cfg.kind == "tiny" or not runs_on_cpu(cfg.device):
        return None
    parameters = model_parameters(cfg.model)
    if parameters is None:
        return None
    cost = cpu_cost(cfg, parameters, val_rows)
    total = cost.run_s(steps, cfg.val_every)
    shape = (
        f"warm start {cfg.warmstart_steps} x {cfg.warmstart_batch_size} about {duration(cost.warmstart_s)}, "
        f"then about {duration(cost.step_s)} a step"
    )
    if cost.warmstart_s <= GPU_SIZED_WARMSTART_S and cost.step_s <= GPU_SIZED_STEP_S:
        about = f"a run of {steps} steps takes about {duration(total)} on a free core"
        return f"CPU-sized settings on the cpu: {about} ({shape})"
    sibling = harness_root.parent / (harness_root.name + CPU_PROFILE_SUFFIX)
    instead = (
        f"use the CPU profile instead: --harness {sibling}"
        if (sibling / "evotrainer.yaml").is_file()
        else "to use the CPU, lower warmstart_steps, group_size, prompts_per_step and max_new_tokens in "
        "harness/trainer.yaml (docs/models.md: a CPU profile)"
    )
    return (
        f"these settings are sized for a GPU: on this CPU a run of {steps} steps takes about {duration(total)} on a "
        f"free core ({shape}); {instead}"
    )
