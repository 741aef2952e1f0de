"""Group-level explanations (signal layer): what the group filter kept and dropped, and within-group diversity.

Pure functions over run-table rows (`diagnostics/table.py`), Metrics an exploration probe needs to
say *why* a run stalls, each with a rule here.

**Before and after the filter.** The local trainer records on every training rollout whether the filter let
its group into the update (`kept`). A metric the filter changes is reported over all groups (its plain name:
`dead_group_ratio`, `reward_spread`, `train_strict_acc`) and over the kept ones (`..._after_filter`), with
the dropped groups' reward spread (`reward_spread_dropped`) and the share of the learning signal the filter
keeps (`kept_live_ratio`: kept samples in groups with reward variance over all samples in such groups, the
backtest's definition). Rules: the filter drops most of the signal (`signal.filter_drops_signal`); it keeps
groups with less reward spread than those it drops (`signal.filter_inverted`); among the groups that carry
signal it keeps the ones the policy already does well on and drops the hard ones (`signal.filter_biased`:
`filter_reward_bias`, the kept live groups' mean reward minus the dropped live groups'; a variance filter
such as StdGroupFilter is symmetric in the reward level: -0.15 on the demo's fixed harness, against +0.49 for
a filter that keeps only groups solved at least half of the time). Without `kept` flags the metrics are
NaN and the report's notes say so.

**Diversity.** Distinct responses per group, from a hash of each response computed while the text was read
(`features.py`, `response_hash`): `distinct_response_ratio` (mean over groups of distinct / samples),
`identical_group_ratio` (groups whose samples are all one response: no exploration inside the group) and
`dead_identical_share` (of the dead groups, those that are identical: a collapsed sampler, where the rest
are a reward too coarse to tell different responses apart). Rule: `signal.identical_groups`.
"""

from __future__ import annotations

import math

import polars as pl

from diagnostics.findings import Layer, LayerOutput, graded
from diagnostics.query import per_group, refs
from diagnostics.signal import DEAD_STD

# The filter keeps less than this share of the samples that carry a learning signal (the backtest's bar).
KEPT_LIVE_WARNING = 0.5
KEPT_LIVE_CRITICAL = 0.2
# The dropped groups' mean reward spread exceeds the kept groups' by more than this: the filter prefers
# groups with less signal (a std filter keeps the high-spread ones, so its gap is negative).
INVERTED_SPREAD_GAP = 0.02
# The kept live groups' mean reward exceeds the dropped live groups' by more than this: the filter selects on
# how well the policy already does (easy prompts), not on the signal a group carries.
BIASED_REWARD_GAP = 0.2
MIN_FILTER_GROUPS = 5  # groups needed on each side (kept, dropped) to compare them
# Groups whose samples are all the same response: from the demo's oracle harness (60 steps, T = 1.0).
IDENTICAL_WARNING = 0.50
IDENTICAL_CRITICAL = 0.80
EVIDENCE_MAX = 5


def group_table(rows: pl.DataFrame) -> pl.DataFrame:
    """One row per GRPO group, first-seen order: `n`, `std`, `mean` (reward), `dead`, `kept` (null when not
    recorded), `distinct` responses, `strict_sum` / `strict_n` (strict-scored samples), and the first rollout's ids."""
    strict = pl.col("strict_score")
    groups = per_group(
        rows,
        ["reward", "kept", "response_hash", "strict_score"],
        pl.len().alias("n"),
        pl.col("reward").std(ddof=0).alias("std"),
        pl.col("reward").mean().alias("mean"),
        pl.when(pl.col("kept").is_not_null().any()).then(pl.col("kept").any()).alias("kept"),
        pl.col("response_hash").n_unique().alias("distinct"),
        strict.sum().alias("strict_sum"),
        strict.is_not_null().sum().alias("strict_n"),
    )
    return groups.with_columns(dead=pl.col("std") < DEAD_STD)


def _mean(frame: pl.DataFrame, column: str) -> float:
    value = frame[column].mean() if frame.height else None
    return math.nan if value is None else float(value)  # type: ignore[arg-type]


def _strict_acc(frame: pl.DataFrame) -> float:
    n = int(frame["strict_n"].sum()) if frame.height else 0
    return float(frame["strict_sum"].sum()) / n if n else math.nan


