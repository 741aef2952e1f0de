"""Diagnostics: the rollout schema, the run table, the four-layer health report, statistics, backtests.

How a report is made: `report.build_report(run_dir, parent, siblings, answer)` reads the run's
rollout files once, column-wise, into a `table.RunTable` (polars; compact columns, no text), and each layer
module (`score`, `signal`, `behaviour`, `sources`, `updates`, `version`) turns table rows and metric rows
into `findings.LayerOutput`s: flat metrics plus one `Finding` per rule. Runs with agentic episodes also get
the agentic layer (`agentic`, over the per-episode features of `trajectories`; `tool_results` asks whether the
environment answers some call wrongly); single-turn runs do not.
The typed `schema.Rollout` records and `schema.read_run_rollouts` remain for small consumers (the backtest
runner, the LLM's rollout sampler); the report never builds them.

Adding a metric over the run table
----------------------------------

1. Pick the layer: score (strict score vs reward), signal (is there a learning signal), behaviour (what the
   policy writes and does: lengths, formats, turns), version (against the parent). Write a function in that
   module taking the rows (`pl.DataFrame`: `table.train`, or validation rows where the run has no training
   rows) and returning a `LayerOutput`; add it to the layer's `diagnose_*` list. Agentic metrics (turns,
   tools, trajectories) go in `agentic.py`, with their meaning and rule in its `AGENTIC_METRIC_DOCS`.
2. Read columns by the names in `table.py`'s docstring. Aggregate with polars expressions
   (`rows.select(pl.col("reward").mean().alias("mean"))`; per GRPO group with `query.per_group`, or
   `query.group_batches` and `rows.group_by(*query.GROUP_KEYS)` per batch: batches of whole steps, so the
   aggregation's scratch memory follows a batch, not the table); take row subsets with
   `query.where(rows, predicate, *columns)`, which keeps only the columns you name (a run table can hold
   ten million rows: never `rows.filter(...)` the whole table), and evidence with
   `query.refs(subset, EVIDENCE_MAX)` (`run_id/step/prompt_id/sample_index`; a training row's prompt id is
   read back from its file) or `query.refs_where(rows, predicate, EVIDENCE_MAX)`. Agentic episodes carry
   `turns`, a list of `{tool, success, policy_tokens, observation_tokens, call}` per row (`call`: a hash of
   the tool and its arguments; the column is Null-typed when no row of a chunk has a trajectory):
   `pl.col("turns").list.eval(pl.element().struct.field("success"))`; per-episode features (roles, first
   action, repetition) are in `trajectories.trajectories(rows)`.
3. A metric that needs the response's text (or a turn's text) is a per-row feature: add its column in
   `features.py` (`native_features` when a polars expression computes it while the line is parsed,
   `complete_features` for the rows that need Python) and keep it in `chunks._project`; the text itself is
   dropped after each chunk.
4. Document the rule where it is graded: a threshold constant next to the function, with the paper section
   or measurement it comes from; `findings.graded(alert_id, layer, value, metric=..., warning=..., critical=...,
   what=...)` writes the rule text (`metric > threshold`) and the message; a NaN value is "no data", never a
   silent 0. Add the metric's meaning to `report.METRIC_DOCS` when the controller or a skill trigger reads it.
   An agentic metric's entry in `agentic_docs.AGENTIC_METRIC_DOCS` is "meaning (rule: alert_id op warning
   [/ critical])", held to the graded rule by `tests/unit/test_diag_agentic_docs_state_each_rule.py`; an
   alert that says the reward is gamed joins `agentic_docs.AGENTIC_HACK_ALERT_IDS` (part of
   `findings.HACK_ALERT_IDS`: a new one at warning makes a candidate's improvement "mixed").
5. Test it on crafted rows (`table.table_from_rollouts(rollouts, answer)` builds a table from typed records
   through the same parser) in a test named after the property it protects.

Rules that need the harness's declared answer protocol (`harness/answers.py`) read the `answers` and
`answer_ok` features; without a protocol they are not evaluated and the report lists them in `notes`.
"""

import os

# Polars allocates through jemalloc, which by default keeps freed pages for ~10 s before returning them, and
# purges an arena only when that arena is used again. The run table is built chunk by chunk on several
# threads and the report's aggregations free their scratch at once, so a 10 M-row report held ~100-300 MB of
# already-freed memory (benchmarks/README.md, "Health report at scale"). Return freed pages after 250 ms,
# from a background thread (at 0 ms the pages a chunk frees and the next one takes back cost ~4x the system
# time for ~40 MB less at 10 M rows); jemalloc reads this when polars first allocates, so it is set before
# any layer imports polars (a value the user set wins).
os.environ.setdefault("_RJEM_MALLOC_CONF", "background_thread:true,dirty_decay_ms:250,muzzy_decay_ms:0")
