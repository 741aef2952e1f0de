"""A training backend as one object: everything the rest of EvoTrainer asks of a backend, by attribute.

`trainer_backend.PLUGINS` registers each `BackendPlugin` under its name (the one place a backend is
added); code outside `trainer_backend/` reaches a backend only through `trainer_backend.plugin_of(name)`
and never compares backend names. A plug-in owns:

- ``runs``: the module that launches and reads runs (`submit`/`poll`/`collect`, `final_checkpoint`,
  `continuation`: the `Backend` protocol of `trainer_backend/base.py`);
- the harness's side: how its data rows are read (``row_kind``), which settings key names the model that
  trains (``model_setting``, fixed for a session), the settings' declared knobs (``knobs``), the data
  selection file the settings name (``data_selection``), what an ``@trainer_config`` edit of a key means
  in its settings file (``resolve_setting``), its response-length cap (``length_cap``) and which harness
  files its runs read (``reads``);
- the checks before anything trains: ``missing`` (an install hint when the backend cannot run here),
  ``check_settings`` (the settings file, at session start), ``check_data`` (the data its settings add:
  warm-start rows, the data selection), ``check_candidate`` (the backtest's config check of a candidate's
  pilot, before any accelerator time), ``plan_runs`` (`evotrainer run --dry-run`: each planned run validated
  and rendered) and ``dry_run`` (`evotrainer train --dry-run` of one run);
- ``future_checkpoint``: where a run will leave the checkpoint later runs continue, before it exists;
- ``start_settings``: the settings a run reads only when it starts from the starting model (a warm start): a
  candidate that changes one restarts its pilot from there.

Optional parts are None where a backend has none. Each backend's implementation lives in its own package
(`trainer_backend/<name>/plugin.py`) and imports its heavy dependencies only when called.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.manifest import BackendName, Harness
    from harness.rows import RowKind
    from trainer_backend.base import Backend, RunSpec
    from trainer_backend.knobs import KnobSpec


@dataclass
class RunPlan:
    """What a dry run says about one planned run: the lines to show, warnings, and why it would not launch."""

    text: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class BackendPlugin:
    """One training backend (see the module docstring for what each part is for)."""

    name: BackendName
    runs: Backend
    row_kind: RowKind
    model_setting: str
    model_default: Callable[[], object]
    knobs: Callable[[Mapping[str, Any]], tuple[KnobSpec, ...]]
    data_selection: Callable[[Mapping[str, Any]], str | None]
    # (key, is-this-key-in-the-file, create, default) -> the key an `@trainer_config` edit writes and whether
    # (with what default) it is created; None when the backend's settings hold no setting meaning `key`
    resolve_setting: Callable[[str, Callable[[str], bool], bool, object], tuple[str, bool, object] | None]
    length_cap: Callable[[bool], tuple[str, object | None]]  # agentic? -> (settings key, default to create)
    reads: Callable[[Harness, str], bool]  # does a run read this harness file (relative path)?
    missing: Callable[[], str | None]  # None when the backend can run here, else the install hint
    check_data: Callable[[Harness, Mapping[str, int]], None]  # rows per selection value of the training data
    plan_runs: Callable[[list[tuple[RunSpec, bool]], Harness, Path], list[RunPlan]]  # (spec, trusted code)
    future_checkpoint: Callable[[RunSpec], Path]
    check_settings: Callable[[Path, Harness], None] | None = None  # raises ValueError naming the file and fix
    check_candidate: Callable[[RunSpec, Path], list[str]] | None = None  # problems of a candidate's pilot
    dry_run: Callable[[RunSpec], str] | None = None
    # (harness, steps) -> one line on what a run costs on this machine, printed before any work by `train` and
    # `run` (the local backend: a pretrained model on a CPU, and the CPU profile when it is sized for a GPU)
    cost_line: Callable[[Harness, int], str | None] | None = None
    # (run folder, out folder, model card text) -> the run's trained policy written as a Hugging Face folder;
    # raises ValueError naming why a run cannot be exported (`evotrainer export`)
    export: Callable[[Path, Path, str], Path] | None = None
    # settings keys a run reads only when it starts from the backend's starting model (the local warm start):
    # a candidate that changes one has its pilot restart from there instead of continuing the incumbent
    start_settings: frozenset[str] = frozenset()
