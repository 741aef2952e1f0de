"""Signal per data source: which training sources carry GRPO signal (too-easy or too-hard data).

Pure functions over run-table rows (`diagnostics/table.py`). A GRPO group belongs to the `data_source` of its
samples (all samples of one prompt share it; e.g. `gsm8k`, `math/hard`). Per source, over the *training*
rollouts of a run: number of groups, dead-group ratio (reward std < `signal.DEAD_STD`), mean reward,
strict accuracy (where the backend scored training rollouts) and truncation rate.

A source is *dead* when at least `DEAD_SOURCE_AT` (half) of its groups are dead and it has at least
`MIN_SOURCE_GROUPS` groups (fewer is too little evidence to drop a source): trained alone it would trip
the run-level critical alert (paper §6.1: dead > 50% CRITICAL). For groups of 8 samples that is a solve
rate above ~0.92 or below ~0.08: too easy or too hard for the policy. Why not a stricter bar such as 90%:
on the bundled demo harness (strict reward, 48 tokens, 60 steps) its always-solved easiest source is 53-70%
dead, since the warm-started policy still slips on ~6-9% of its samples; only the never-solved hardest source
reaches 99%, and dropping that one alone left held-out strict accuracy where it was.

Metrics (flat keys of `HealthReport.metrics`, read by skill triggers and the `reweight_sources` patch op):

- `num_sources`, `dead_sources`: sources seen in the training rollouts, and how many are dead;
- `dead_source_share`: share of the training groups that come from dead sources (NaN without sources);
- `source_groups/<data_source>`, `source_dead_ratio/<data_source>`, `source_reward_mean/<data_source>`,
  `source_strict_acc/<data_source>` (NaN when unscored), `source_truncation_rate/<data_source>`.

Coverage of the held-out set (`diagnose_coverage`): the training rollouts' mix of data sources against the
held-out (validation) rollouts' mix, as a total-variation distance `source_mix_gap` (0: the same mix, 1: no
source in common), with `train_source_share/<data_source>` and `heldout_source_share/<data_source>` (shares of
rollouts). Rule `signal.source_mix_gap`: > `MIX_GAP_WARNING` — training practises other data than the
held-out set measures (the demo's fixed harness: 0.03; every training prompt from one of its three held-out
levels: 0.67).

Rollouts without a `data_source` are left out of the per-source table (no source to re-weight).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from diagnostics.findings import Finding, Layer, LayerOutput, Severity
from diagnostics.query import GROUP_KEYS, group_batches
from diagnostics.signal import DEAD_STD

# A source is dead when >= this share of its groups have zero reward std (paper §6.1 critical level, per source).
DEAD_SOURCE_AT = 0.5
# Fewer groups than this is too little evidence to call a source dead.
MIN_SOURCE_GROUPS = 8
# Warn when this share (or more) of the training groups comes from dead sources.
DEAD_SOURCE_SHARE_WARNING = 0.3

# The training mix of data sources differs from the held-out mix by more than this (total variation).
MIX_GAP_WARNING = 0.3

SOURCE_GROUPS = "source_groups/"
SOURCE_DEAD_RATIO = "source_dead_ratio/"
SOURCE_REWARD_MEAN = "source_reward_mean/"
SOURCE_STRICT_ACC = "source_strict_acc/"
SOURCE_TRUNCATION_RATE = "source_truncation_rate/"
TRAIN_SOURCE_SHARE = "train_source_share/"
HELDOUT_SOURCE_SHARE = "heldout_source_share/"


@dataclass(frozen=True, slots=True)
class SourceStats:
    """GRPO signal of one data source over a run's training rollouts."""

    data_source: str
    num_groups: int
    dead_groups: int
    num_rollouts: int
    reward_mean: float
    strict_acc: float  # NaN when no training rollout of the source has a strict score
    truncation_rate: float

    @property
    def dead_ratio(self) -> float:
        """Return the share of the source's groups whose reward std is zero."""
        return self.dead_groups / self.num_groups if self.num_groups else math.nan

    @property
    def is_dead(self) -> bool:
        """Return True when the source is dead: enough groups, and at least `DEAD_SOURCE_AT` of them dead."""
        return self.num_groups >= MIN_SOURCE_GROUPS and self.dead_ratio >= DEAD_SOURCE_AT


