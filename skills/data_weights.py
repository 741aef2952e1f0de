"""Data-selection weights a skill computes from the run's health metrics (pure; used by `skills.patches`).

- `reweight` (op ``reweight_sources``): zero the entries whose training sources are dead;
- `match_heldout` (op ``match_heldout_sources``): set the training mix to the held-out set's mix of data sources.

An entry is a key of the data-selection mapping (``harness/data.yaml``'s ``weights``): a value of the row field
the manifest's ``data.select_by`` names; ``by_entry`` maps it to the ``data_source``s of the training rows with
that value (an entry it does not list is taken to be a data source itself).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from diagnostics.sources import HELDOUT_SOURCE_SHARE, SOURCE_DEAD_RATIO, SOURCE_GROUPS, per_source
from skills.templates import TemplateError


def reweight(
    weights: Mapping[Any, Any],
    metrics: Mapping[str, Any],
    dead_at: object,
    min_groups: object,
    by_entry: Mapping[str, set[str]] | None = None,
) -> tuple[dict[Any, float], str]:
    """Return the re-weighted ``weights`` (op ``reweight_sources``) and a note naming the zeroed entries.

    ``by_entry`` maps an entry (as text) to the data sources it draws; an entry it does not list is taken
    to be a data source name itself.

    Raises:
        TemplateError: a bad weight or threshold, no entry matching a source, nothing dead, or all dead.
    """
    if not isinstance(dead_at, int | float) or isinstance(dead_at, bool) or not 0 < dead_at <= 1:
        raise TemplateError(f"dead_at must be a number in (0, 1], got {dead_at!r}")
    if not isinstance(min_groups, int | float) or isinstance(min_groups, bool) or min_groups < 1:
        raise TemplateError(f"min_groups must be a number >= 1, got {min_groups!r}")
    _check_weights(weights)
    ratios = _numbers(per_source(metrics, SOURCE_DEAD_RATIO))
    groups = _numbers(per_source(metrics, SOURCE_GROUPS))
    if not groups:
        raise TemplateError(
            f"the health metrics hold no per-source table ({SOURCE_GROUPS}<data_source>); "
            "train rollouts must name their data_source"
        )
    dead: list[Any] = []
    seen: dict[Any, str] = {}
    for entry in weights:
        named = (by_entry or {}).get(str(entry)) or {str(entry)}
        matched = [s for s in groups if s in named and groups[s] > 0]
        n = sum(groups[s] for s in matched)
        if not matched or any(s not in ratios for s in matched):
            continue
        ratio = sum(ratios[s] * groups[s] for s in matched) / n
        seen[entry] = f"{entry}: {ratio:.0%} dead of {n:.0f} groups"
        if n >= min_groups and ratio >= dead_at:
            dead.append(entry)
    if not seen:
        raise TemplateError(
            f"no entry of {list(weights)} matches a data source of the run (sources: {sorted(groups)}); "
            "entries are values of the manifest's data.select_by field"
        )
    if not dead:
        raise TemplateError(f"no source is dead (dead ratio >= {dead_at} over >= {min_groups} groups): {seen}")
    total = float(sum(weights.values()))
    kept = float(sum(w for e, w in weights.items() if e not in dead))
    if kept <= 0:
        raise TemplateError(f"every weighted entry is dead ({'; '.join(seen.values())}); no data would be left")
    new = {e: 0.0 if e in dead else round(float(w) * total / kept, 4) for e, w in weights.items()}
    zeroed = "; ".join(seen[e] for e in dead)
    return new, f"{dict(weights)} -> {new} (zeroed {zeroed}; threshold {dead_at})"


def _numbers(values: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for k, v in values.items():
        if isinstance(v, int | float) and not isinstance(v, bool) and v == v:  # v == v drops NaN
            out[k] = float(v)
    return out


def match_heldout(
    weights: Mapping[Any, Any], metrics: Mapping[str, Any], by_entry: Mapping[str, set[str]] | None = None
) -> tuple[dict[Any, float], str]:
    """Return ``weights`` set to the held-out mix (op ``match_heldout_sources``) and a note saying what changed.

    Each entry gets the summed held-out share of the sources it draws (a source drawn by several entries is
    split evenly between them) times the mapping's total weight (1 when it is 0), rounded to 4 decimals.

    Raises:
        TemplateError: a bad weight, no held-out mix in the metrics, no entry drawing a held-out source, or a
            mapping that already has the held-out mix.
    """
    _check_weights(weights)
    shares = _numbers(per_source(metrics, HELDOUT_SOURCE_SHARE))
    if not shares:
        raise TemplateError(
            f"the health metrics hold no held-out mix ({HELDOUT_SOURCE_SHARE}<data_source>); "
            "held-out rollouts must name their data_source"
        )
    drawn = {e: (by_entry or {}).get(str(e)) or {str(e)} for e in weights}
    owners: dict[str, int] = {}
    for sources in drawn.values():
        for source in sources:
            owners[source] = owners.get(source, 0) + 1
    target = {e: sum(shares.get(s, 0.0) / owners[s] for s in sources) for e, sources in drawn.items()}
    covered = sum(target.values())
    if covered <= 0:
        raise TemplateError(
            f"no entry of {list(weights)} draws a held-out data source (held-out: {sorted(shares)}); entries are "
            "values of the manifest's data.select_by field"
        )
    total = float(sum(weights.values())) or 1.0
    new = {e: round(total * target[e] / covered, 4) for e in weights}
    if all(abs(new[e] - float(w)) < 1e-4 for e, w in weights.items()):
        raise TemplateError(f"the data selection already has the held-out mix: {dict(weights)}")
    missed = sorted(set(shares) - {s for sources in drawn.values() for s in sources})
    left = f"; held-out sources no entry draws: {missed}" if missed else ""
    return new, f"{dict(weights)} -> {new} (the held-out mix of data sources{left})"


def _check_weights(weights: Mapping[Any, Any]) -> None:
    for entry, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, int | float) or weight < 0:
            raise TemplateError(f"weight of entry {entry!r} must be a number >= 0, got {weight!r}")
