"""Compose and validate overrides against verl 0.9.1's own packaged Hydra config (verl.md §4).

Refuses, before composing, any override whose value is not a scalar or a list of scalars
(`overrides.value_problem`: verl instantiates a mapping's `_target_` while validating). Then runs verl's
compose API + `OmegaConf.resolve` + `verl.utils.config.validate_config`, then the checks verl
makes too late or not at all: legacy reward keys, rollout TP×DP vs GPUs, logger names, wandb key,
save_freq, the reward module loading through verl's `get_custom_reward_fn`, the reward manager
resolving, data files existing. Imports verl (and the harness reward module) — so the controller runs
it in a child process: `python -m trainer_backend.verl.validate IN.json OUT.json`.

A candidate's reward is candidate code, which runs only in a sandbox before its pilot: with
`"import_reward": false` in the request the module is parsed (file present, the function defined at its
top level) instead of imported. The same holds for an agentic harness's environment (`make_env`).

An agentic plan (a `multi_turn.tool_config_path` is set, `agentic.py`) is also checked the way verl's
agent-loop workers will load it: the tool config through verl's own `initialize_tools_from_config` (each
tool's OpenAI schema validated by verl), each agent-loop config entry's class resolved by Hydra, the
tool-call parser (`multi_turn.format`) registered, and every data row's `agent_name` a registered loop.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path
from typing import Any

from trainer_backend.verl.config import hydra_error_key
from trainer_backend.verl.overrides import legacy_key_problem, value_problem


def _as_list(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [str(v) for v in value]


def compose(overrides: list[str]) -> Any:
    """Compose verl's `ppo_trainer` config with `overrides` and resolve interpolations."""
    import verl.trainer.main_ppo as entry
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    config_dir = os.path.join(os.path.dirname(entry.__file__), "config")
    with initialize_config_dir(config_dir, version_base=None):
        cfg = hydra_compose("ppo_trainer", overrides=overrides)
    OmegaConf.resolve(cfg)
    return cfg