def source_stats(rows: pl.DataFrame) -> list[SourceStats]:
    """Return per-source stats over the training rows that name a `data_source`, sorted by source.

    A group belongs to the source of its first sample. Aggregated batch by batch of whole steps
    (`query.group_batches`); every per-source number is a sum, so the batches' sums add up.
    """
    sums = ("groups", "dead", "n", "reward_sum", "strict_sum", "strict_n", "truncated")
    parts = [_source_sums(batch) for _, batch in group_batches(rows)]
    table = pl.concat(parts).group_by("source").agg(pl.col(sums).sum())
    return [
        SourceStats(
            data_source=row["source"],
            num_groups=row["groups"],
            dead_groups=int(row["dead"]),
            num_rollouts=row["n"],
            reward_mean=row["reward_sum"] / row["n"],
            strict_acc=row["strict_sum"] / row["strict_n"] if row["strict_n"] else math.nan,
            truncation_rate=row["truncated"] / row["n"],
        )
        for row in table.sort("source").iter_rows(named=True)
    ]


def _source_sums(rows: pl.DataFrame) -> pl.DataFrame:
    """Per source of `rows`: groups, dead groups, rollouts, and the sums of reward, strict score, truncation."""
    columns = ("split", *GROUP_KEYS, "data_source", "reward", "strict_score", "truncated")
    labelled = (
        rows.lazy().select(columns).filter((pl.col("split") == "train") & (pl.col("data_source").cast(pl.String) != ""))
    )
    strict = pl.col("strict_score")
    groups = labelled.group_by(*GROUP_KEYS).agg(
        source=pl.col("data_source").first().cast(pl.String),
        n=pl.len(),
        dead=pl.col("reward").std(ddof=0) < DEAD_STD,
        reward_sum=pl.col("reward").sum(),
        strict_sum=strict.sum(),
        strict_n=strict.count(),
        truncated=pl.col("truncated").sum(),
    )
    return (
        groups.group_by("source")
        .agg(
            pl.len().alias("groups"),
            pl.col("dead").sum(),
            pl.col("n", "reward_sum", "strict_sum", "strict_n", "truncated").sum(),
        )
        .collect()
    )


def source_metrics(stats: Sequence[SourceStats]) -> dict[str, float]:
    """Return the flat metrics of a per-source table (keys in the module docstring)."""
    total = sum(s.num_groups for s in stats)
    dead = [s for s in stats if s.is_dead]
    metrics: dict[str, float] = {
        "num_sources": float(len(stats)),
        "dead_sources": float(len(dead)),
        "dead_source_share": sum(s.num_groups for s in dead) / total if total else math.nan,
    }
    for s in stats:
        metrics[SOURCE_GROUPS + s.data_source] = float(s.num_groups)
        metrics[SOURCE_DEAD_RATIO + s.data_source] = s.dead_ratio
        metrics[SOURCE_REWARD_MEAN + s.data_source] = s.reward_mean
        metrics[SOURCE_STRICT_ACC + s.data_source] = s.strict_acc
        metrics[SOURCE_TRUNCATION_RATE + s.data_source] = s.truncation_rate
    return metrics


def per_source(metrics: Mapping[str, float], prefix: str) -> dict[str, float]:
    """Return `{data_source: value}` for one per-source metric prefix (e.g. `SOURCE_DEAD_RATIO`)."""
    return {k[len(prefix) :]: v for k, v in metrics.items() if k.startswith(prefix) and len(k) > len(prefix)}


def diagnose_sources(rows: pl.DataFrame) -> LayerOutput:
    """Per-source dead groups and the dead-source share, with a warning when dead sources fill the batch.

    Dead groups concentrated in a few sources point at the data selection (too easy or too hard for the
    policy) rather than at the reward's granularity: re-weighting the mix toward live sources removes them.
    """
    stats = source_stats(rows)
    metrics = source_metrics(stats)
    share = metrics["dead_source_share"]
    dead = [s for s in stats if s.is_dead]
    fired = not math.isnan(share) and share >= DEAD_SOURCE_SHARE_WARNING
    listed = ", ".join(f"{s.data_source} ({s.dead_ratio:.0%} dead)" for s in dead)
    if math.isnan(share):
        message = "dead data sources: no data (no training rollout names a data_source)"
    elif fired:
        message = (
            f"dead data sources fill {share:.0%} of the training groups: {listed}; too easy or too hard for the "
            "policy (groups all solved or all failed): re-weight the data selection"
        )
    else:
        message = f"dead data sources: {share:.0%} of the training groups" + (f" ({listed})" if dead else "")
    finding = Finding(
        alert_id="signal.dead_sources",
        layer=Layer.SIGNAL,
        severity=Severity.WARNING if fired else Severity.OK,
        message=message,
        value=share,
        threshold=DEAD_SOURCE_SHARE_WARNING,
        rule=f"dead_source_share >= {DEAD_SOURCE_SHARE_WARNING}; dead: >= {DEAD_SOURCE_AT:.0%} of >= "
        f"{MIN_SOURCE_GROUPS} groups dead",
        numbers={f"dead_ratio/{s.data_source}": s.dead_ratio for s in stats},
    )
    return LayerOutput((finding,), metrics)


