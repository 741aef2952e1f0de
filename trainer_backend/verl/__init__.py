"""The verl backend: a harness becomes a validated verl 0.9.1 GRPO run, local or on a Ray cluster.

Module-level protocol (trainer_backend/base.py): `submit(spec) -> Handle`, `poll(handle) -> RunStatus`,
`collect(handle) -> RunResult`, plus `stop(handle)` and `dry_run(spec) -> str`.

Nothing here imports verl, Ray or pyarrow at import time: EvoTrainer works without the `verl` extra.
Configs are composed and validated against verl's own packaged Hydra config in a child process
(`validate.py`), which is also the only place the harness reward module is imported before launch.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from harness.manifest import Harness, load_harness
from trainer_backend.base import SUMMARY_FILE, Handle, RunResult, RunSpec, RunStatus
from trainer_backend.verl.config import Plan, VerlConfigError, VerlTrainerConfig, build_plan, load_verl_config
from trainer_backend.verl.run import RunState, load_state, stop
from trainer_backend.verl.run import collect as _collect
from trainer_backend.verl.run import launch as _launch
from trainer_backend.verl.run import poll as _poll

__all__ = ["VerlConfigError", "VerlTrainerConfig", "collect", "dry_run", "poll", "stop", "submit"]

VALIDATE_TIMEOUT_S = 300


def _harness(spec: RunSpec) -> Harness:
    harness = load_harness(spec.harness_dir)
    if harness.manifest.trainer.backend != "verl":
        raise VerlConfigError(
            f"{harness.root}/evotrainer.yaml: trainer.backend is "
            f"'{harness.manifest.trainer.backend}'; the verl backend needs "
            "trainer: {backend: verl, config: <verl settings yaml>}"
        )
    return harness


def prepare(spec: RunSpec) -> tuple[Harness, Plan]:
    """Load the harness, convert its data to parquet and build the next attempt's plan (no validation)."""
    from trainer_backend.verl.data import convert_harness_data

    if importlib.util.find_spec("verl") is None:
        raise VerlConfigError(
            "verl is not installed in this environment; install the extra: pip install 'evotrainer[verl]'"
        )
    harness = _harness(spec)
    cfg = load_verl_config(harness)
    previous = load_state(spec.out_dir.resolve()) if spec.out_dir.exists() else None
    attempt = previous.attempt + 1 if previous else 1
    train_file, val_file = convert_harness_data(harness, spec.out_dir)
    return harness, build_plan(harness, spec, cfg, attempt, train_file, val_file)


def validate_plan(plan: Plan, work_dir: Path) -> str:
    """Compose + validate the plan in a child process; return the resolved YAML.

    Raises:
        VerlConfigError: every problem found, each naming the key and the fix.
    """
    folder = work_dir.resolve() / ".verl"
    folder.mkdir(parents=True, exist_ok=True)
    request, answer = folder / f"validate_in.{plan.attempt}.json", folder / f"validate_out.{plan.attempt}.json"
    request.write_text(json.dumps({"overrides": plan.overrides}))
    answer.unlink(missing_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "trainer_backend.verl.validate", str(request), str(answer)],
        env={**os.environ, **plan.env},
        capture_output=True,
        text=True,
        timeout=VALIDATE_TIMEOUT_S,
        cwd=folder,
    )
    if proc.returncode != 0 or not answer.exists():
        raise VerlConfigError(f"verl config validation crashed (rc {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    result = json.loads(answer.read_text())
    if result["problems"]:
        raise VerlConfigError("verl config rejected:\n- " + "\n- ".join(result["problems"]))
    return str(result["yaml"])


def render(plan: Plan, yaml_text: str) -> str:
    """Human-readable dry-run output: environment, command, warnings, resolved config."""
    lines = [f"# verl 0.9.1 launch, attempt {plan.attempt} (config validated)"]
    lines += [f"{k}={v} \\" for k, v in plan.env.items()]
    lines.append("python -m verl.trainer.main_ppo \\")
    lines += [f"  {o} \\" for o in plan.overrides[:-1]] + [f"  {plan.overrides[-1]}"]
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
        status = _poll(handle)
        if status is RunStatus.RUNNING or (status is RunStatus.FINISHED and not spec.resume):
            return handle
        if (out / SUMMARY_FILE).exists():  # resuming a finished run: keep its summary beside the new attempt
            (out / SUMMARY_FILE).replace(out / f"summary.{state.attempt}.json")
    harness, plan = prepare(spec)
    validate_plan(plan, out)
    run_state = RunState(
        run_id=spec.run_id,
        attempt=plan.attempt,
        harness_root=str(harness.root),
        model_path=plan.model_path,
        max_response_length=plan.max_response_length,
        stall_timeout_s=plan.stall_timeout_s,
        started_at=time.time(),
    )
    (out / "config.json").write_text(
        json.dumps(
            {
                "backend": "verl",
                "attempt": plan.attempt,
                "overrides": plan.overrides,
                "env": plan.env,
                "warnings": plan.warnings,
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
