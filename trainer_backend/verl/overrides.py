"""Which verl Hydra overrides a harness's verl settings file may hold (pure: no verl imported).

`harness/verl.yaml` is on the editable surface, and verl imports code by path or name from dozens of its keys
in the trainer process, outside any sandbox. So `overrides` is an allow-list (`ALLOWED_OVERRIDES`): leaves of
verl 0.9.1's `ppo_trainer` config that hold a number, a flag or a registry name, never a path, a module or a
class. Also refused: legacy reward keys verl silently ignores (`LEGACY_KEYS`, with their replacement), keys
the controller sets (`CONTROLLER_KEYS`), and every value that is not a scalar or a list of scalars
(`value_problem`): verl instantiates a mapping with `_target_` while it composes the config, and
`${oc.env:...}` would read the controller's environment into the run's config.
"""

from __future__ import annotations

import difflib

# Legacy top-level keys that Hydra accepts but main_ppo 0.9.1 ignores, with their replacement
# (`{rest}` = the part of the key after the prefix). Longer prefixes first.
LEGACY_KEYS: dict[str, str] = {
    "custom_reward_function": "reward.custom_reward_function{rest}",
    "reward_model.reward_manager": "reward.reward_manager.name",
    "reward_model.reward_kwargs": "reward.custom_reward_function.reward_kwargs{rest} (or reward.reward_kwargs{rest} "
    "for the dapo manager)",
    "reward_model": "reward.reward_model{rest}",
    "sandbox_fusion": "reward.sandbox_fusion{rest}",
}

# Keys the controller owns: a harness override of them would break tailing, dumps or resume.
CONTROLLER_KEYS = (
    "trainer.logger",
    "trainer.default_local_dir",
    "trainer.rollout_data_dir",
    "trainer.validation_data_dir",
    "trainer.total_training_steps",
    "trainer.resume_mode",
    "data.train_files",
    "data.val_files",
    "reward.custom_reward_function.path",
    "reward.custom_reward_function.name",
    "actor_rollout_ref.rollout.multi_turn.tool_config_path",  # generated from the manifest's env: (agentic.py)
    "actor_rollout_ref.rollout.agent.agent_loop_config_path",
)


_A = "actor_rollout_ref."


def _under(prefix: str, names: str) -> tuple[str, ...]:
    return tuple(prefix + name for name in names.split())


# The verl keys a harness's `overrides` may set: an allow-list, because verl imports code by path or
# name from dozens of keys (data.custom_cls.path, reward.reward_manager.module.path, model.external_lib,
# model.trust_remote_code, optim.optimizer_impl, rollout.agent.custom_async_server.path, multi_turn tool and
# agent-loop configs, trainer.v1.sampler.custom_sampler.path, ...), in the trainer process outside any sandbox.
# Each entry is a leaf of verl 0.9.1's `ppo_trainer` config holding a number, a flag or a registry name (never a
# path, a module or a class); `*` ends a kwargs subtree whose values reach the harness's own reward function.
# tests/unit/test_verl_overrides_are_an_allow_list.py checks every entry against verl's packaged config.
ALLOWED_OVERRIDES: tuple[str, ...] = (
    *_under(
        _A + "actor.",
        "ppo_epochs ppo_micro_batch_size_per_gpu use_dynamic_bsz ppo_max_token_len_per_gpu grad_clip "
        "clip_ratio_c loss_agg_mode entropy_coeff use_kl_loss kl_loss_coef kl_loss_type shuffle "
        "ulysses_sequence_parallel_size entropy_from_logits_with_chunking entropy_checkpointing "
        "use_torch_compile optim.lr optim.lr_warmup_steps optim.lr_warmup_steps_ratio optim.weight_decay "
        "optim.min_lr_ratio optim.warmup_style optim.lr_scheduler_type optim.betas optim.clip_grad "
        "fsdp_config.param_offload fsdp_config.optimizer_offload fsdp_config.reshard_after_forward "
        "policy_loss.loss_mode checkpoint.save_contents",
    ),
    *_under(
        _A + "ref.",
        "log_prob_micro_batch_size_per_gpu log_prob_use_dynamic_bsz log_prob_max_token_len_per_gpu "
        "fsdp_config.param_offload",
    ),
    *_under(
        _A + "model.",
        "enable_gradient_checkpointing use_remove_padding enable_activation_offload use_fused_kernels "
        "lora_rank lora_alpha use_shm",
    ),
    *_under(
        _A + "rollout.",
        "temperature top_p top_k do_sample gpu_memory_utilization enforce_eager free_cache_engine "
        "max_num_batched_tokens max_num_seqs max_model_len enable_chunked_prefill enable_prefix_caching "
        "log_prob_micro_batch_size_per_gpu log_prob_use_dynamic_bsz log_prob_max_token_len_per_gpu ignore_eos "
        "calculate_log_probs dtype mode val_kwargs.temperature val_kwargs.top_p val_kwargs.top_k val_kwargs.n "
        "val_kwargs.do_sample multi_turn.max_user_turns multi_turn.max_parallel_calls "
        "multi_turn.tool_response_truncate_side agent.num_workers",
    ),
    *_under(
        "algorithm.",
        "gamma lam adv_estimator norm_adv_by_std_in_grpo use_kl_in_reward kl_penalty kl_ctrl.type "
        "kl_ctrl.kl_coef kl_ctrl.horizon kl_ctrl.target_kl filter_groups.enable filter_groups.metric "
        "filter_groups.max_num_gen_batches",
    ),
    *_under(
        "data.",
        "max_prompt_length max_response_length train_batch_size val_batch_size shuffle "
        "filter_overlong_prompts filter_overlong_prompts_workers truncation return_raw_chat "
        "dataloader_num_workers validation_shuffle",
    ),
    *_under(
        "trainer.",
        "val_before_train val_only log_val_generations critic_warmup balance_batch save_freq test_freq "
        "max_actor_ckpt_to_keep del_local_ckpt_after_load ray_wait_register_center_timeout",
    ),
    "reward.reward_manager.name",
    "reward.reward_kwargs.*",
    "reward.custom_reward_function.reward_kwargs.*",
    "ray_kwargs.ray_init.num_cpus",
)
OVERRIDE_RULE = (
    "a harness may override only verl keys that cannot load code "
    "(ALLOWED_OVERRIDES in trainer_backend/verl/overrides.py)"
)


