"""Training backends, registered in one explicit dict: `PLUGINS`, name -> `BackendPlugin`.

A plug-in (`trainer_backend/plugin.py`) is everything the rest of EvoTrainer asks of a backend: its runs
(`.runs`, a module implementing `submit(spec) -> Handle`, `poll(handle) -> RunStatus`,
`collect(handle) -> RunResult`, see `trainer_backend/base.py`), its settings' knobs, its checks and its dry
run. Code outside this package reaches a backend through `plugin_of(name)` and never names one; adding a
backend is one package with a `plugin.py` and one entry here.
"""

from __future__ import annotations

from types import ModuleType
from typing import cast

from harness.manifest import BackendName
from trainer_backend.local.plugin import PLUGIN as _LOCAL
from trainer_backend.plugin import BackendPlugin
from trainer_backend.verl.plugin import PLUGIN as _VERL

PLUGINS: dict[BackendName, BackendPlugin] = {p.name: p for p in (_LOCAL, _VERL)}
BACKENDS: dict[str, ModuleType] = {name: cast(ModuleType, p.runs) for name, p in PLUGINS.items()}  # runs by name


def plugin_of(name: str) -> BackendPlugin:
    """The plug-in of backend `name`; ValueError listing the backends when there is none."""
    try:
        return PLUGINS[name]  # type: ignore[index]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}: choose one of {', '.join(PLUGINS)}") from None
