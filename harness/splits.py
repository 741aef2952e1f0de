"""The two held-out splits: *selection*, which every decision reads, and the *sealed test* split.

A session decides keep / merge / recommend on the selection split's per-prompt scores; the more decisions it
makes on one set, the more its best score overstates new prompts. The sealed split is scored once per run,
at its last step, into `rollouts/sealed/` (the local trainer), a folder no reader of the loop opens
(`diagnostics.schema.SPLITS` is train and val), and only the session's end reads it: the final summary,
`status` and the report show the recommended version's sealed score beside its selection score.

Which rows are sealed: the manifest's `data.test` file when it names one (then every `data.val` row is
selection), else a deterministic `data.sealed_fraction` of the `data.val` rows, stratified by the
`data.select_by` field (one stratum when rows lack it): within each stratum the rows are ordered by the
SHA-256 of their prompt text and the first `round(fraction * n)` are sealed. Ordering by content, not by
position, keeps a prompt on the same side when rows are added, removed or reordered. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol

# The share of the held-out rows sealed when the manifest names no `data.test` file (docs/harness.md).
SEALED_FRACTION = 0.25
SEALED_SPLIT = "sealed"  # the run folder's `rollouts/<split>/` of the sealed scores (never a loop split)

Row = dict[str, Any]


class HeldOutData(Protocol):
    """The manifest's data fields the split reads (`harness.manifest.DataPaths`, which imports this module)."""

    @property
    def val(self) -> str: ...
    @property
    def test(self) -> str | None: ...
    @property
    def sealed_fraction(self) -> float: ...
    @property
    def select_by(self) -> str: ...


def _key(row: Row) -> str:
    prompt = row.get("prompt")
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def split_heldout(rows: Sequence[Row], fraction: float, select_by: str) -> tuple[list[Row], list[Row]]:
    """`(selection, sealed)` rows of one held-out file, each in the file's order (module doc).

    A stratum of one row stays in selection; a fraction of 0 seals nothing.

    Raises:
        ValueError: `fraction` outside [0, 1).
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"sealed fraction must be in [0, 1), got {fraction!r}")
    strata: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        strata.setdefault(str(row.get(select_by, "")), []).append(i)
    sealed: set[int] = set()
    for members in strata.values():
        take = round(fraction * len(members)) if len(members) > 1 else 0
        sealed.update(sorted(members, key=lambda i: (_key(rows[i]), i))[:take])
    return [r for i, r in enumerate(rows) if i not in sealed], [r for i, r in enumerate(rows) if i in sealed]


def heldout_splits(data: HeldOutData, read: Callable[[str], list[Row]]) -> tuple[list[Row], list[Row]]:
    """`(selection, sealed)` rows of a harness's held-out data; `read(relative path)` reads one data file."""
    if data.test is not None:
        return read(data.val), read(data.test)
    return split_heldout(read(data.val), data.sealed_fraction, data.select_by)
