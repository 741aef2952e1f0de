"""Harness + RunSpec → verl 0.9.1 Hydra overrides (pure: no verl, Ray or harness code imported).

This module owns `VerlTrainerConfig` (the harness's small verl settings file) and `build_plan`, which
turns a harness, a `RunSpec` and an attempt number into the exact command line, environment and
warnings of one launch. Compose/validation against verl's packaged config lives in `validate.py`.

What maps and what does not (said again in every plan's `warnings`):

- reward: the manifest's `path.py:function` → `reward.custom_reward_function.{path,name}` (the new keys;
  the legacy top-level `custom_reward_function.*`, `reward_model.*`, `sandbox_fusion.*` are silently
  ignored by verl 0.9.1's `main_ppo` and are refused here, see verl.md §1.1).
- group filter: verl has no hook for a custom filter function. A filter that drops zero-variance groups
  maps to verl's dynamic sampling (`algorithm.filter_groups`, evict-and-refill) when the verl config sets
  `filter_groups_metric`; anything else is reported as not applied.
- strict evaluator and diagnostics: not run by verl; EvoTrainer scores verl's validation (and training)
  dumps with the protected evaluator after the run (`run.convert_dumps`), never with the reward's numbers.
- continuation: a run whose `init_checkpoint` is a verl checkpoint folder (`.../global_step_N`) resumes
  from a copy of it (`Continuation`): what verl's resume machinery restores is listed in the plan.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from diagnostics.schema import CHECKPOINTS_DIR
from harness.env import MAX_RESULT_CHARS
from harness.manifest import Harness
from trainer_backend.base import RunRefused, RunSpec
from trainer_backend.verl.agentic import AgentFiles, agent_files, agentic_overrides, agentic_warnings
from trainer_backend.verl.overrides import legacy_key_problem as legacy_key_problem  # its former home
from trainer_backend.verl.overrides import override_problem, value_problem

CHECKPOINT_DIR = CHECKPOINTS_DIR
DATA_DIR = "verl_data"
TRAIN_DUMP_DIR = "verl_dumps/train"
VAL_DUMP_DIR = "verl_dumps/val"
CHECKPOINT_MARKER = "latest_checkpointed_iteration.txt"


class VerlConfigError(RunRefused):
    """A verl configuration that would fail or silently misbehave; the message names the key and the fix."""


class VerlTrainerConfig(BaseModel):
    """The harness's verl settings file (`trainer.verl` in evotrainer.yaml), mapped to Hydra overrides."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    model_path: str  # HF id or local dir (actor_rollout_ref.model.path)
    lr: float = Field(1e-6, gt=0)
    group_size: int = Field(5, ge=2)  # actor_rollout_ref.rollout.n; GRPO needs >= 2
    train_batch_size: int = Field(32, gt=0)  # prompts per step
    ppo_mini_batch_size: int = Field(16, gt=0)  # prompts per update (verl multiplies by n)
    micro_batch_size_per_gpu: int = Field(4, gt=0)
    max_prompt_length: int = Field(512, gt=0)
    max_response_length: int = Field(512, gt=0)
    clip_ratio_low: float = Field(0.2, ge=0)
    clip_ratio_high: float = Field(0.2, ge=0)
    kl_coef: float = Field(0.0, ge=0)  # > 0 turns on the KL loss (low_var_kl) and builds a reference model
    n_gpus_per_node: int = Field(1, gt=0)
    nnodes: int = Field(1, gt=0)
    rollout_engine: Literal["vllm", "sglang", "trtllm"] = "vllm"
    rollout_tp: int = Field(1, gt=0)  # actor_rollout_ref.rollout.tensor_model_parallel_size
    save_freq: int = Field(20, gt=0)
    test_freq: int = Field(10, gt=0)
    filter_groups_metric: Literal["acc", "score"] | None = None  # drop zero-variance groups (verl dynamic sampling)
    overrides: list[str] = Field(default_factory=list)  # extra verl Hydra overrides, `key=value`
    stall_timeout_s: int = Field(1800, gt=0)  # no log/metrics growth for this long → stopped as a timeout
    # Agentic harnesses only (manifest `env:`; trainer_backend/verl/agentic.py): verl's multi-turn agent loop.
    max_turns: int = Field(8, ge=1)  # policy turns per episode (multi_turn.max_assistant_turns)
    max_turn_tokens: int | None = Field(None, gt=0)  # tokens one turn may generate; None: only the response cap
    tool_format: str = Field("hermes", min_length=1)  # multi_turn.format: verl's tool-call parser for the model
    max_tool_response_length: int = Field(MAX_RESULT_CHARS, gt=0)  # characters of a tool result verl keeps

    @model_validator(mode="after")
    def _check(self) -> VerlTrainerConfig:
        if self.ppo_mini_batch_size > self.train_batch_size:
            raise ValueError(
                f"ppo_mini_batch_size={self.ppo_mini_batch_size} exceeds train_batch_size="
                f"{self.train_batch_size}; lower ppo_mini_batch_size or raise train_batch_size"
            )
        return self

    @field_validator("model_path", "tool_format")
    @classmethod
    def _scalar(cls, value: str) -> str:
        problem = value_problem(f"={value}")
        if problem:
            raise ValueError(problem.lstrip(": "))
        return value

    @field_validator("overrides")
    @classmethod
    def _allowed(cls, value: list[str]) -> list[str]:
        for item in value:
            problem = override_problem(item)
            if problem:
                raise ValueError(problem)
        return value