def source_shares(rows: pl.DataFrame) -> dict[str, float]:
    """Return `{data_source: share of the rows}` over the rows that name a `data_source` (empty when none do)."""
    named = rows.lazy().select(source=pl.col("data_source").cast(pl.String)).filter(pl.col("source") != "")
    counts = named.group_by("source").agg(n=pl.len()).collect()
    total = int(counts["n"].sum()) if counts.height else 0
    return {row["source"]: row["n"] / total for row in counts.sort("source").iter_rows(named=True)} if total else {}


def diagnose_coverage(train: pl.DataFrame, val: pl.DataFrame) -> LayerOutput:
    """How far the training mix of data sources is from the held-out mix (see the module docstring)."""
    trained, heldout = source_shares(train), source_shares(val)
    gap = (
        0.5 * sum(abs(trained.get(s, 0.0) - heldout.get(s, 0.0)) for s in {*trained, *heldout})
        if trained and heldout
        else math.nan
    )
    metrics: dict[str, float] = {"source_mix_gap": gap}
    metrics.update({TRAIN_SOURCE_SHARE + k: v for k, v in trained.items()})
    metrics.update({HELDOUT_SOURCE_SHARE + k: v for k, v in heldout.items()})
    fired = not math.isnan(gap) and gap > MIX_GAP_WARNING
    untrained = sorted(s for s in heldout if trained.get(s, 0.0) == 0.0)
    detail = f"; held-out sources never trained on: {', '.join(untrained)}" if untrained else ""
    finding = Finding(
        alert_id="signal.source_mix_gap",
        layer=Layer.SIGNAL,
        severity=Severity.WARNING if fired else Severity.OK,
        message=f"the training mix of data sources is {gap:.0%} (total variation) away from the held-out mix{detail}"
        if not math.isnan(gap)
        else "source mix gap: no data (training or held-out rollouts name no data_source)",
        value=gap,
        threshold=MIX_GAP_WARNING,
        rule=f"source_mix_gap > {MIX_GAP_WARNING}",
        numbers={**{f"train/{k}": v for k, v in trained.items()}, **{f"heldout/{k}": v for k, v in heldout.items()}},
    )
    notes = (
        ()
        if not math.isnan(gap)
        else ("signal.source_mix_gap: not evaluated: the training or the held-out rollouts name no data_source",)
    )
    return LayerOutput((finding,), metrics, notes)


MAX_SOURCE_CURVES = 8  # held-out curves per data source: the sources with the most held-out rollouts


def heldout_by_source(val: pl.DataFrame) -> dict[str, list[tuple[int, float]]]:
    """Strict held-out accuracy of each data source at each validation step, as `(step, mean strict score)`.

    {} with fewer than two named sources (the run's own held-out curve says it all); the
    `MAX_SOURCE_CURVES` sources with the most held-out rollouts, each over its scored rollouts.
    """
    if not val.height:
        return {}
    scored = val.lazy().filter(pl.col("strict_score").is_not_null() & (pl.col("data_source").cast(pl.String) != ""))
    scored = scored.select(pl.col("data_source").cast(pl.String), "step", pl.col("strict_score").cast(pl.Float64))
    sizes = scored.group_by("data_source").agg(n=pl.len()).sort(["n", "data_source"], descending=[True, False])
    sources = sizes.collect()["data_source"].head(MAX_SOURCE_CURVES).to_list()
    if len(sources) < 2:
        return {}
    means = (
        scored.filter(pl.col("data_source").is_in(sources))
        .group_by("data_source", "step")
        .agg(pl.col("strict_score").mean())
        .sort("data_source", "step")
        .collect()
    )
    out: dict[str, list[tuple[int, float]]] = {source: [] for source in sources}
    for source, step, value in means.iter_rows():
        out[source].append((int(step), float(value)))
    return out