def check_overrides(
    overrides: list[str], import_reward: bool = True, wandb_key_set: bool | None = None
) -> tuple[str, list[str]]:
    """Return (resolved config YAML, problems). An empty problem list means verl will accept the run.

    Every problem names the key and the fix. `import_reward=False` parses the reward module instead of
    importing it (see above). `wandb_key_set` says whether the controller has a WANDB_API_KEY (the child's
    environment holds no credentials); None: look in this process's environment.
    """
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    unsafe = [p for p in (value_problem(o) for o in overrides) if p]
    if unsafe:  # composing would already instantiate a mapping's `_target_` (overrides.value_problem)
        return "", unsafe
    problems = [p for p in (legacy_key_problem(o) for o in overrides) if p]
    try:
        cfg = compose(overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        text = str(exc).strip().splitlines()[0]
        key = hydra_error_key(str(exc))
        if key:
            problems.append(
                f"{key}: not a verl 0.9.1 config key or not a valid value ({text}); check the "
                "spelling against `python -m verl.trainer.main_ppo --cfg job`, or prefix a new key "
                "with '+'"
            )
        else:
            problems.append(f"hydra compose failed: {text}")
        return "", problems
    if wandb_key_set is None:
        wandb_key_set = bool(os.environ.get("WANDB_API_KEY"))
    problems += _controller_checks(cfg, import_reward, wandb_key_set)
    problems += _verl_checks(cfg)
    if cfg.actor_rollout_ref.rollout.multi_turn.tool_config_path:
        problems += _agentic_checks(cfg, import_env=import_reward)
    return OmegaConf.to_yaml(cfg), problems


def _verl_checks(cfg: Any) -> list[str]:
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    try:
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    except (AssertionError, ValueError, TypeError) as exc:
        return [f"verl validate_config: {exc}; adjust the batch sizes / settings it names"]
    return []


def _reward_defined(path: str, name: str, what: str = "reward.custom_reward_function") -> str | None:
    """A problem when `path` does not define `name` at its top level (parsed, never imported)."""
    try:
        with open(os.path.expanduser(path.removeprefix("file://")), "rb") as fh:
            tree = ast.parse(fh.read(), filename=path)
    except (OSError, SyntaxError, ValueError) as exc:
        return f"{what}.path: cannot parse {path} ({type(exc).__name__}: {exc}); fix the file"
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    if name not in defined:
        return f"{what}.name: {path} defines no top-level {name}; fix the module"
    return None


def _agentic_checks(cfg: Any, import_env: bool) -> list[str]:
    """Load the agentic plan's tools and agent loops as verl's workers will (see the module docstring)."""
    import pyarrow.parquet as pq
    from hydra.utils import get_class
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, _agent_loop_registry
    from verl.experimental.agent_loop.tool_parser import ToolParser
    from verl.tools.tool_registry import initialize_tools_from_config

    mt = cfg.actor_rollout_ref.rollout.multi_turn
    problems = []
    try:
        initialize_tools_from_config(mt.tool_config_path)
    except Exception as exc:  # verl's loader on our generated file: any failure is reported, not raised
        problems.append(
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path: verl cannot load {mt.tool_config_path} "
            f"({type(exc).__name__}: {' '.join(str(exc).split())[:400]}); fix the manifest's env.tools"
        )
    if mt.format not in ToolParser._registry:
        problems.append(
            f"actor_rollout_ref.rollout.multi_turn.format={mt.format}: no such verl tool-call parser; set tool_format "
            f"to one of {sorted(ToolParser._registry)} (the policy model's chat template)"
        )
    names = set(_agent_loop_registry)
    path = cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path
    for entry in OmegaConf.load(path) if path else []:
        try:
            if not issubclass(get_class(entry["_target_"]), AgentLoopBase):
                raise TypeError("not an AgentLoopBase subclass")
        except Exception as exc:  # an unimportable class is reported with its name, not raised
            problems.append(f"actor_rollout_ref.rollout.agent.agent_loop_config_path: {entry.get('_target_')}: {exc}")
            continue
        names.add(str(entry["name"]))
        if "harness_root" in entry:
            problems += _env_loads(str(entry["harness_root"]), import_env)
    for key in ("train_files", "val_files"):
        for f in _as_list(cfg.data[key]):
            if not os.path.exists(f) or "agent_name" not in pq.read_schema(f).names:
                continue
            unknown = set(pq.read_table(f, columns=["agent_name"]).column(0).to_pylist()) - names
            if unknown:
                problems.append(f"data.{key}: rows name agent loops {sorted(unknown)} that are not registered")
    return problems


def _env_loads(root: str, import_env: bool) -> list[str]:
    """The harness environment's `make_env` imports (v0, control), or is defined at top level (candidates)."""
    from harness.calls import load_function
    from harness.failures import CandidateCodeError
    from harness.manifest import HarnessError, load_harness

    try:
        harness = load_harness(Path(root))
    except HarnessError as exc:
        return [f"env: {exc}"]
    if harness.env is None:
        return [f"env: {root}/evotrainer.yaml declares no env: but the plan runs its tools"]
    if not import_env:
        problem = _reward_defined(str(harness.path(harness.env.path)), harness.env.function, "env.entry")
        return [problem] if problem else []
    try:
        load_function(harness.root, harness.env)
    except CandidateCodeError as exc:
        return [f"env.entry {harness.env}: {exc.message}; fix the environment module"]
    return []


def _controller_checks(cfg: Any, import_reward: bool, wandb_key_set: bool) -> list[str]:
    from verl.trainer.ppo.reward import get_custom_reward_fn, resolve_reward_manager_cls
    from verl.utils.tracking import Tracking

    problems = []
    tr, ro = cfg.trainer, cfg.actor_rollout_ref.rollout
    loggers = _as_list(tr.logger)
    problems += [
        f"trainer.logger: unknown backend {b!r}; use some of {Tracking.supported_backend}"
        for b in loggers
        if b not in Tracking.supported_backend
    ]
    if "wandb" in loggers and not wandb_key_set:
        problems.append("trainer.logger: wandb listed but WANDB_API_KEY is unset; export it or drop wandb")
    if tr.save_freq is None or tr.save_freq <= 0:
        problems.append(f"trainer.save_freq={tr.save_freq}: no checkpoints, the run cannot resume; set it > 0")
    gpus = tr.n_gpus_per_node * tr.nnodes
    tp, dp = ro.tensor_model_parallel_size, ro.data_parallel_size
    if tp * dp > gpus:
        problems.append(
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp} x data_parallel_size={dp} "
            f"exceeds trainer.n_gpus_per_node x trainer.nnodes = {gpus} GPUs; set rollout_tp <= "
            f"{max(1, gpus // dp)} (or add GPUs)"
        )
    path, name = cfg.reward.custom_reward_function.path, cfg.reward.custom_reward_function.name
    if not import_reward and path and not str(path).startswith("pkg://"):
        problem = _reward_defined(str(path), str(name))
        problems += [problem] if problem else []
    elif import_reward:
        try:
            get_custom_reward_fn(cfg)
        except Exception as exc:  # any failure to import user code is reported as a problem, not raised
            problems.append(
                f"reward.custom_reward_function.path: cannot load {name} from {path} ({type(exc).__name__}: {exc}); "
                "fix the reward module"
            )
    try:
        resolve_reward_manager_cls(cfg)
    except Exception as exc:
        problems.append(
            f"reward.reward_manager.name={cfg.reward.reward_manager.name}: does not resolve ({exc}); "
            "use naive, dapo, gdpo, rate_limited or remote"
        )
    for key in ("train_files", "val_files"):
        for f in _as_list(cfg.data[key]):
            if "://" not in f and not os.path.exists(os.path.expanduser(f)):
                problems.append(f"data.{key}: file {f} does not exist; check the harness data paths")
    return problems


def main(argv: list[str]) -> int:
    """Child-process entry: read {"plans": [{"overrides", "import_reward", "env", "wandb_key_set"}, ...]} from
    argv[0], write {"results": [{"yaml", "problems"}, ...]} to argv[1] (one result per plan, in order)."""
    with open(argv[0]) as fh:
        request = json.load(fh)
    results = []
    for plan in request["plans"]:
        saved = dict(os.environ)
        os.environ.update(plan.get("env", {}))  # the plan's own environment (e.g. WANDB_API_KEY checks)
        try:
            yaml_text, problems = check_overrides(
                plan["overrides"], bool(plan.get("import_reward", True)), plan.get("wandb_key_set")
            )
        finally:
            os.environ.clear()
            os.environ.update(saved)
        results.append({"yaml": yaml_text, "problems": problems})
    with open(argv[1], "w") as fh:
        json.dump({"results": results}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
