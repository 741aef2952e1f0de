"""Agentic trajectories as table columns: tool roles, and one row of per-episode features per rollout.

Pure functions over run-table rows (`diagnostics/table.py`: `turns` is a list of `{tool, success,
policy_tokens, observation_tokens, call}` per row, `call` a 32-bit hash of the tool and its arguments). The
rules over these features live in `diagnostics/agentic.py`.

Tool roles (search / act / verify) and the act mode are defined in `diagnostics/tool_roles.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

from diagnostics.query import REF_COLUMNS
from diagnostics.schema import StopReason
from diagnostics.score import STRICT_CORRECT
from diagnostics.tool_roles import DEFAULT_ROLES, NO_CALL, ROLE_CODE, ActMode, ToolRole, ToolRoles


@dataclass(frozen=True)
class Trajectories:
    """Per-episode features of a run's rows, the per-tool call table and how the harness acts.

    `frame` has one row per rollout (in table order) with the evidence columns, `step`, `group_key`,
    `reward`, `strict_score`, `num_turns`, `tool_calls`, `stop_reason`, `truncated`, `success`, and, where
    the row carries its turns (null otherwise): `n_turns_seen`, `n_act`, `first_act` (0-based turn index),
    `search_first` (a search before the first action), `verified` (a verify after the last action),
    `failed_calls`, `repeated_share` (calls repeating an earlier identical call / calls), `call_bigram_rep`
    (1 - unique/total bigrams of the call sequence), `max_run` (longest run of the same tool), `entropy`
    (bits, over the episode's tool names; null under two calls) and, by role, `n_search`, `n_verify`. `tools`
    has one row per tool name: `tool`, `calls`, `failed`, `role`. `roles_present` holds the roles of the
    tools seen in the run and of the tools the harness declares. `calls` (`call_episodes`) lists the calls of
    each episode and whether the environment answered them successfully.
    """

    frame: pl.DataFrame
    tools: pl.DataFrame
    act_mode: ActMode
    has_turns: bool
    roles_present: frozenset[ToolRole] = frozenset()
    calls: pl.DataFrame | None = None  # `call_episodes`: each episode's calls and their outcome (None: no turns)


def success() -> pl.Expr:
    """An episode succeeded: its strict score >= `STRICT_CORRECT` where it has one, else a positive reward."""
    return pl.coalesce(pl.col("strict_score") >= STRICT_CORRECT, pl.col("reward") > 0)


def answered() -> pl.Expr:
    """The episode ended on the policy's final answer (stop reason answer, or eos from a reader without it)."""
    return pl.col("stop_reason").is_in([StopReason.ANSWER.value, StopReason.EOS.value])


def is_agentic(rows: pl.DataFrame) -> bool:
    """True when some row is an episode: several turns, a tool call, a recorded trajectory or an agentic stop."""
    if not rows.height:
        return False
    agentic_stops = [s.value for s in StopReason if s not in (StopReason.EOS, StopReason.LENGTH, StopReason.ABORT)]
    test = (pl.col("num_turns") > 1) | (pl.col("tool_calls") > 0) | pl.col("stop_reason").is_in(agentic_stops)
    if rows.schema["turns"] != pl.Null:
        test = test | pl.col("turns").is_not_null()
    return bool(rows.lazy().select(test.any()).collect().item())


_BASE = ("step", "group_key", "reward", "strict_score", "num_turns", "tool_calls", "stop_reason", "truncated")


def tool_table(rows: pl.DataFrame, roles: ToolRoles) -> pl.DataFrame:
    """Calls and failed calls per tool name over every turn of `rows`, most called first, with each tool's role."""
    schema = {"tool": pl.String, "calls": pl.UInt32, "failed": pl.UInt32, "role": pl.String}
    if rows.schema["turns"] == pl.Null:
        return pl.DataFrame(schema=schema)
    turn = pl.col("turns")
    table = (
        rows.lazy()
        .select(turn)
        .explode("turns")
        .select(tool=turn.struct.field("tool"), failed=turn.struct.field("success").not_().fill_null(False))
        .drop_nulls("tool")
        .group_by("tool")
        .agg(calls=pl.len().cast(pl.UInt32), failed=pl.col("failed").sum().cast(pl.UInt32))
        .sort(["calls", "tool"], descending=[True, False])
        .collect()
    )
    return table.with_columns(
        role=pl.Series([roles.role(t).value for t in table["tool"].to_list()], dtype=pl.String)
    ).select(list(schema))


def trajectories(rows: pl.DataFrame, roles: ToolRoles = DEFAULT_ROLES) -> Trajectories:
    """The per-episode features of `rows` (see `Trajectories`).

    The turns are exploded once into a flat table (one row per turn: its episode, position, tool, role,
    success, call hash) and every feature is a hash group-by over it, joined back by episode: per-list
    expressions (`list.eval` with runs, counts or shifts) cost a group per episode and ran ~10x slower.
    """
    tools = tool_table(rows, roles)
    mode = roles.act_mode(tools["tool"].to_list())
    has_turns = rows.schema["turns"] != pl.Null
    base = rows.lazy().select(*REF_COLUMNS, *(c for c in _BASE if c not in REF_COLUMNS)).with_columns(success=success())
    if has_turns:
        codes = {t: ROLE_CODE[ToolRole(r)] for t, r in tools.select("tool", "role").iter_rows()}
        base = _with_features(base.with_row_index(_ROW), rows, codes, mode).drop(_ROW)
    present = {ToolRole(r) for r in tools["role"].to_list()} | set((roles.declared or {}).values())
    calls = call_episodes(rows) if has_turns else None
    return Trajectories(base.collect(), tools, mode, has_turns, frozenset(present), calls)


def call_episodes(rows: pl.DataFrame) -> pl.DataFrame:
    """One row per episode and distinct call: `episode` (the row's index in `rows`), `tool`, `call` (the hash of
    the tool and its arguments) and `ok` (the environment answered it successfully; null for a call that was
    not run: written in the last allowed turn, or an echo-trap repeat), in episode order. A call made twice in
    an episode with both outcomes has a row for each."""
    turn = pl.col("turns")
    return (
        rows.lazy()
        .select(turn)
        .with_row_index("episode")
        .explode("turns")
        .select(
            "episode",
            tool=turn.struct.field("tool"),
            call=turn.struct.field("call"),
            ok=turn.struct.field("success"),
        )
        .filter(pl.col("tool").is_not_null() & pl.col("call").is_not_null())
        .unique(maintain_order=True)
        .collect()
    )


_ROW = "__episode"


def _with_features(base: pl.LazyFrame, rows: pl.DataFrame, codes: Mapping[str, int], mode: ActMode) -> pl.LazyFrame:
    """`base` (one row per episode, `_ROW` its index) with the turn features of `rows` joined on."""
    idx = pl.int_range(pl.len(), dtype=pl.UInt32)
    turn = pl.col("turns")
    tool = pl.col("tool")
    role = (
        pl.when(tool.is_null())
        .then(pl.lit(NO_CALL, pl.UInt8))
        .otherwise(tool.replace_strict(dict(codes), default=ROLE_CODE[ToolRole.OTHER], return_dtype=pl.UInt8))
    )
    flat = (
        rows.lazy()
        .select(turn, n_turns_seen=turn.list.len())
        .with_row_index(_ROW)
        .explode("turns")
        .select(
            _ROW,
            "n_turns_seen",
            tool=turn.struct.field("tool"),
            failed=turn.struct.field("success").not_().fill_null(False) & turn.struct.field("tool").is_not_null(),
            call=turn.struct.field("call"),
            pos=idx - pl.when(pl.col(_ROW).is_first_distinct()).then(idx).forward_fill(),
        )
        .with_columns(role=role)
    )
    at = pl.col("pos")

    def where_role(name: ToolRole) -> pl.Expr:
        return pl.col("role") == ROLE_CODE[name]

    per_turn = flat.group_by(_ROW).agg(
        pl.col("n_turns_seen").first(),
        n_act=where_role(ToolRole.ACT).sum().cast(pl.UInt32),
        first_act=at.filter(where_role(ToolRole.ACT)).min(),
        last_act=at.filter(where_role(ToolRole.ACT)).max(),
        first_search=at.filter(where_role(ToolRole.SEARCH)).min(),
        last_verify=at.filter(where_role(ToolRole.VERIFY)).max(),
        n_search=where_role(ToolRole.SEARCH).sum().cast(pl.UInt32),
        n_verify=where_role(ToolRole.VERIFY).sum().cast(pl.UInt32),
        failed_calls=pl.col("failed").sum().cast(pl.UInt32),
        n_calls=pl.col("call").count(),
        distinct_calls=pl.col("call").drop_nulls().n_unique(),
    )
    calls = flat.filter(tool.is_not_null()).select(_ROW, "tool", "call")
    same_episode = pl.col(_ROW) == pl.col(_ROW).shift(-1)
    pair = pl.when(same_episode).then(pl.col("call").cast(pl.UInt64) * (1 << 32) + pl.col("call").shift(-1))
    bigrams = calls.group_by(_ROW).agg(pairs=pair.count(), distinct_pairs=pair.drop_nulls().n_unique())
    new_run = (tool != tool.shift()) | (pl.col(_ROW) != pl.col(_ROW).shift())
    runs = (
        calls.with_columns(run=new_run.fill_null(True).cum_sum())
        .group_by(_ROW, "run")
        .agg(n=pl.len())
        .group_by(_ROW)
        .agg(max_run=pl.col("n").max())
    )
    p = pl.col("n") / pl.col("n").sum()
    entropy = calls.group_by(_ROW, "tool").agg(n=pl.len()).group_by(_ROW).agg(entropy=-(p * p.log(2)).sum())
    out = base
    for part in (per_turn, bigrams, runs, entropy):
        out = out.join(part, on=_ROW, how="left", maintain_order="left")
    n_calls = pl.col("n_calls")
    if mode is ActMode.TOOLS:
        search_first = pl.col("first_search").is_not_null() & (
            pl.col("first_search") < pl.col("first_act").fill_null(2**31)
        )
        verified = pl.col("last_verify").is_not_null() & (pl.col("last_verify") > pl.col("last_act").fill_null(-1))
        n_act = pl.col("n_act")
    else:  # the final answer is the action: anything before it comes first, and a verify checks it
        search_first = (pl.col("n_search") > 0) & answered()
        verified = (pl.col("n_verify") > 0) & answered()
        n_act = answered().cast(pl.UInt32)
    recorded = pl.col("n_turns_seen").is_not_null()  # an episode without turns has no turn features (null)
    features = {
        "n_act": n_act,
        "first_act": pl.col("first_act") if mode is ActMode.TOOLS else pl.lit(None, pl.UInt32),
        "search_first": search_first,
        "verified": verified,
        "n_search": pl.col("n_search"),
        "n_verify": pl.col("n_verify"),
        "failed_calls": pl.col("failed_calls"),
        "repeated_share": pl.when(n_calls >= 2).then(1 - pl.col("distinct_calls") / n_calls),
        "call_bigram_rep": pl.when(n_calls >= 3).then(1 - pl.col("distinct_pairs") / pl.col("pairs")),
        "max_run": pl.col("max_run"),
        "entropy": pl.when(n_calls >= 2).then(pl.col("entropy")),  # one call has no diversity to measure
    }
    return out.with_columns(pl.when(recorded).then(e).alias(k) for k, e in features.items()).drop(
        "last_act", "first_search", "last_verify", "n_calls", "distinct_calls", "pairs", "distinct_pairs"
    )
