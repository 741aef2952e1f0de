"""The verl backend: a harness becomes a validated verl 0.9.1 GRPO run, local or on a Ray cluster.

Module-level protocol (trainer_backend/base.py): `submit(spec) -> Handle`, `poll(handle) -> RunStatus`,
`collect(handle) -> RunResult`, plus `stop(handle)`, `dry_run(spec) -> str`, `final_checkpoint(run_dir)` and
`continuation(run_dir)`.

A run whose `init_checkpoint` is another run's `checkpoints/global_step_N` continues it: `submit` seeds the
run's own `checkpoints/` with a hard-linked copy of that folder and verl resumes from it (config.py,
`plan_continuation`, says what is carried).

Nothing here imports verl, Ray or pyarrow at import time: EvoTrainer works without the `verl` extra.
Configs are composed and validated against verl's own packaged Hydra config in a child process
(`validate.py`), which is also the only place the harness reward module is imported before launch.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from harness.atomic import write_atomic
from harness.manifest import Harness, load_harness
from trainer_backend import ray_jobs
from trainer_backend.base import CONFIG_FILE, SUMMARY_FILE, Handle, RunResult, RunSpec, RunStatus
from trainer_backend.verl.config import (
    CHECKPOINT_DIR,
    CHECKPOINT_MARKER,
    Continuation,
    Parent,
    Plan,
    VerlConfigError,
    VerlTrainerConfig,
    build_plan,
    checkpoint_step,
    latest_checkpoint_step,
    load_verl_config,
)
from trainer_backend.verl.run import RunState, load_state, stop
from trainer_backend.verl.run import collect as _collect
from trainer_backend.verl.run import launch as _launch
from trainer_backend.verl.run import poll as _poll

__all__ = [
    "VerlConfigError",
    "VerlTrainerConfig",
    "collect",
    "continuation",
    "dry_run",
    "final_checkpoint",
    "poll",
    "stop",
    "submit",
]

VALIDATE_TIMEOUT_S = 300
_LR = re.compile(r"^actor_rollout_ref\.actor\.optim\.lr=(.+)$")


def train_data_hash(harness: Harness) -> str:
    """sha256 of the harness's training data file (a continued run keeps the data position only if it matches)."""
    return hashlib.sha256(harness.path(harness.manifest.data.train).read_bytes()).hexdigest()


