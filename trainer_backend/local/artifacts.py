"""Artefact I/O of a local run: data rows, checkpoints, resume truncation, summary (trainer side only)."""

from __future__ import annotations

import json
import pickle
import random
import re
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import torch

from diagnostics.schema import LAST_CHECKPOINT, START_CHECKPOINT, rollout_files
from harness import rows as rows_rule
from harness.atomic import atomic_path, write_atomic
from trainer_backend.base import METRICS_FILE, SUMMARY_FILE

CHECKPOINT = LAST_CHECKPOINT
START = START_CHECKPOINT  # a root run's step-0 state (a rollback target)
REFERENCE = "reference"  # checkpoint key: the lineage's reference policy (weights the KL term anchors to)
RNG_DEVICE = "torch_rng_device"  # checkpoint key: where the sampling stream lives ("cuda"); absent: the CPU


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Read a harness data file by the row rules the session's preflight checks (`harness.rows`).

    Raises:
        ValueError: a row is malformed (`harness.rows.RowError`: the file, line and field named).
    """
    return rows_rule.read_rows(path)


def sample_rows(
    rows: list[dict[str, Any]], weights: dict[str, float] | None, field: str, n: int, rng: random.Random
) -> list[dict[str, Any]]:
    """Draw `n` training rows: by the weight of their `field` value (`data.yaml`), else uniformly.

    Rows whose value has no positive weight (or that lack `field`) are never drawn; values are drawn in
    the order `weights` lists them.

    Raises:
        ValueError: the weights select no row of the training data.
    """
    if weights is None:
        return [rows[rng.randrange(len(rows))] for _ in range(n)]
    by_value: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if field in row:
            by_value.setdefault(str(row[field]), []).append(row)
    rows_rule.check_selection({v: len(r) for v, r in by_value.items()}, weights, field)
    values = [v for v in weights if weights[v] > 0 and v in by_value]
    picks = rng.choices(values, weights=[weights[v] for v in values], k=n)
    return [by_value[v][rng.randrange(len(by_value[v]))] for v in picks]


class CheckpointError(ValueError):
    """A checkpoint this trainer does not load: unreadable, or holding more than tensors and plain values."""


def plain(value: Any, where: str = "checkpoint") -> Any:
    """`value` with every leaf a tensor or a plain value, so `torch.load(weights_only=True)` reads it back.

    Containers become dict / list / tuple (an `OrderedDict` stays one: state dicts are), subclasses of
    int/float/str (an IntEnum, numpy's float64) and numpy scalars become the plain type. Anything else is a
    bug of the code that built the state, named by its key path (`where`).

    Raises:
        TypeError: a leaf is neither a tensor nor a plain value.
    """
    if value is None or type(value) in (bool, int, float, str, bytes, torch.dtype, torch.device):
        return value
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, dict):
        kind = OrderedDict if isinstance(value, OrderedDict) else dict
        return kind((plain(k, f"{where} key"), plain(v, f"{where}[{k!r}]")) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        items = [plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if isinstance(value, tuple) else items
    for base in (bool, int, float, str):
        if isinstance(value, base):
            return base(value)
    item = getattr(value, "item", None)  # a numpy scalar
    if callable(item) and type(value).__module__ == "numpy":
        return plain(item(), where)
    raise TypeError(
        f"{where}: a {type(value).__name__} cannot be stored in a checkpoint; store tensors and plain values"
    )


def save_checkpoint(out_dir: Path, state: dict[str, Any], name: Path = CHECKPOINT) -> Path:
    """Write `name` (default `checkpoints/last.pt`) atomically (temp file + rename) and return its path.

    The state is stored as tensors and plain values (`plain`), so `read_checkpoint` loads it without running
    any code the file could carry.
    """
    path = out_dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        torch.save(plain(state), tmp)
    return path


def read_checkpoint(path: Path, role: str) -> dict[str, Any]:
    """Load a checkpoint with `weights_only=True`: tensors and plain values only, so a file can never run code.

    `role` says which checkpoint it is in the error ("init_checkpoint", "the run's own checkpoint").

    Raises:
        CheckpointError: the file is unreadable, or holds anything besides tensors and plain values (a crafted
            file, or one saved by an EvoTrainer that pickled other objects); names the file and the fix.
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"{role} {path}: refused: it holds objects besides tensors and plain values ({_unpickler_reason(exc)}), "
            "and loading those could run code; checkpoints are loaded with torch.load(weights_only=True). Train "
            "the run that wrote it again with this EvoTrainer, or start without it"
        ) from None
    except (OSError, RuntimeError, EOFError, ValueError) as exc:
        raise CheckpointError(
            f"{role} {path}: unreadable ({type(exc).__name__}: {str(exc)[:200]}); train the run that wrote it "
            "again, or start without it"
        ) from None
    if not isinstance(state, dict):
        raise CheckpointError(
            f"{role} {path}: holds a {type(state).__name__}, not a checkpoint's dict; start without it"
        )
    return state