def override_allowed(key: str) -> bool:
    """Say whether a harness may set the verl key `key` (dotted, without Hydra's `+`/`~`): see `ALLOWED_OVERRIDES`."""
    return any(
        key == a or (a.endswith(".*") and key.startswith(a[:-1]) and len(key) > len(a) - 1) for a in ALLOWED_OVERRIDES
    )


def override_problem(override: str) -> str | None:
    """Why a harness may not write the Hydra override `override`, or None when it may (pure)."""
    if "=" not in override and not override.startswith("~"):
        return f"{override!r} is not 'key=value'"
    problem = legacy_key_problem(override)
    if problem:
        return problem
    key = override_key(override)
    if key in CONTROLLER_KEYS:
        return f"{key} is set by EvoTrainer; remove it from overrides"
    if not override_allowed(key):
        close = difflib.get_close_matches(key, [a for a in ALLOWED_OVERRIDES if not a.endswith("*")], n=1, cutoff=0.8)
        hint = f"did you mean {close[0]}? " if close else ""
        return f"{key}: not a verl 0.9.1 config key a harness may override; {hint}{OVERRIDE_RULE}"
    return value_problem(override)


# Keys Hydra's `instantiate` reads: verl turns config nodes into dataclasses through it, recursively.
HYDRA_CALL_KEYS = ("_target_", "_args_", "_partial_", "_recursive_", "_convert_")
VALUE_RULE = "an override's value is a number, a flag, a name or a path, or a [list] of those"


def value_problem(override: str) -> str | None:
    """Why the value of the Hydra override `override` is not a scalar or a list of scalars, or None (pure).

    A mapping value (`{_target_: ...}`) is instantiated by verl's `omega_conf_to_dataclass` (Hydra's recursive
    `instantiate`), which calls whatever `_target_` names in the process composing the config; `${...}`
    (`oc.env`) reads that process's environment; `f(...)` is Hydra's grammar for sweeps and casts. So a value
    holds none of `{`, `}`, `${`, `(`, `)` nor a Hydra call key, and at most one level of `[...]`.
    """
    key, _, value = override.partition("=")
    key = key.lstrip("+~")
    if "${" in value:
        return f"{key}: the value holds an interpolation (${{...}}); {VALUE_RULE}"
    if "{" in value or "}" in value:
        return f"{key}: the value is a mapping ({{...}}), which verl would instantiate; {VALUE_RULE}"
    called = [k for k in HYDRA_CALL_KEYS if k in value]
    if called:
        return f"{key}: the value names {called[0]}, a key Hydra instantiates; {VALUE_RULE}"
    if "(" in value or ")" in value:
        return f"{key}: the value calls a Hydra grammar function (f(...)); {VALUE_RULE}"
    inner = value.strip()
    inner = inner[1:-1] if inner.startswith("[") and inner.endswith("]") else inner
    if "[" in inner or "]" in inner:
        return f"{key}: the value nests lists; {VALUE_RULE}"
    return None


def override_key(override: str) -> str:
    """Return the dotted key of a Hydra override (`+a.b=1` → `a.b`)."""
    return override.split("=", 1)[0].lstrip("+~")


def legacy_key_problem(override: str) -> str | None:
    """Return an error naming the replacement if `override` sets a legacy reward key, else None."""
    key = override_key(override)
    for prefix, replacement in LEGACY_KEYS.items():
        if key == prefix or key.startswith(prefix + "."):
            fix = replacement.format(rest=key[len(prefix) :])
            return f"{key}: legacy key, silently ignored by verl 0.9.1 main_ppo; use {fix} instead"
    return None
