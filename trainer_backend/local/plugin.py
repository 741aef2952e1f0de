"""The local backend as a plug-in (`trainer_backend/plugin.py`): its harness side and its checks.

Its runs are `trainer_backend.local` (a plain-torch GRPO trainer in a subprocess or a Ray job); its settings
file is `harness/trainer.yaml` (`LocalTrainerConfig`), which also names the warm-start rows and the data
selection. Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_backend import local
from trainer_backend.local.config import START_SETTINGS
from trainer_backend.plugin import BackendPlugin, RunPlan

if TYPE_CHECKING:
    from harness.manifest import Harness
    from trainer_backend.base import RunSpec
    from trainer_backend.knobs import KnobSpec

# The settings `@length_cap` edits (skills/patches.py), per episode kind, and their defaults (the declared
# knobs that move "longer_responses"; a unit test holds the two together).
LENGTH_CAPS: dict[str, tuple[str, object]] = {"single": ("max_new_tokens", 48), "agentic": ("max_turn_tokens", 32)}


def _model_default() -> object:
    from trainer_backend.local.config import TINY

    return TINY


def _knobs(settings: Mapping[str, Any]) -> tuple[KnobSpec, ...]:
    """The ranges depend on what trains (the tiny model or a pretrained one, `config.knobs_for`)."""
    from trainer_backend.local.config import TINY, knobs_for, model_kind

    model = settings.get("model", TINY)
    return knobs_for(model_kind(model if isinstance(model, str) else TINY))


def _data_selection(settings: Mapping[str, Any]) -> str | None:
    found = settings.get("data_selection")
    return found if isinstance(found, str) and found else None


def _resolve_setting(
    key: str, present: Callable[[str], bool], create: bool, default: object
) -> tuple[str, bool, object]:
    return key, create, default  # the settings file holds the local trainer's own names


def _length_cap(agentic: bool) -> tuple[str, object]:
    return LENGTH_CAPS["agentic" if agentic else "single"]


def _reads(harness: Harness, path: str) -> bool:
    return True  # every harness file a candidate may change is read by some local run


def _missing() -> str | None:
    return None  # torch is a dependency of the package itself


def check_data(harness: Harness, counts: Mapping[str, int]) -> None:
    """The warm-start rows and the data selection the settings name (`counts`: training rows per value).

    Raises:
        ValueError: a `harness.rows.RowError` (file, line and field named), or unreadable trainer settings.
    """
    from harness.rows import check_selection, iter_rows
    from trainer_backend.local.config import load_data_weights, load_trainer_config

    settings = harness.manifest.trainer.settings("local")
    if settings is None:
        return
    cfg = load_trainer_config(harness.path(settings), harness.root)
    warm = harness.path(cfg.warmstart_data)
    if not warm.is_file():
        raise ValueError(f"{harness.path(settings)}: field 'warmstart_data': {warm} does not exist; create it")
    for _ in iter_rows(warm, "warmstart"):
        pass
    if cfg.data_selection is not None:
        weights = load_data_weights(harness.path(cfg.data_selection))
        if weights is not None:
            train = str(harness.path(harness.manifest.data.train))
            check_selection(counts, weights, harness.manifest.data.select_by, train, cfg.data_selection)


def check_settings(path: Path, harness: Harness) -> None:
    """The trainer settings parse, have only known keys (closest suggested) and valid values, and the policy
    they name can train here (the model folder and its tokenizer, the harness's special tokens, the
    device, prompts plus the response budget within the model's context).

    Raises:
        ValueError: naming the file, the field and the fix.
    """
    import yaml

    from harness.keys import closest, unknown_keys
    from harness.manifest import MANIFEST_NAME
    from trainer_backend.local.config import LocalTrainerConfig, load_trainer_config

    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML ({' '.join(str(exc).split())}); fix the syntax") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping of trainer settings (lr: ..., group_size: ...)")
    for _, key, valid in unknown_keys(raw, LocalTrainerConfig):
        raise ValueError(f"{path}: unknown trainer key '{key}'; {closest(str(key), valid)}")
    try:
        cfg = load_trainer_config(path, harness.root)  # its file fields by the path rule
    except ValueError as exc:
        raise ValueError(f"{exc}; fix the value (trainer.config in {harness.root / MANIFEST_NAME})") from None
    if cfg.kind == "tiny":
        return
    from trainer_backend.local.setup import PolicyError, check_policy  # torch: only for a Hugging Face model

    try:
        check_policy(harness, cfg, _prompts(harness))
    except PolicyError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _prompts(harness: Harness) -> Iterable[tuple[str, int, str]]:
    """`(file, line, prompt)` of the training and held-out rows (rows that are not objects with a text prompt
    are skipped: the data checks name those)."""
    import json

    for relative in harness.manifest.data.files:
        with open(harness.path(relative), encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                try:
                    row = json.loads(line) if line.strip() else None
                except ValueError:
                    continue
                if isinstance(row, dict) and isinstance(row.get("prompt"), str):
                    yield relative, number, row["prompt"]


def plan_runs(runs: list[tuple[RunSpec, bool]], harness: Harness, scratch: Path) -> list[RunPlan]:
    """Each run's harness settings loaded and checked, and the trainer command it would launch."""
    from harness.manifest import HarnessError, load_harness
    from trainer_backend.local.config import load_data_weights, load_trainer_config

    plans: list[RunPlan] = []
    for spec, _ in runs:
        plan = RunPlan()
        try:
            own = load_harness(Path(spec.harness_dir))
            settings = own.manifest.trainer.settings("local")
            assert settings is not None  # check_backend / the backtest's harness checks
            cfg = load_trainer_config(own.path(settings), own.root)
            load_data_weights(None if cfg.data_selection is None else own.path(cfg.data_selection))
        except (HarnessError, ValueError) as exc:
            plan.problems.append(str(exc))
        plan.text = [f"# spec: steps={spec.steps} seed={spec.seed} init_state={spec.init_state}"]
        if spec.init_checkpoint:
            plan.text.append(f"# continues {spec.init_checkpoint}; {local.CARRIED[spec.init_state]}")
        plan.text.append(local.command(spec))
        plans.append(plan)
    return plans


def cost_line(harness: Harness, steps: int) -> str | None:
    """One line on a pretrained model's run of `steps` steps on a CPU (`trainer_backend.local.sizing`)."""
    from harness.rows import read_rows
    from harness.splits import heldout_splits
    from trainer_backend.local.config import load_trainer_config
    from trainer_backend.local.sizing import cpu_line

    settings = harness.manifest.trainer.settings("local")
    if settings is None:
        return None
    cfg = load_trainer_config(harness.path(settings), harness.root)
    if cfg.kind == "tiny":
        return None
    selection, _ = heldout_splits(harness.manifest.data, lambda relative: read_rows(harness.path(relative)))
    return cpu_line(harness.root, cfg, steps, len(selection))


def _export(run_dir: Path, out: Path, card: str) -> Path:
    from trainer_backend.local.export import export_run  # torch and transformers: only when exporting

    return export_run(run_dir, out, card)


def _future_checkpoint(spec: RunSpec) -> Path:
    return spec.out_dir.resolve() / local.FINAL_CHECKPOINT


PLUGIN = BackendPlugin(
    name="local",
    runs=local,
    row_kind="data",
    model_setting="model",
    model_default=_model_default,
    knobs=_knobs,
    data_selection=_data_selection,
    resolve_setting=_resolve_setting,
    length_cap=_length_cap,
    reads=_reads,
    missing=_missing,
    check_data=check_data,
    plan_runs=plan_runs,
    future_checkpoint=_future_checkpoint,
    check_settings=check_settings,
    cost_line=cost_line,
    export=_export,
    start_settings=START_SETTINGS,
)