# The local trainer's names of settings these fields also hold (trainer_backend/local/config.py), so a skill
# written against `@trainer_config` edits the verl settings file in a verl session (skills/patches.py).
LOCAL_NAMES = {
    "max_new_tokens": "max_response_length",
    "clip_low": "clip_ratio_low",
    "clip_high": "clip_ratio_high",
    "prompts_per_step": "train_batch_size",
}


def settings_field(key: str) -> tuple[str, object] | None:
    """The `VerlTrainerConfig` field a trainer-settings key means (its own name, or the local trainer's name of it)
    and that field's default (None when it has none); None when verl's settings hold no such scalar."""
    name = LOCAL_NAMES.get(key, key)
    found = VerlTrainerConfig.model_fields.get(name)
    if found is None or name == "overrides":
        return None
    return name, None if found.is_required() else found.get_default(call_default_factory=True)


def load_verl_config(harness: Harness) -> VerlTrainerConfig:
    """Read and validate the harness's verl settings file (`trainer.verl` in evotrainer.yaml).

    Raises:
        VerlConfigError: naming the file, the field and the fix.
    """
    settings = harness.manifest.trainer.settings("verl")
    if settings is None:
        raise VerlConfigError(
            f"{harness.root}/evotrainer.yaml: trainer names no verl settings; add them, e.g. "
            "trainer: {backend: local, local: harness/trainer.yaml, verl: harness/verl.yaml} (docs/verl.md)"
        )
    path = harness.path(settings)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise VerlConfigError(f"{path}: cannot read ({exc}); fix the file") from None
    try:
        return VerlTrainerConfig.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise VerlConfigError(f"{path}: field '{where}': {err['msg']}") from None


@dataclass(frozen=True)
class Plan:
    """One launch of verl: overrides, environment, paths and what could not be mapped."""

    overrides: list[str]
    env: dict[str, str]
    attempt: int
    metrics_path: Path
    checkpoint_dir: Path
    train_dump_dir: Path
    val_dump_dir: Path
    max_response_length: int
    model_path: str
    stall_timeout_s: int
    resume_from_step: int | None = None
    warnings: list[str] = field(default_factory=list)
    continuation: Continuation | None = None  # set when the run continues a parent's verl checkpoint
    agent: AgentFiles | None = None  # an agentic harness: the generated tool and agent-loop configs

    @property
    def start_step(self) -> int:
        """The global step the run starts after (its parent's step when it continues one, else 0)."""
        return self.continuation.step if self.continuation else 0

    def argv(self, python: str) -> list[str]:
        """The trainer command line (Hydra's own output folder kept out of the run folder's top level)."""
        hydra_dir = self.checkpoint_dir.parent / ".verl" / f"hydra.{self.attempt}"
        return [python, "-m", "verl.trainer.main_ppo", *self.overrides, f"hydra.run.dir={hydra_dir}"]


_GLOBAL_STEP = re.compile(r"^global_step_(\d+)$")


def checkpoint_step(path: Path) -> int | None:
    """N for a verl checkpoint folder named `global_step_N`, else None."""
    found = _GLOBAL_STEP.match(path.name)
    return int(found.group(1)) if found else None


@dataclass(frozen=True)
class Parent:
    """What a continued run needs to know about the run that saved its starting checkpoint (read by `prepare`).

    None fields are unknown (a dry run plans from a checkpoint that does not exist yet)."""

    lr: float | None = None  # the parent's actor learning rate
    train_data: str | None = None  # sha256 of the parent's training data file
    world_size: int | None = None  # FSDP world size its shards were saved with