def _unpickler_reason(exc: pickle.UnpicklingError) -> str:
    """What torch's weights-only unpickler refused, without its advice to load the file unsafely."""
    text = str(exc)
    found = re.search(r"GLOBAL (\S+)", text)
    if found:
        return f"it names {found.group(1)}"
    detail = text.partition("WeightsUnpickler error:")[2].strip().splitlines()
    return detail[0][:120] if detail else "not a checkpoint torch.save wrote"


def load_checkpoint(out_dir: Path) -> dict[str, Any] | None:
    """Return the saved training state, or None when the run has no checkpoint.

    Raises:
        CheckpointError: see `read_checkpoint`.
    """
    path = out_dir / CHECKPOINT
    if not path.is_file():
        return None
    return read_checkpoint(path, "the run's own checkpoint")


def reference_policy(
    source: dict[str, Any] | None, model: torch.nn.Module, where: str, log: Callable[[str], None]
) -> dict[str, torch.Tensor]:
    """The lineage's reference policy: the weights its first run started from (the KL term's anchor).

    `source` is the checkpoint this run continues (its own on resume, the parent's for `init_state`
    optimizer/exact) and carries the reference it was trained against; without one (a fresh run, or
    `init_state="weights"`: a new lineage) the reference is `model`'s current weights, the run's starting
    policy. A checkpoint written before references were carried falls back to that too, and the log says so:
    the KL term then anchors to the policy this run started from, not to its lineage's.
    """
    if source is not None:
        carried = source.get(REFERENCE)
        if carried is not None:
            return {name: tensor.detach().clone() for name, tensor in carried.items()}
        log(f"continuing {where}: no reference policy carried (older checkpoint); the KL reference is this run's start")
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def continue_from(
    parent: dict[str, Any],
    where: str,
    mode: str,
    opt: torch.optim.Optimizer,
    gen: torch.Generator,
    rng: random.Random,
    lr: float,
    filter_key: str,
    log: Callable[[str], None],
) -> Any:
    """Carry the parent checkpoint's optimizer moments (and, for ``exact``, its random streams) into this run.

    `parent` is the loaded checkpoint (`where` names its file in log lines).

    The learning rate stays this run's own (`lr`): a candidate may change it. The group filter's state is
    carried only when the filter code is the parent's (`filter_key`); a changed filter starts fresh.
    Returns the filter state to start from. A parent checkpoint without optimizer state (or with one for a
    different model shape) leaves a fresh optimizer and says so in the log.
    """
    try:
        opt.load_state_dict(parent["optimizer"])
    except (KeyError, ValueError, RuntimeError) as exc:
        log(f"continuing {where}: optimizer state not carried ({type(exc).__name__}: {exc})")
        return {}
    for group in opt.param_groups:
        group["lr"] = lr
    if mode == "exact":
        set_random_streams(parent, gen, rng, where, log)
    parent_state = parent.get("state", {})
    same_filter = parent_state.get("filter_key") == filter_key
    log(
        f"continuing {where}: optimizer{' and random streams' if mode == 'exact' else ''} carried;"
        f" filter state {'carried' if same_filter else 'fresh (filter code changed)'}"
    )
    return parent_state.get("filter", {}) if same_filter else {}


def set_random_streams(
    source: dict[str, Any], gen: torch.Generator, rng: random.Random, where: str, log: Callable[[str], None]
) -> None:
    """Carry the checkpoint's random streams into this run (the sampling stream only on the same device kind:
    a CPU and a CUDA generator's states are different things; the log says when it is not carried)."""
    rng.setstate(source["py_rng"])
    saved = source.get(RNG_DEVICE, "cpu")
    if saved == gen.device.type:
        gen.set_state(source["torch_rng"])
    else:
        log(f"continuing {where}: its sampling stream was on {saved}, this run samples on {gen.device.type}: fresh")


def reset_after(out_dir: Path, step: int) -> None:
    """Drop every artefact written after `step` (metric lines, rollout files, summary) before resuming.

    With `step` = -1 the run starts fresh: the metrics file is emptied, as verl does on restart.
    """
    metrics = out_dir / METRICS_FILE
    if metrics.exists():
        kept = [
            line
            for line in metrics.read_bytes().splitlines()
            if line.strip() and _step_of(line) is not None and _step_of(line) <= step  # type: ignore[operator]
        ]
        write_atomic(metrics, b"".join(line + b"\n" for line in kept))
    for split in ("train", "val"):
        for path in rollout_files(out_dir, split):
            if int(path.stem.split("_", 1)[1]) > step:
                path.unlink()
    (out_dir / SUMMARY_FILE).unlink(missing_ok=True)


def _step_of(line: bytes) -> int | None:
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None  # a half-written last line from the killed process: dropped
    return row.get("step") if isinstance(row, dict) and isinstance(row.get("step"), int) else None


def write_summary(out_dir: Path, summary: dict[str, Any]) -> None:
    """Write `summary.json` atomically; its presence marks the run finished."""
    write_atomic(out_dir / SUMMARY_FILE, json.dumps(summary, indent=2, sort_keys=True, default=str))
