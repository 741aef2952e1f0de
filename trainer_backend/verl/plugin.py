"""The verl backend as a plug-in (`trainer_backend/plugin.py`): its harness side and its checks.

Its runs are `trainer_backend.verl` (verl 0.9's GRPO trainer, locally or as Ray jobs); its settings file is
the harness's `trainer.verl` file (`VerlTrainerConfig`). verl reads the chat-form data rows, its settings and
the reward (any Python file but a group filter, which it cannot run); it has no warm start and no data
selection of its own. Every config is composed and validated against verl's own packaged Hydra config in a
child process before it launches (`validate.py`); nothing here imports verl.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_backend import verl
from trainer_backend.plugin import BackendPlugin, RunPlan

if TYPE_CHECKING:
    from harness.manifest import Harness
    from trainer_backend.base import RunSpec
    from trainer_backend.knobs import KnobSpec


def _knobs(settings: Mapping[str, Any]) -> tuple[KnobSpec, ...]:
    from trainer_backend.knobs import declared_knobs

    return declared_knobs(verl.VerlTrainerConfig)


def _resolve_setting(
    key: str, present: Callable[[str], bool], create: bool, default: object
) -> tuple[str, bool, object] | None:
    """A `@trainer_config` edit in verl's settings: the key as the file holds it (its own name or the local
    trainer's name of it), else the field it means, created at its default; None when verl has none."""
    from trainer_backend.verl.config import settings_field

    found = settings_field(key)
    for name in dict.fromkeys([key, found[0] if found else key]):
        if present(name):
            return name, create, default
    if found is None:
        return None
    return found[0], True, found[1] if default is None else default


def _data_selection(settings: Mapping[str, Any]) -> str | None:
    return None  # verl samples its training rows itself


def _length_cap(agentic: bool) -> tuple[str, object | None]:
    return "max_new_tokens", None  # the local trainer's name: `_resolve_setting` maps it, with verl's default


def _reads(harness: Harness, path: str) -> bool:
    m = harness.manifest
    gf = harness.group_filter
    return path in {m.trainer.settings("verl"), *m.data.files} or (
        path.endswith(".py") and (gf is None or path != gf.path)
    )


def _missing() -> str | None:
    if importlib.util.find_spec("verl") is None:
        return "--backend verl needs verl in this environment: pip install 'evotrainer[verl]'"
    return None


def _check_data(harness: Harness, counts: Mapping[str, int]) -> None:
    return None  # no warm start and no data selection of its own


def plan_runs(runs: list[tuple[RunSpec, bool]], harness: Harness, scratch: Path) -> list[RunPlan]:
    """Each run prepared as it would launch, all validated against verl's config in one child process.

    `runs` pairs each spec with whether its reward may be imported (v0 and the control) or only parsed (a
    candidate's). A warning every run shares is shown once, with the first run.
    """
    from harness.manifest import HarnessError
    from trainer_backend.base import RunRefused
    from trainer_backend.verl.config import Parent, Plan, load_verl_config

    base_cfg = load_verl_config(harness)
    parent = Parent(lr=base_cfg.lr, train_data=verl.train_data_hash(harness))  # v0's run, before it exists
    plans = [RunPlan() for _ in runs]
    prepared: list[tuple[RunPlan, Plan, bool]] = []
    for (spec, trusted), out in zip(runs, plans, strict=True):
        try:
            _, plan = verl.prepare(spec, parent=parent if spec.init_checkpoint else None)
        except (RunRefused, HarnessError) as exc:
            out.problems.append(str(exc))
            continue
        out.text = verl.render_launch(plan, "python3" if spec.ray_address else "python")
        if plan.agent is not None:  # an agentic harness: the generated configs, in full with the first run
            out.text += [f"# agentic: verl's multi-turn agent loop, tools from {plan.agent.tool_config}"]
            out.text += [] if prepared else plan.agent.describe()
        prepared.append((out, plan, trusted))
    results = verl.validate_plans([(plan, trusted) for _, plan, trusted in prepared], scratch, "session")
    said: set[str] = set()
    for (out, plan, _), (_, problems) in zip(prepared, results, strict=True):
        out.problems += problems
        out.notes += [w for w in plan.warnings if w not in said and not w.startswith("continues ")]  # in its text
        said.update(plan.warnings)
    return plans


def check_candidate(spec: RunSpec, work_dir: Path) -> list[str]:
    """Compose and validate a candidate's pilot config as `submit` would launch it; its problems (empty: verl
    accepts it). The parquet data and validation files go to `work_dir`; the reward is parsed, not imported.

    Raises:
        RuntimeError: the validation itself crashed (an infra error, not the candidate's).
    """
    from harness.manifest import HarnessError
    from trainer_backend.base import RunRefused

    try:
        _, plan = verl.prepare(spec)
    except (RunRefused, HarnessError) as exc:
        return [str(exc)]
    return verl.validate_plans([(plan, False)], work_dir, "candidate")[0][1]


def _future_checkpoint(spec: RunSpec) -> Path:
    from trainer_backend.verl.config import CHECKPOINT_DIR

    return spec.out_dir.resolve() / CHECKPOINT_DIR / f"global_step_{spec.steps}"  # verl saves the last step


PLUGIN = BackendPlugin(
    name="verl",
    runs=verl,
    row_kind="chat_data",
    model_setting="model_path",
    model_default=lambda: None,
    knobs=_knobs,
    data_selection=_data_selection,
    resolve_setting=_resolve_setting,
    length_cap=_length_cap,
    reads=_reads,
    missing=_missing,
    check_data=_check_data,
    plan_runs=plan_runs,
    future_checkpoint=_future_checkpoint,
    check_candidate=check_candidate,
    dry_run=verl.dry_run,
)