def diagnose_filter(groups: pl.DataFrame) -> LayerOutput:
    """Kept versus dropped groups (see the module docstring); `groups` is `group_table`'s output."""
    flagged = groups.filter(pl.col("kept").is_not_null())
    kept, dropped = flagged.filter("kept"), flagged.filter(~pl.col("kept"))
    live = flagged.filter(~pl.col("dead"))
    live_samples = int(live["n"].sum()) if live.height else 0
    kept_live = int(live.filter("kept")["n"].sum()) if live.height else 0
    spread_kept, spread_dropped = _mean(kept, "std"), _mean(dropped, "std")
    comparable = kept.height >= MIN_FILTER_GROUPS and dropped.height >= MIN_FILTER_GROUPS
    gap = spread_dropped - spread_kept if comparable else math.nan
    live_kept, live_dropped = live.filter("kept"), live.filter(~pl.col("kept"))
    live_comparable = live_kept.height >= MIN_FILTER_GROUPS and live_dropped.height >= MIN_FILTER_GROUPS
    bias = _mean(live_kept, "mean") - _mean(live_dropped, "mean") if live_comparable else math.nan
    metrics = {
        "kept_group_ratio": kept.height / flagged.height if flagged.height else math.nan,
        "kept_live_ratio": kept_live / live_samples if live_samples else math.nan,
        "reward_spread_after_filter": spread_kept,
        "reward_spread_dropped": spread_dropped,
        "filter_spread_gap": gap,
        "filter_reward_bias": bias,
        "train_strict_acc": _strict_acc(groups),
        "train_strict_acc_after_filter": _strict_acc(kept),
    }
    numbers = {"groups": float(flagged.height), "kept_groups": float(kept.height), "live_groups": float(live.height)}
    findings = (
        graded(
            "signal.filter_drops_signal",
            Layer.SIGNAL,
            metrics["kept_live_ratio"],
            metric="kept_live_ratio",
            warning=KEPT_LIVE_WARNING,
            critical=KEPT_LIVE_CRITICAL,
            above=False,
            what="the group filter drops most of the groups that carry a learning signal (reward variance)",
            evidence=refs(live.filter(~pl.col("kept")), EVIDENCE_MAX),
            numbers=numbers,
        ),
        graded(
            "signal.filter_inverted",
            Layer.SIGNAL,
            gap,
            metric="filter_spread_gap",
            warning=INVERTED_SPREAD_GAP,
            what="the group filter drops groups with more reward spread than the ones it keeps",
            evidence=refs(dropped.sort("std", descending=True, maintain_order=True), EVIDENCE_MAX),
            numbers={**numbers, "reward_spread_after_filter": spread_kept, "reward_spread_dropped": spread_dropped},
        ),
        graded(
            "signal.filter_biased",
            Layer.SIGNAL,
            bias,
            metric="filter_reward_bias",
            warning=BIASED_REWARD_GAP,
            what="among the groups with reward variance, the filter keeps those the policy already does well on "
            "and drops the hard ones",
            evidence=refs(live_dropped.sort("mean", maintain_order=True), EVIDENCE_MAX),
            numbers={
                **numbers,
                "kept_live_groups": float(live_kept.height),
                "dropped_live_groups": float(live_dropped.height),
            },
        ),
    )
    notes: list[str] = []
    if not flagged.height:
        notes.append(
            "signal.filter_drops_signal, signal.filter_inverted, signal.filter_biased: not evaluated: the training "
            "rollouts carry no `kept` flag (the trainer did not record which groups its filter kept)"
        )
    else:
        if not live_samples:
            notes.append("signal.filter_drops_signal: not evaluated: no training group has reward variance")
        if not live_comparable:
            notes.append(
                f"signal.filter_biased: not evaluated: the filter kept {live_kept.height} and dropped "
                f"{live_dropped.height} group(s) with reward variance (at least {MIN_FILTER_GROUPS} of each needed)"
            )
        if not comparable:
            notes.append(
                f"signal.filter_inverted: not evaluated: the filter kept {kept.height} and dropped {dropped.height} "
                f"group(s) (at least {MIN_FILTER_GROUPS} of each needed to compare them)"
            )
    return LayerOutput(findings, metrics, tuple(notes))


def diagnose_diversity(groups: pl.DataFrame) -> LayerOutput:
    """Distinct responses per group and identical groups (see the module docstring)."""
    sampled = groups.filter(pl.col("n") >= 2)
    identical = sampled.filter(pl.col("distinct") == 1)
    dead = sampled.filter("dead")
    ratio = sampled.select((pl.col("distinct") / pl.col("n")).mean()).item() if sampled.height else None
    metrics = {
        "distinct_response_ratio": math.nan if ratio is None else float(ratio),
        "identical_group_ratio": identical.height / sampled.height if sampled.height else math.nan,
        "dead_identical_share": dead.filter(pl.col("distinct") == 1).height / dead.height if dead.height else math.nan,
    }
    finding = graded(
        "signal.identical_groups",
        Layer.SIGNAL,
        metrics["identical_group_ratio"],
        metric="identical_group_ratio",
        warning=IDENTICAL_WARNING,
        critical=IDENTICAL_CRITICAL,
        what="groups whose samples are all the same response (no exploration inside the group)",
        evidence=refs(identical, EVIDENCE_MAX),
        numbers={"groups": float(sampled.height), "identical_groups": float(identical.height)},
    )
    notes = () if sampled.height else ("signal.identical_groups: not evaluated: no group has two or more samples",)
    return LayerOutput((finding,), metrics, notes)


def diagnose_groups(rows: pl.DataFrame) -> LayerOutput:
    """Run the filter and diversity rules over (training) rows."""
    groups = group_table(rows)
    return LayerOutput.merge([diagnose_filter(groups), diagnose_diversity(groups)])