def parent_of(checkpoint: Path) -> Parent:
    """What the run that saved `checkpoint` (`<run>/checkpoints/global_step_N`) trained with, as far as on disk."""
    run_dir = checkpoint.resolve().parent.parent
    lr = train_data = None
    try:
        config = json.loads((run_dir / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        config = {}
    for override in config.get("overrides", []):
        if found := _LR.match(override):
            lr = float(found.group(1))
    train_data = config.get("train_data")
    shards = sorted((checkpoint / "actor").glob("model_world_size_*_rank_0.pt"))
    world = int(shards[0].name.split("_")[3]) if shards else None
    return Parent(lr=lr, train_data=train_data, world_size=world)


def prepare(spec: RunSpec, *, parent: Parent | None = None) -> tuple[Harness, Plan]:
    """Load the harness, convert its data to parquet and build the next attempt's plan (no validation).

    `parent` overrides what is read about a continued checkpoint's run (a dry run plans before it exists).
    """
    from trainer_backend.verl.data import convert_harness_data

    if importlib.util.find_spec("verl") is None:
        raise VerlConfigError(
            "verl is not installed in this environment; install the extra: pip install 'evotrainer[verl]'"
        )
    harness = load_harness(spec.harness_dir)
    cfg = load_verl_config(harness)
    previous = load_state(spec.out_dir.resolve()) if spec.out_dir.exists() else None
    attempt = previous.attempt + 1 if previous else 1
    train_file, val_file = convert_harness_data(harness, spec.out_dir)
    init = spec.init_checkpoint
    if parent is None and init is not None and checkpoint_step(init) is not None:
        parent = parent_of(init)
    plan = build_plan(harness, spec, cfg, attempt, train_file, val_file, parent, train_data_hash(harness))
    if plan.agent is not None:  # the generated tool and agent-loop configs verl loads (agentic.py)
        for path, text in plan.agent.texts.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, text)
    return harness, plan


def seed_continuation(cont: Continuation, out_dir: Path) -> None:
    """Copy the parent's checkpoint folder into the run's `checkpoints/` (hard links where the filesystem allows:
    verl writes new global_step folders and never rewrites a loaded one) and mark it as the latest.

    Raises:
        VerlConfigError: the parent's checkpoint is gone or incomplete.
    """
    ckpt = out_dir.resolve() / CHECKPOINT_DIR
    if latest_checkpoint_step(ckpt) is not None:
        return  # seeded by an earlier attempt (or the run saved its own since): resume_mode=auto takes the latest
    if not (cont.source / "actor").is_dir():
        raise VerlConfigError(f"init_checkpoint {cont.source}: no actor/ folder; the parent run saved no checkpoint")
    target = ckpt / cont.source.name
    shutil.rmtree(target, ignore_errors=True)  # a copy cut short by a crash

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    ignore = None if cont.dataloader else shutil.ignore_patterns("data.pt")
    shutil.copytree(cont.source, target, copy_function=link, ignore=ignore)
    write_atomic(ckpt / CHECKPOINT_MARKER, str(cont.step))


def final_checkpoint(run_dir: Path) -> Path | None:
    """The run's last saved verl checkpoint folder (`checkpoints/global_step_N`), None when it saved none."""
    step = latest_checkpoint_step(run_dir / CHECKPOINT_DIR)
    path = run_dir / CHECKPOINT_DIR / f"global_step_{step}"
    return path if step is not None and (path / "actor").is_dir() else None


def continuation(run_dir: Path) -> str:
    """What the run carried over from the checkpoint it started from ("" when it started from the model)."""
    try:
        return str(json.loads((run_dir / CONFIG_FILE).read_text()).get("continuation", ""))
    except (OSError, ValueError):
        return ""


def validate_plan(plan: Plan, work_dir: Path, import_reward: bool = True) -> str:
    """Compose + validate the plan in a child process; return the resolved YAML.

    With `import_reward=False` the reward module is checked without being imported (its file and a top-level
    `def` of the function): a candidate's code must not run outside its sandbox before its pilot.

    Raises:
        VerlConfigError: every problem found, each naming the key and the fix.
        RuntimeError: the validation itself crashed (ours, not the config's).
    """
    yaml_text, problems = validate_plans([(plan, import_reward)], work_dir, f"attempt{plan.attempt}")[0]
    if problems:
        raise VerlConfigError("verl config rejected:\n- " + "\n- ".join(problems))
    return yaml_text


# What the validation child sees of the controller's environment: what Python, verl's imports and a reward
# module need, and never a credential. The child composes candidate-editable config and imports the harness's
# reward module, so a secret in its environment is one `oc.env` or `os.environ` away from a run's files.
CHILD_ENV_NAMES = frozenset(
    [
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "TEMP",
        "TMP",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "LD_LIBRARY_PATH",
        "CUDA_HOME",
        "CUDA_VISIBLE_DEVICES",
        "XDG_CACHE_HOME",
    ]
)
CHILD_ENV_PREFIXES = ("LC_", "PYTHON", "HF_", "TRANSFORMERS_", "HYDRA_", "OMP_", "MKL_")
SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)


