"""Training backends, chosen from an explicit dict (style principle 8).

Each value is a module implementing `submit(spec) -> Handle`, `poll(handle) -> RunStatus` and
`collect(handle) -> RunResult` (see `trainer_backend/base.py`).
"""

from __future__ import annotations

from types import ModuleType

from trainer_backend import local, verl

BACKENDS: dict[str, ModuleType] = {"local": local, "verl": verl}