@dataclass(frozen=True)
class Continuation:
    """How a run continues a parent's verl checkpoint: resume (trainer.resume_mode=auto) from a copy of it.

    `load_contents` is `actor.checkpoint.load_contents`: "model" (weights), "optimizer" (AdamW moments and the
    optimizer's param-group learning rate), "extra" (lr-scheduler position and the workers' torch/numpy/python
    random states). `dataloader` says whether the copy keeps `data.pt` (the position in the data order)."""

    source: Path
    step: int
    load_contents: tuple[str, ...]
    dataloader: bool
    carried: tuple[str, ...]
    not_carried: tuple[str, ...]

    def carried_text(self) -> str:
        """What is and is not carried, in words (decision rationales)."""
        return f"carried: {', '.join(self.carried)}; not carried: {', '.join(self.not_carried)}"

    def describe(self) -> str:
        """One line for plans."""
        return (
            f"continues {self.source} (step {self.step}): verl resumes from a copy in this run's checkpoints/; "
            f"{self.carried_text()}"
        )


def plan_continuation(
    source: Path, spec: RunSpec, cfg: VerlTrainerConfig, parent: Parent, train_data: str | None
) -> Continuation:
    """What of the parent's checkpoint `source` this run takes over (pure; `spec.init_state` sets the intent).

    "exact" takes everything verl saves; "optimizer" (fresh-seed replicates) drops the random states and the
    data position; "weights" only the weights. A learning-rate change drops "extra": a restored scheduler
    would keep the parent's rate.

    Raises:
        VerlConfigError: the GPU layout differs from the one the shards were saved with (FSDP does not reshard).
    """
    step = checkpoint_step(source)
    assert step is not None, f"{source} is not a global_step_N folder"
    world = cfg.n_gpus_per_node * cfg.nnodes
    if parent.world_size is not None and parent.world_size != world:
        raise VerlConfigError(
            f"init_checkpoint {source}: saved by {parent.world_size} GPU worker(s) but this run asks for {world} "
            "(n_gpus_per_node x nnodes); verl's FSDP shards load only into the same layout: keep the layout, or "
            "start from merged weights (python -m verl.model_merger merge ...)"
        )
    contents = {"exact": ("model", "optimizer", "extra"), "optimizer": ("model", "optimizer"), "weights": ("model",)}
    load = contents[spec.init_state]
    not_carried = ["the rollout engine's sampling state (vLLM/SGLang seeds)", "EvoTrainer's group-filter state"]
    lr_changed = parent.lr is not None and abs(parent.lr - cfg.lr) > 1e-12 * max(parent.lr, cfg.lr)
    if lr_changed and "extra" in load:
        load = ("model", "optimizer")
        not_carried.append(
            f"lr-scheduler position and random states (the learning rate changes {parent.lr:g} -> {cfg.lr:g}; the "
            "restored optimizer still holds the old rate until the fresh scheduler's first step)"
        )
    elif "extra" not in load:
        not_carried.append("lr-scheduler position and the workers' random states")
    same_data = train_data is not None and parent.train_data == train_data
    dataloader = spec.init_state == "exact" and (same_data or parent.train_data is None)
    if not dataloader:
        why = "fresh seed" if spec.init_state != "exact" else "the training data changed"
        not_carried.append(f"the position in the data order ({why}: data.seed={spec.seed})")
    carried = ["weights"]
    if "optimizer" in load:
        carried.append("AdamW moments")
    if "extra" in load:
        carried.append("lr-scheduler position and the workers' torch/numpy/python random states")
    if dataloader:
        carried.append("the position in the data order (data.pt)")
    if "optimizer" not in load:
        not_carried.append("AdamW moments")
    return Continuation(source, step, load, dataloader, tuple(carried), tuple(not_carried))


