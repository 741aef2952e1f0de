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

from diagnostics.schema import StopReason
from diagnostics.score import STRICT_CORRECT
from diagnostics.tool_roles import DEFAULT_ROLES, NO_CALL, ROLE_CODE, ActMode, ToolRole, ToolRoles


@dataclass(frozen=True)
class Trajectories:
    """Per-episode features of a run's rows, the per-tool call table and how the harness acts.

    `frame` has one row per rollout (in table order) with the evidence columns, `step`, `group_id`,
    `reward`, `strict_score`, `num_turns`, `tool_calls`, `stop_reason`, `truncated`, `success`, and, where
    the row carries its turns (null otherwise): `n_turns_seen`, `n_act`, `first_act` (0-based turn index),
    `search_first` (a search before the first action), `verified` (a verify after the last action),
    `failed_calls`, `repeated_share` (calls repeating an earlier identical call / calls), `call_bigram_rep`
    (1 - unique/total bigrams of the call sequence), `max_run` (longest run of the same tool), `entropy`
    (bits, over the episode's tool names) and, by role, `n_search`, `n_verify`. `tools` has one row per tool
    name: `tool`, `calls`, `failed`, `role`. `roles_present` holds the roles of the tools seen in the run and
    of the tools the harness declares.
    """

    frame: pl.DataFrame
    tools: pl.DataFrame
    act_mode: ActMode
    has_turns: bool
    roles_present: frozenset[ToolRole] = frozenset()


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


_BASE = ("step", "group_id", "reward", "strict_score", "num_turns", "tool_calls", "stop_reason", "truncated")


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
    """The per-episode features of `rows` (see `Trajectories`)."""
    tools = tool_table(rows, roles)
    mode = roles.act_mode(tools["tool"].to_list())
    has_turns = rows.schema["turns"] != pl.Null
    lf = rows.lazy().select("run_id", "prompt_id", "sample_index", *_BASE, *(["turns"] if has_turns else []))
    lf = lf.with_columns(success=success())
    if has_turns:
        codes = {t: ROLE_CODE[ToolRole(r)] for t, r in tools.select("tool", "role").iter_rows()}
        lf = lf.with_columns(_features(codes, mode)).drop("turns")
    present = {ToolRole(r) for r in tools["role"].to_list()} | set((roles.declared or {}).values())
    return Trajectories(lf.collect(), tools, mode, has_turns, frozenset(present))


def _features(codes: Mapping[str, int], mode: ActMode) -> list[pl.Expr]:
    """Per-row features over `turns` (list expressions: each runs inside one row's turns)."""
    el = pl.element()
    tool, ok, call = el.struct.field("tool"), el.struct.field("success"), el.struct.field("call")
    role = (
        pl.when(tool.is_null())
        .then(pl.lit(NO_CALL, pl.UInt8))
        .otherwise(tool.replace_strict(dict(codes), default=ROLE_CODE[ToolRole.OTHER], return_dtype=pl.UInt8))
    )
    turns = pl.col("turns")
    roles = turns.list.eval(role)
    is_act = el == ROLE_CODE[ToolRole.ACT]
    search, verify = el == ROLE_CODE[ToolRole.SEARCH], el == ROLE_CODE[ToolRole.VERIFY]
    if mode is ActMode.TOOLS:
        search_first = roles.list.eval((search & (is_act.cum_sum() == 0)).any()).list.first()
        verified = roles.list.eval((verify & (is_act.cum_sum(reverse=True) == 0)).any()).list.first()
        n_act = roles.list.eval(is_act.sum()).list.first()
    else:  # the final answer is the action: anything before it comes first, and a verify checks it
        search_first = roles.list.eval(search.any()).list.first() & answered()
        verified = roles.list.eval(verify.any()).list.first() & answered()
        n_act = answered().cast(pl.UInt32)
    calls = turns.list.eval(call.drop_nulls())
    n_calls = calls.list.len()
    pair = el.cast(pl.UInt64) * (1 << 32) + el.shift(-1).cast(pl.UInt64)
    return [
        turns.list.len().alias("n_turns_seen"),
        n_act.alias("n_act"),
        roles.list.eval(is_act.arg_true().first()).list.first().alias("first_act"),
        search_first.alias("search_first"),
        verified.alias("verified"),
        roles.list.eval(search.sum()).list.first().alias("n_search"),
        roles.list.eval(verify.sum()).list.first().alias("n_verify"),
        turns.list.eval((tool.is_not_null() & ok.not_().fill_null(False)).sum()).list.first().alias("failed_calls"),
        pl.when(n_calls >= 2).then(1 - calls.list.n_unique() / n_calls).alias("repeated_share"),
        pl.when(n_calls >= 3)
        .then(calls.list.eval(1 - pair.drop_nulls().n_unique() / pair.drop_nulls().len()).list.first())
        .alias("call_bigram_rep"),
        turns.list.eval(tool.drop_nulls().rle().struct.field("len").max()).list.first().alias("max_run"),
        pl.when(n_calls >= 1)
        .then(turns.list.eval(tool.drop_nulls().value_counts().struct.field("count").entropy(base=2)).list.first())
        .alias("entropy"),
    ]
