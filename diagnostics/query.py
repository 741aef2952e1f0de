"""Queries over run-table rows (`diagnostics/table.py`) that every layer shares: evidence ids, row subsets,
one-row aggregates, and per-group aggregations batch by batch of whole steps.

A run table can hold ten million rows: `where` keeps only the columns it names, `refs_where` only the first
matching rows, and `per_group` / `group_batches` bound an aggregation's scratch memory by a batch of about
`GROUP_BATCH_ROWS` rows instead of the table.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import polars as pl

from diagnostics.findings import rollout_ref
from diagnostics.origins import ORIGIN, prompt_ids
from diagnostics.schema import StopReason


def is_truncated() -> pl.Expr:
    """True where the response hit the length cap (the flag, or stop reason `length`)."""
    return pl.col("truncated") | (pl.col("stop_reason") == StopReason.LENGTH.value)


REF_COLUMNS = ("run_id", "step", "prompt_id", "sample_index", ORIGIN, "group_key")  # what `refs` reads


def refs(rows: pl.DataFrame, limit: int) -> list[str]:
    """Evidence ids (`run_id/step/prompt_id/sample_index`, as `findings.rollout_ref`) of the first `limit` rows
    of `rows`; a training row's `prompt_id` is read back from its file (`origins.prompt_ids`)."""
    head = rows.head(limit).select(REF_COLUMNS)
    ids = head["prompt_id"].cast(pl.String).to_list()
    unnamed = head.filter(pl.col("prompt_id").is_null())
    if unnamed.height:
        resolved = iter(prompt_ids(unnamed))
        ids = [pid if pid is not None else next(resolved) for pid in ids]
    return [
        rollout_ref(str(run), int(step), pid, int(sample))
        for (run, step, sample), pid in zip(head.select("run_id", "step", "sample_index").rows(), ids, strict=True)
    ]


GROUP_KEYS = ("step", "group_key")  # a GRPO group: its step and the hash of its group_id
GROUP_BATCH_ROWS = 1 << 20  # rows per batch of a per-group aggregation (`group_batches`)


def group_batches(rows: pl.DataFrame) -> Iterator[tuple[int, pl.DataFrame]]:
    """`(offset, batch)`: `rows` cut into zero-copy slices of whole steps of about `GROUP_BATCH_ROWS` rows
    (`offset`: the slice's first row in `rows`).

    A group never spans two steps, so aggregating each batch per group gives every group of the table, with
    the aggregation's scratch memory (hash tables, group lists: ~50 bytes a row) sized by one batch instead
    of the whole table. Rows not sorted by step come as one batch.
    """
    n = rows.height
    steps = rows["step"]
    if n <= GROUP_BATCH_ROWS or not steps.is_sorted():
        yield 0, rows
        return
    start = 0
    while start < n:
        end = min(start + GROUP_BATCH_ROWS, n)
        if end < n:  # to the end of the step the batch's last row belongs to
            end = int(steps.search_sorted(steps[end - 1], side="right"))
        yield start, rows.slice(start, end - start)
        start = end


def per_group(rows: pl.DataFrame, columns: Sequence[str], *aggs: pl.Expr) -> pl.DataFrame:
    """One row per GRPO group, in first-seen order: `GROUP_KEYS`, the aggregations `aggs` (over `columns`), and
    the `REF_COLUMNS` of the group's first row (for evidence), aggregated batch by batch (`group_batches`)."""
    first = "__first"
    parts = [
        batch.lazy()
        .select(*GROUP_KEYS, *columns)
        .with_row_index(first, offset=offset)
        .group_by(*GROUP_KEYS)
        .agg(pl.col(first).first(), *aggs)
        .collect()
        for offset, batch in group_batches(rows)
    ]
    groups = pl.concat(parts).sort(first)
    ids = rows.select(c for c in REF_COLUMNS if c not in GROUP_KEYS).gather(groups[first])
    return pl.concat([groups.drop(first), ids], how="horizontal")


def aggregate(rows: pl.DataFrame, *exprs: pl.Expr) -> tuple[Any, ...]:
    """One row of aggregates over `rows`, computed lazily: only the columns the expressions read are touched."""
    return rows.lazy().select(*exprs).collect().row(0)


def where(rows: pl.DataFrame, predicate: pl.Expr | str, *columns: str) -> pl.DataFrame:
    """The rows matching `predicate`, with the evidence columns and `columns` only (no copy of the others)."""
    return rows.lazy().filter(predicate).select(*REF_COLUMNS, *columns).collect()


def refs_where(rows: pl.DataFrame, predicate: pl.Expr, limit: int) -> list[str]:
    """Evidence ids of the first `limit` rows matching `predicate` (only those rows are kept)."""
    return refs(rows.lazy().filter(predicate).select(REF_COLUMNS).head(limit).collect(), limit)