def latest_checkpoint_step(checkpoint_dir: Path) -> int | None:
    """Return the step in verl's `latest_checkpointed_iteration.txt`, or None when there is none."""
    marker = checkpoint_dir / CHECKPOINT_MARKER
    try:
        return int(marker.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _reward_path(harness: Harness) -> str:
    return str(harness.path(harness.reward.path).resolve())


def build_plan(
    harness: Harness,
    spec: RunSpec,
    cfg: VerlTrainerConfig,
    attempt: int,
    train_file: Path,
    val_file: Path,
    parent: Parent | None = None,
    train_data: str | None = None,
) -> Plan:
    """Map harness + spec + verl settings to the overrides of one attempt (absolute paths everywhere).

    `spec.init_checkpoint` is either a verl checkpoint folder `.../global_step_N` (the run continues it, see
    `plan_continuation`; `parent` describes the run that saved it, `train_data` is this run's data hash) or a
    Hugging Face model folder (the weights only).

    Raises:
        VerlConfigError: the run folder already holds checkpoints of its own but `spec.resume` is False; an
            init_checkpoint that is neither kind, or whose GPU layout does not match.
    """
    out = spec.out_dir.resolve()
    ckpt = out / CHECKPOINT_DIR
    resume_step = latest_checkpoint_step(ckpt)
    model_path = cfg.model_path
    continuation = None
    if spec.init_checkpoint is not None:
        init = spec.init_checkpoint.resolve()
        if checkpoint_step(init) is not None:
            continuation = plan_continuation(init, spec, cfg, parent or Parent(), train_data)
        elif (init / "config.json").is_file():
            model_path = str(init)
        else:
            raise VerlConfigError(
                f"init_checkpoint: {init} is neither a verl checkpoint folder (global_step_N) nor a Hugging Face "
                "model folder (no config.json); pass a run's checkpoints/global_step_N, or merge verl shards "
                "first: python -m verl.model_merger merge --backend fsdp ..."
            )
    seeded = continuation is not None and resume_step == continuation.step  # our copy of the parent's checkpoint
    if resume_step is not None and not spec.resume and not seeded:
        raise VerlConfigError(
            f"{ckpt}: holds a checkpoint at step {resume_step} but resume=False; "
            "pass resume=True to continue it, or use a new out_dir"
        )
    reward = harness.reward
    ov = [
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=False",
        f"data.train_files={train_file.resolve()}",
        f"data.val_files={val_file.resolve()}",
        f"data.train_batch_size={cfg.train_batch_size}",
        f"data.max_prompt_length={cfg.max_prompt_length}",
        f"data.max_response_length={cfg.max_response_length}",
        "data.filter_overlong_prompts=True",
        "data.truncation=error",
        f"data.seed={spec.seed}",
        f"actor_rollout_ref.model.path={model_path}",
        f"actor_rollout_ref.actor.optim.lr={cfg.lr}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={cfg.ppo_mini_batch_size}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={cfg.micro_batch_size_per_gpu}",
        f"actor_rollout_ref.actor.clip_ratio_low={cfg.clip_ratio_low}",
        f"actor_rollout_ref.actor.clip_ratio_high={cfg.clip_ratio_high}",
        "actor_rollout_ref.actor.entropy_coeff=0",
        f"actor_rollout_ref.rollout.name={cfg.rollout_engine}",
        f"actor_rollout_ref.rollout.n={cfg.group_size}",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={cfg.rollout_tp}",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={cfg.micro_batch_size_per_gpu}",
    ]
    if cfg.kl_coef > 0:
        ov += [
            "actor_rollout_ref.actor.use_kl_loss=True",
            f"actor_rollout_ref.actor.kl_loss_coef={cfg.kl_coef}",
            "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
            f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={cfg.micro_batch_size_per_gpu}",
        ]
    else:
        ov.append("actor_rollout_ref.actor.use_kl_loss=False")
    ov += [
        f"reward.custom_reward_function.path={_reward_path(harness)}",
        f"reward.custom_reward_function.name={reward.function}",
        "trainer.logger=[console,file]",
        "trainer.project_name=evotrainer",
        f"trainer.experiment_name={spec.run_id}",
        f"trainer.n_gpus_per_node={cfg.n_gpus_per_node}",
        f"trainer.nnodes={cfg.nnodes}",
        f"trainer.total_training_steps={spec.steps + (continuation.step if continuation else 0)}",
        f"trainer.save_freq={cfg.save_freq}",
        f"trainer.test_freq={cfg.test_freq}",
        "trainer.resume_mode=auto",
        f"trainer.default_local_dir={ckpt}",
        f"trainer.rollout_data_dir={out / TRAIN_DUMP_DIR}",
        f"trainer.validation_data_dir={out / VAL_DUMP_DIR}",
    ]
    if continuation is not None:
        ov.append(f"actor_rollout_ref.actor.checkpoint.load_contents=[{','.join(continuation.load_contents)}]")
    warnings = _unmapped(harness, spec, cfg)
    env = harness.manifest.env
    agent = None if env is None else agent_files(harness, env, out, cfg.max_turn_tokens, cfg.tool_format)
    if agent is not None:
        ov += agentic_overrides(agent, cfg.max_turns, cfg.max_tool_response_length)
    warnings += agentic_warnings(env, harness.manifest.trainer.settings("verl"), cfg.model_fields_set)
    if cfg.filter_groups_metric is not None:
        metric = "reward" if cfg.filter_groups_metric == "score" else "acc"
        ov += ["algorithm.filter_groups.enable=True", f"algorithm.filter_groups.metric={metric}"]
    ov += cfg.overrides  # last: harness-specific overrides win over our defaults (controller keys refused)
    for override in ov:  # a harness-named path, model or name must not become a mapping verl instantiates
        if problem := value_problem(override):
            raise VerlConfigError(f"{harness.root}: {problem}")
    metrics_path = out / f"verl_metrics.{attempt}.jsonl"
    env = {
        "VERL_FILE_LOGGER_PATH": str(metrics_path),  # fresh file per attempt: FileLogger truncates (verl.md §1.8)
        "TENSORBOARD_DIR": str(out / "tensorboard"),
        "HYDRA_FULL_ERROR": "1",
        "PYTHONUNBUFFERED": "1",
    }
    if resume_step is not None and not seeded:
        warnings.append(f"resuming from {ckpt}/global_step_{resume_step} (trainer.resume_mode=auto)")
    if continuation is not None:
        warnings.append(continuation.describe())
    elif spec.init_checkpoint is not None and spec.init_state != "weights":
        warnings.append(
            f"init_state={spec.init_state}: a Hugging Face folder holds weights only; optimizer moments, scheduler "
            "and random states are not carried (continue a run's checkpoints/global_step_N to carry them)"
        )
    return Plan(
        overrides=ov,
        env=env,
        attempt=attempt,
        metrics_path=metrics_path,
        checkpoint_dir=ckpt,
        train_dump_dir=out / TRAIN_DUMP_DIR,
        val_dump_dir=out / VAL_DUMP_DIR,
        max_response_length=cfg.max_response_length,
        model_path=model_path,
        stall_timeout_s=cfg.stall_timeout_s,
        resume_from_step=resume_step if spec.resume else None,
        warnings=warnings,
        continuation=continuation,
        agent=agent,
    )


def _unmapped(harness: Harness, spec: RunSpec, cfg: VerlTrainerConfig) -> list[str]:
    """Say plainly which harness features verl does not run."""
    notes = []
    gf = harness.group_filter
    if gf is not None and cfg.filter_groups_metric is None:
        notes.append(
            f"group_filter {gf}: verl 0.9.1 has no hook for a custom filter function, so it is NOT "
            "applied (verl trains on every group); if it drops zero-variance groups, set "
            "filter_groups_metric: score (or acc) in the verl config to use algorithm.filter_groups"
        )
    elif gf is not None:
        notes.append(
            f"group_filter {gf}: the function itself is NOT run by verl; mapped to verl dynamic sampling "
            f"algorithm.filter_groups (metric={cfg.filter_groups_metric}), which evicts zero-variance "
            "groups and refills the batch instead of dropping them"
        )
    elif cfg.filter_groups_metric is not None:
        notes.append(
            f"filter_groups_metric={cfg.filter_groups_metric}: verl dynamic sampling on, although the "
            "harness declares no group_filter"
        )
    notes.append(
        f"eval.strict {harness.strict_eval}: not run by verl; EvoTrainer scores verl's validation and training "
        "dumps with it after the run (val/strict_acc, per-prompt strict scores for the paired decisions)"
    )
    local = harness.manifest.trainer.settings("local")
    if local is not None:
        notes.append(f"trainer.local {local}: the local backend's settings; verl reads only its own settings file")
    if harness.manifest.diagnostics:
        notes.append(
            f"diagnostics {harness.manifest.diagnostics}: run by EvoTrainer on the converted rollouts, not inside verl"
        )
    if "://" not in cfg.model_path and not Path(cfg.model_path).is_dir() and spec.init_checkpoint is None:
        notes.append(
            f"model_path {cfg.model_path} is not a local folder: verl workers load it from the Hugging "
            "Face Hub (needs network or a warm HF cache on every node; offline it hangs in dataset setup)"
        )
    if spec.sandbox != "none":
        notes.append(
            f"sandbox={spec.sandbox}: NOT applied; verl runs the harness reward inside its own reward "
            "workers (Ray actors)"
        )
    return notes


_HYDRA_KEY = re.compile(r"Could not (?:override|append to|delete from) '([^']+)'")


def hydra_error_key(message: str) -> str | None:
    """Extract the offending key from a Hydra ConfigCompositionException message."""
    found = _HYDRA_KEY.search(message)
    return found.group(1) if found else None