def child_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed part of `environ` a config-checking child gets (`CHILD_ENV_NAMES`, `CHILD_ENV_PREFIXES`),
    less every name that looks like a credential (`SECRET_NAME`: HF_TOKEN, ..._API_KEY, ..._PASSWORD)."""
    return {
        name: value
        for name, value in environ.items()
        if (name in CHILD_ENV_NAMES or name.startswith(CHILD_ENV_PREFIXES)) and not SECRET_NAME.search(name)
    }


def validate_plans(plans: list[tuple[Plan, bool]], work_dir: Path, name: str) -> list[tuple[str, list[str]]]:
    """Compose + validate several plans in one child process (verl imports once); (YAML, problems) per plan.

    Each plan comes with its `import_reward` flag (see `validate_plan`); `name` names the request files under
    `<work_dir>/.verl/`.

    Raises:
        RuntimeError: the validation itself crashed (ours, not a config's).
    """
    folder = work_dir.resolve() / ".verl"
    folder.mkdir(parents=True, exist_ok=True)
    request, answer = folder / f"validate_in.{name}.json", folder / f"validate_out.{name}.json"
    wandb_key_set = bool(os.environ.get("WANDB_API_KEY"))  # the child checks for it but never sees it
    items = [
        {"overrides": p.overrides, "import_reward": imp, "env": p.env, "wandb_key_set": wandb_key_set}
        for p, imp in plans
    ]
    request.write_text(json.dumps({"plans": items}))
    answer.unlink(missing_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "trainer_backend.verl.validate", str(request), str(answer)],
        env=child_env(os.environ),
        capture_output=True,
        text=True,
        timeout=VALIDATE_TIMEOUT_S + 30 * len(plans),
        cwd=folder,
    )
    if proc.returncode != 0 or not answer.exists():
        raise RuntimeError(f"verl config validation crashed (rc {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return [(str(r["yaml"]), list(r["problems"])) for r in json.loads(answer.read_text())["results"]]


def render_launch(plan: Plan, python: str = "python") -> list[str]:
    """The launch as shell lines: what it continues (if anything), the environment and the command."""
    lines = [f"# {plan.continuation.describe()}"] if plan.continuation is not None else []
    lines += [f"{k}={v} \\" for k, v in plan.env.items()]
    argv = plan.argv(python)
    lines.append(f"{' '.join(argv[:3])} \\")
    lines += [f"  {o} \\" for o in argv[3:-1]] + [f"  {argv[-1]}"]
    return lines


def render(plan: Plan, yaml_text: str) -> str:
    """Human-readable dry-run output: environment, command, the generated tool config (agentic), warnings,
    resolved config."""
    lines = [f"# verl 0.9.1 launch, attempt {plan.attempt} (config validated)", *render_launch(plan)]
    if plan.agent is not None:
        lines += ["", "# agentic harness: verl's multi-turn agent loop, with these generated configs:"]
        lines += plan.agent.describe()
    if plan.warnings:
        lines += ["", "# warnings (not mapped or changed meaning):"] + [f"# - {w}" for w in plan.warnings]
    lines += ["", "# resolved verl config:", yaml_text]
    return "\n".join(lines)


def dry_run(spec: RunSpec) -> str:
    """Validate the run without launching it; return the command line and the resolved config YAML.

    Writes the parquet data under `<out_dir>/verl_data/` (needed to check the data files).

    Raises:
        VerlConfigError: naming the key and the fix.
    """
    _, plan = prepare(spec)
    return render(plan, validate_plan(plan, spec.out_dir))


def submit(spec: RunSpec) -> Handle:
    """Validate and launch one attempt; idempotent when the run folder already holds a live or finished run."""
    out = spec.out_dir.resolve()
    state = load_state(out) if out.exists() else None
    if state is not None:
        handle = Handle(backend="verl", run_id=state.run_id, out_dir=out, pid=state.pid, job_id=state.job_id)
        record = ray_jobs.load_record(out)
        recorded = record is not None and record.job_id == state.job_id
        if record is not None and recorded and ray_jobs.status(record.address, record.job_id) is None:
            ray_jobs.submit(record, out)  # recorded, then the controller died before the submission went out
            return handle
        status = _poll(handle)
        if status is RunStatus.RUNNING or (status is RunStatus.FINISHED and not spec.resume):
            return handle
        if (out / SUMMARY_FILE).exists():  # resuming a finished run: keep its summary beside the new attempt
            (out / SUMMARY_FILE).replace(out / f"summary.{state.attempt}.json")
    harness, plan = prepare(spec)
    validate_plan(plan, out)
    if plan.continuation is not None:
        seed_continuation(plan.continuation, out)
    run_state = RunState(
        run_id=spec.run_id,
        attempt=plan.attempt,
        harness_root=str(harness.root),
        model_path=plan.model_path,
        max_response_length=plan.max_response_length,
        stall_timeout_s=plan.stall_timeout_s,
        started_at=time.time(),
        start_step=plan.start_step,
        strict_eval=str(harness.strict_eval),
        tool_format=plan.agent.tool_format if plan.agent is not None else None,
    )
    (out / CONFIG_FILE).write_text(
        json.dumps(
            {
                "backend": "verl",
                "attempt": plan.attempt,
                "overrides": plan.overrides,
                "env": plan.env,
                "warnings": plan.warnings,
                "train_data": train_data_hash(harness),
                "continuation": plan.continuation.carried_text() if plan.continuation else "",
            },
            indent=1,
        )
    )
    argv = plan.argv("python3" if spec.ray_address else sys.executable)
    return _launch(spec, argv, plan.env, run_state)


def poll(handle: Handle) -> RunStatus:
    """Where the run stands (finalizes summary.json once the trainer has ended)."""
    return _poll(handle)


def collect(handle: Handle) -> RunResult:
    """The finished run's classified result; raises ValueError while it still runs."""
    return _collect(handle)
