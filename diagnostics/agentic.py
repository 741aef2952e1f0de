"""Agentic layer: how episodes behave (turns, tools, repetition, caps) and whether the reward pays behaviour.

Pure functions over run-table rows (`diagnostics/table.py`), paper §6.1 dimensions 2-3, §6.2, §6.3 rules 2,
5, 6, §8 (level-1 trajectory filter), §9 (toxic behaviour rewards), §10 (echo trap, abandonment, one-turn
collapse, truncation). It runs only when the run has agentic rollouts (`trajectories.is_agentic`): a
single-turn report holds none of these metrics or findings. Findings are in the behaviour layer with ids
`agentic.*`; `agentic_docs.AGENTIC_METRIC_DOCS` names every metric and the rule that grades it (the
report's `METRIC_DOCS` includes it). Tool roles (search / act / verify) are defined in
`diagnostics/tool_roles.py`, the per-episode features in `diagnostics/trajectories.py`.

Definitions: an episode *succeeds* when its strict score is >= 0.5 (a positive reward where it has no strict
score); its *action* is an act-role tool call, or its final answer when the harness has no act-role tool.
Metrics that need the turns themselves (roles, repetition, runs, entropy) are NaN, with the rule saying
"no data", for episodes recorded with only `num_turns` / `tool_calls`. Every threshold sits next to its rule
with its source; where the paper gives none the value is EvoTrainer's and says so.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import polars as pl

from diagnostics.agentic_docs import (
    ONE_TURN_COLLAPSE,
    PAID_WITHOUT_SUCCESS,
    REWARD_PAYS_FEWER_TURNS,
    REWARD_PAYS_TOOL_CALLS,
    TRAJECTORY_MARK,
)
from diagnostics.findings import Layer, LayerOutput, graded
from diagnostics.query import GROUP_KEYS, refs
from diagnostics.schema import StopReason
from diagnostics.score import REWARDED_WRONG_RELATIVE, ROUNDING_SLACK, STRICT_CORRECT
from diagnostics.tool_results import refused_calls, tool_results
from diagnostics.tool_roles import DEFAULT_ROLES, ActMode, ToolRole, ToolRoles
from diagnostics.trajectories import Trajectories, is_agentic, trajectories

# Paper §8, §10: abandonment = <= 3 turns and no action.
ABANDON_MAX_TURNS = 3
ABANDON_WARNING = 0.20
ABANDON_CRITICAL = 0.50
# Paper §10 one-turn collapse (turns 36.7 -> 1.0 under a multiplicative efficiency reward); shares are EvoTrainer's.
ONE_TURN_WARNING = 0.50
ONE_TURN_CRITICAL = 0.90
# Echo trap: an unsuccessful episode far longer than the successful ones (paper §10: > 60 turns against a mean
# of 36-37, i.e. 1.6x; §8's level-1 rule), or one the environment stopped as an echo trap. The reference is the
# mean turns of successful episodes (all episodes with fewer than ECHO_MIN_SUCCESSES successes); episodes of
# ECHO_TRAP_MIN_TURNS turns or fewer are never echo traps (1.6 x 2 turns is no loop).
ECHO_TRAP_RATIO = 1.6
ECHO_TRAP_MIN_TURNS = 6
ECHO_MIN_SUCCESSES = 5
ECHO_TRAP_WARNING = 0.10
ECHO_TRAP_CRITICAL = 0.30
# Paper §6.3 rule 2: failed episodes' turns > 1.5 x mean, or mean turns rising for 3 steps (echo-trap precursors).
FAILED_TURNS_RATIO = 1.5
TURNS_RISING_STEPS = 3
# Paper §6.3 rule 6: an edit tool failing > 15% of its calls. Applied to every tool with enough calls.
TOOL_FAILURE_WARNING = 0.15
MIN_TOOL_CALLS = 20
MAX_TOOLS_LISTED = 16  # per-tool metrics for the most called tools only (a report stays short)
# Paper §6.1 dimension 2: self-test (a test after the edit) < 50% WARNING; the same bar for search-before-act
# (the paper tracks it without a threshold: EvoTrainer's).
ACT_THEN_VERIFY_WARNING = 0.50
SEARCH_BEFORE_ACT_WARNING = 0.50
# Paper §10 action timidity (edits fall, searches rise): the first action comes in the last quarter of the
# episode on average (EvoTrainer's threshold).
FIRST_ACTION_LATE = 0.75
# Template collapse (paper §6.3 anti-patterns: tool entropy, bigram repetition; §6.2: runs of 32 identical
# terminal calls in long failures). Thresholds are EvoTrainer's.
TOOL_ENTROPY_WARNING = 0.20  # mean per-episode tool entropy / log2(distinct tools of the run)
SAME_TOOL_RUN_WARNING = 10.0  # P90 of the longest run of one tool
CALL_BIGRAM_WARNING = 0.50
REPEATED_CALL_WARNING = 0.30  # share of calls that repeat an identical earlier call (tool spam)
# Paper §6.1 (Coding): truncation > 15% WARNING, applied to episodes cut at the turn or token cap.
CUT_WARNING = 0.15
# Successful episodes that used every turn the cap allows: the cap binds on successes (paper §7 soft-truncation
# backtest: 15 turns cut 6-18 successes). EvoTrainer's threshold.
CUT_SUCCESS_WARNING = 0.20
# Episodes cut at the turn cap are work in progress (no failed and no repeated call, so no loop) when at least
# this share of them are (cut_progress_rate). With cut_rate above CUT_WARNING, that says the cap, not a loop,
# ends them. EvoTrainer's threshold. The `raise-turn-budget` seed skill's trigger reads the rules as they are
# written here: cut_progress_rate >= CUT_PROGRESS_SHARE, echo_trap_rate < ECHO_TRAP_WARNING, and either the
# cut_successes alert (success_at_cap_rate > CUT_SUCCESS_WARNING) or episode_cut on the turn cap
# (max_turns_rate > CUT_WARNING).
CUT_PROGRESS_SHARE = 0.50
# Paper §9: a reward that pays a behaviour count gets hacked; as rewarded_wrong (score layer) for trajectories.
PAID_WITHOUT_SUCCESS_WARNING = 0.10
PAID_WITHOUT_SUCCESS_CRITICAL = 0.30
# Paper §9 toxic rewards, read from the rollouts (as length_reward_corr, paper §6.1 Math: corr > 0.3 gaming).
REWARD_CORR_WARNING = 0.30
MIN_CORR_ROWS = 10
# Paper §10 echo trap: the filtered count rose 23 -> 194. Most of the batch marked = the filter hides a problem.
MARKED_WARNING = 0.30
EVIDENCE_MAX = 5


def _nan(value: object) -> float:
    return math.nan if value is None else float(value)  # type: ignore[arg-type]


def _rate(hits: int, total: int) -> float:
    return hits / total if total else math.nan


def _where(frame: pl.DataFrame, predicate: pl.Expr) -> pl.DataFrame:
    return frame.filter(predicate)  # the trajectory frame is small and per-run: a plain filter


def _rising(series: Sequence[float], steps: int) -> bool:
    tail = series[-(steps + 1) :]
    return len(tail) == steps + 1 and all(b > a for a, b in itertools.pairwise(tail))


def _corr(frame: pl.DataFrame, x: str, y: str) -> float:
    if frame.height < MIN_CORR_ROWS:
        return math.nan
    a, b = frame[x].cast(pl.Float64).to_numpy(), frame[y].cast(pl.Float64).to_numpy()
    if np.std(a) == 0 or np.std(b) == 0:
        return math.nan
    return float(np.corrcoef(a, b)[0, 1])


# The agentic metrics the report draws as curves over steps (`per_step`), with the run-level definitions.
STEP_METRICS = ("turns_mean", "tool_calls_mean", "tool_failure_rate", "abandon_rate")


def per_step(rows: pl.DataFrame, roles: ToolRoles = DEFAULT_ROLES) -> dict[str, list[tuple[int, float]]]:
    """`STEP_METRICS` of each step's episodes as `(step, value)` points; {} when no row is an agentic episode.

    The same definitions as the run's metrics: turns and tool calls per episode, failed calls over the calls
    of the episodes that carry their turns, and abandonment (`abandoned`). A step without a value for a
    metric (no call made) has no point for it.
    """
    if not is_agentic(rows):
        return {}
    t = trajectories(rows, roles)
    seen = pl.col("failed_calls").is_not_null()
    calls_seen = pl.col("tool_calls").filter(seen).sum()
    frame = (
        t.frame.group_by("step")
        .agg(
            pl.col("num_turns").cast(pl.Float64).mean().alias("turns_mean"),
            pl.col("tool_calls").cast(pl.Float64).mean().alias("tool_calls_mean"),
            pl.when(calls_seen > 0)
            .then(pl.col("failed_calls").filter(seen).sum() / calls_seen)
            .alias("tool_failure_rate"),
            abandoned(t).cast(pl.Float64).mean().alias("abandon_rate"),
        )
        .sort("step")
    )
    out: dict[str, list[tuple[int, float]]] = {}
    for name in STEP_METRICS:
        points = [(int(s), float(v)) for s, v in frame.select("step", name).iter_rows() if v is not None]
        points = [(s, v) for s, v in points if math.isfinite(v)]
        if points:
            out[name] = points
    return out


def abandoned(t: Trajectories) -> pl.Expr:
    """An episode abandoned its task: <= `ABANDON_MAX_TURNS` turns without an action, or stopped as abandoned."""
    acted = pl.col("n_act") > 0 if t.act_mode is ActMode.TOOLS else pl.col("tool_calls") > 0
    no_action = ~pl.coalesce(acted, pl.col("tool_calls") > 0) if t.has_turns else pl.col("tool_calls") == 0
    return ((pl.col("num_turns") <= ABANDON_MAX_TURNS) & no_action) | (pl.col("stop_reason") == StopReason.ABANDON)


def diagnose_agentic(rows: pl.DataFrame, roles: ToolRoles = DEFAULT_ROLES) -> LayerOutput:
    """Every agentic rule over (training) rows; nothing at all when no row is an agentic episode."""
    if not is_agentic(rows):
        return LayerOutput((), {})
    t = trajectories(rows, roles)
    parts = [
        _turns(t),
        _tools(t),
        _sequence(t, roles),
        _caps(t),
        _reward(t),
        tool_results(t),
        refused_calls(t),
    ]
    return LayerOutput.merge(parts)


def _turns(t: Trajectories) -> LayerOutput:
    """Turn counts, per success group; one-turn collapse, abandonment, echo trap, failed turns, rising turns."""
    f, ok = t.frame, pl.col("success")
    turns = pl.col("num_turns").cast(pl.Float64)
    stats = f.select(
        turns.mean().alias("turns_mean"),
        turns.quantile(0.9, "linear").alias("turns_p90"),
        turns.filter(ok).mean().alias("turns_mean_success"),
        turns.filter(~ok).mean().alias("turns_mean_failed"),
        turns.filter(ok).quantile(0.9, "linear").alias("turns_p90_success"),
        turns.filter(~ok).quantile(0.9, "linear").alias("turns_p90_failed"),
        ok.sum().alias("n_success"),
    ).row(0, named=True)
    m = {k: _nan(v) for k, v in stats.items() if k != "n_success"}
    n = f.height
    m["failed_turns_ratio"] = (
        m["turns_mean_failed"] / m["turns_mean"] if m["turns_mean"] > 0 and not math.isnan(m["turns_mean_failed"])
        else math.nan
    )  # fmt: skip
    one = _where(f, pl.col("num_turns") <= 1)
    m["one_turn_rate"] = _rate(one.height, n)
    abandon = _where(f, abandoned(t))
    m["abandon_rate"] = _rate(abandon.height, n)
    reference = m["turns_mean_success"] if stats["n_success"] >= ECHO_MIN_SUCCESSES else m["turns_mean"]
    m["echo_trap_turns"] = max(ECHO_TRAP_RATIO * reference, float(ECHO_TRAP_MIN_TURNS))
    echo = _where(
        f, ~ok & ((pl.col("num_turns") > m["echo_trap_turns"]) | (pl.col("stop_reason") == StopReason.ECHO_TRAP))
    )
    m["echo_trap_rate"] = _rate(echo.height, n)
    steps = f.group_by("step").agg(turns.mean()).sort("step")["num_turns"].to_list()
    rising = _rising(steps, TURNS_RISING_STEPS)
    m["turns_rising"] = 1.0 if rising else (0.0 if len(steps) > TURNS_RISING_STEPS else math.nan)
    action = "an act-role tool call" if t.act_mode is ActMode.TOOLS else "a tool call"
    findings = (
        graded(ONE_TURN_COLLAPSE, Layer.BEHAVIOUR, m["one_turn_rate"], metric="one_turn_rate",
               warning=ONE_TURN_WARNING, critical=ONE_TURN_CRITICAL,
               what="one-turn collapse: episodes end after their first turn", evidence=refs(one, EVIDENCE_MAX),
               numbers={"turns_mean": m["turns_mean"], "turns_p90": m["turns_p90"]}),
        graded("agentic.abandonment", Layer.BEHAVIOUR, m["abandon_rate"], metric="abandon_rate",
               warning=ABANDON_WARNING, critical=ABANDON_CRITICAL,
               what=f"abandonment: <= {ABANDON_MAX_TURNS} turns without {action}",
               evidence=refs(abandon, EVIDENCE_MAX)),
        graded("agentic.echo_trap", Layer.BEHAVIOUR, m["echo_trap_rate"], metric="echo_trap_rate",
               warning=ECHO_TRAP_WARNING, critical=ECHO_TRAP_CRITICAL,
               what=f"echo trap: unsuccessful episodes of more than {m['echo_trap_turns']:.3g} turns "
               f"({ECHO_TRAP_RATIO}x the successful ones' mean)", evidence=refs(echo, EVIDENCE_MAX),
               numbers={"echo_trap_turns": m["echo_trap_turns"], "reference_turns": reference}),
        graded("agentic.failed_turns", Layer.BEHAVIOUR, m["failed_turns_ratio"], metric="failed_turns_ratio",
               warning=FAILED_TURNS_RATIO, what="echo-trap precursor: unsuccessful episodes run much longer",
               numbers={"turns_mean_failed": m["turns_mean_failed"], "turns_mean": m["turns_mean"]}),
        graded("agentic.turns_rising", Layer.BEHAVIOUR, m["turns_rising"],
               metric=f"mean turns rose {TURNS_RISING_STEPS} steps in a row", warning=0.5,
               what="echo-trap precursor: mean turns keep rising",
               numbers={f"turns_step_{i}": v for i, v in enumerate(steps[-(TURNS_RISING_STEPS + 1) :])}),
    )  # fmt: skip
    return LayerOutput(findings, m)


def _tools(t: Trajectories) -> LayerOutput:
    """Tool-call frequency, failure rates (overall, per tool), role shares, first action, search/verify rates."""
    f, tools = t.frame, t.tools
    ok = pl.col("success")
    calls = pl.col("tool_calls").cast(pl.Float64)
    row = f.select(
        calls.mean().alias("tool_calls_mean"),
        (calls.sum() / pl.col("num_turns").sum()).alias("tool_calls_per_turn"),
        calls.filter(ok).mean().alias("tool_calls_mean_success"),
        calls.filter(~ok).mean().alias("tool_calls_mean_failed"),
    ).row(0, named=True)
    m = {k: _nan(v) for k, v in row.items()}
    total = int(tools["calls"].sum()) if tools.height else 0
    failed = int(tools["failed"].sum()) if tools.height else 0
    m["tool_failure_rate"] = _rate(failed, total)
    enough = tools.filter(pl.col("calls") >= MIN_TOOL_CALLS)
    worst_tool, worst = "", math.nan
    if enough.height:
        rates = enough.with_columns(rate=pl.col("failed") / pl.col("calls")).sort("rate", descending=True)
        worst_tool, worst = str(rates["tool"][0]), float(rates["rate"][0])
    m["tool_failure_rate_max"] = worst
    for tool, n_calls, n_failed, _ in tools.head(MAX_TOOLS_LISTED).iter_rows():
        m[f"tool_share/{tool}"] = n_calls / total
        m[f"tool_failure_rate/{tool}"] = n_failed / n_calls
    by_role = dict(tools.group_by("role").agg(pl.col("calls").sum()).iter_rows()) if tools.height else {}
    for role in (ToolRole.SEARCH, ToolRole.ACT, ToolRole.VERIFY):
        m[f"{role.value}_ratio"] = _rate(int(by_role.get(role.value, 0)), total)
    m["act_by_answer"] = 1.0 if t.act_mode is ActMode.ANSWER else 0.0
    m["first_action_turn"] = m["first_action_position"] = math.nan
    m["search_before_act_rate"] = m["act_then_verify_rate"] = math.nan
    if t.has_turns:
        acting = _where(f, pl.col("n_act") > 0)
        if t.act_mode is ActMode.TOOLS and acting.height:
            first = pl.col("first_act").cast(pl.Float64)
            m["first_action_turn"] = _nan(acting.select((first + 1).mean()).item())
            long = acting.filter(pl.col("n_turns_seen") >= 2)
            m["first_action_position"] = _nan(long.select((first / (pl.col("n_turns_seen") - 1)).mean()).item())
        if acting.height and ToolRole.SEARCH in t.roles_present:
            m["search_before_act_rate"] = float(acting["search_first"].mean())  # type: ignore[arg-type]
        if acting.height and ToolRole.VERIFY in t.roles_present:
            m["act_then_verify_rate"] = float(acting["verified"].mean())  # type: ignore[arg-type]
    else:
        acting = f.clear()
    unverified = _where(acting, ~pl.col("verified")) if acting.height else acting
    unsearched = _where(acting, ~pl.col("search_first")) if acting.height else acting
    findings = (
        graded("agentic.tool_failure", Layer.BEHAVIOUR, worst, metric="tool_failure_rate_max",
               warning=TOOL_FAILURE_WARNING,
               what="tool calls fail often (poor call quality)"
               + (f", worst {worst_tool}" if worst > TOOL_FAILURE_WARNING else ""),
               numbers={"tool_failure_rate": m["tool_failure_rate"], "calls": float(total)}),
        graded("agentic.action_timidity", Layer.BEHAVIOUR, m["first_action_position"], metric="first_action_position",
               warning=FIRST_ACTION_LATE, what="action timidity: the first action comes at the end of episodes",
               numbers={"first_action_turn": m["first_action_turn"], "act_ratio": m["act_ratio"],
                        "search_ratio": m["search_ratio"]}),
        graded("agentic.search_before_act", Layer.BEHAVIOUR, m["search_before_act_rate"],
               metric="search_before_act_rate", warning=SEARCH_BEFORE_ACT_WARNING, above=False,
               what="acting without looking first (no search before the first action)",
               evidence=refs(unsearched, EVIDENCE_MAX)),
        graded("agentic.act_then_verify", Layer.BEHAVIOUR, m["act_then_verify_rate"], metric="act_then_verify_rate",
               warning=ACT_THEN_VERIFY_WARNING, above=False,
               what="work not checked: no verify call after the last action (laziness, paper §6.3 rule 5)",
               evidence=refs(unverified, EVIDENCE_MAX), numbers={"verify_ratio": m["verify_ratio"]}),
    )  # fmt: skip
    return LayerOutput(findings, m)


def diversity_inconclusive(declared: Sequence[str] | None, seen: Sequence[str], multi_call_episodes: int) -> str:
    """Why tool diversity cannot mean anything for a run ("" when it can).

    Diversity needs a choice and room to use it: a harness that declares fewer than two tools (or, with
    none declared, a run that calls fewer than two) gives an episode no other tool to call, and an episode
    of one call has no diversity to measure. Calls to undeclared names (a misspelt tool) are no choice.
    """
    if declared is not None and len(declared) < 2:
        return f"the harness declares {len(declared)} tool(s) ({', '.join(declared) or 'none'}): no other tool to call"
    if declared is None and len(seen) < 2:
        return f"the run calls {len(seen)} tool(s) ({', '.join(seen) or 'none'}) and the harness declares none"
    if multi_call_episodes == 0:
        return "no episode made two or more tool calls: one call has no diversity to measure"
    return ""


def _sequence(t: Trajectories, roles: ToolRoles = DEFAULT_ROLES) -> LayerOutput:
    """Template collapse and tool spam: tool entropy, longest same-tool run, call bigram repetition, repeats."""
    f = t.frame
    m = dict.fromkeys(
        ("tool_type_entropy", "tool_type_entropy_norm", "max_same_tool_run_mean", "max_same_tool_run_p90",
         "call_bigram_repetition", "repeated_call_rate"), math.nan,
    )  # fmt: skip
    spam = runs = f.clear()
    if t.has_turns:
        run = pl.col("max_run").cast(pl.Float64)
        row = f.select(
            pl.col("entropy").mean().alias("tool_type_entropy"),
            run.mean().alias("max_same_tool_run_mean"),
            run.quantile(0.9, "linear").alias("max_same_tool_run_p90"),
            pl.col("call_bigram_rep").mean().alias("call_bigram_repetition"),
            pl.col("repeated_share").mean().alias("repeated_call_rate"),
        ).row(0, named=True)
        m.update({k: _nan(v) for k, v in row.items()})
        # normalised by the tools the episodes could choose from: the declared ones, else those seen
        choices = len(roles.declared) if roles.declared is not None else t.tools.height
        if choices >= 2 and not math.isnan(m["tool_type_entropy"]):
            m["tool_type_entropy_norm"] = m["tool_type_entropy"] / math.log2(choices)
        spam = _where(f, pl.col("repeated_share") > REPEATED_CALL_WARNING).sort("repeated_share", descending=True)
        runs = _where(f, pl.col("max_run") > SAME_TOOL_RUN_WARNING).sort("max_run", descending=True)
    declared = None if roles.declared is None else sorted(roles.declared)
    multi = int(f.filter(pl.col("tool_calls") >= 2).height) if t.has_turns else 0
    findings = (
        graded("agentic.tool_diversity", Layer.BEHAVIOUR, m["tool_type_entropy_norm"], metric="tool_type_entropy_norm",
               warning=TOOL_ENTROPY_WARNING, above=False,
               what="template collapse: each episode calls one tool over and over",
               numbers={"tool_type_entropy": m["tool_type_entropy"], "distinct_tools": float(t.tools.height),
                        "declared_tools": math.nan if declared is None else float(len(declared))},
               inconclusive=diversity_inconclusive(declared, t.tools["tool"].to_list(), multi)
               if t.has_turns else ""),
        graded("agentic.same_tool_run", Layer.BEHAVIOUR, m["max_same_tool_run_p90"], metric="max_same_tool_run_p90",
               warning=SAME_TOOL_RUN_WARNING, what="long runs of the same tool (paper: 32 consecutive terminal calls)",
               evidence=refs(runs, EVIDENCE_MAX)),
        graded("agentic.call_repetition", Layer.BEHAVIOUR, m["call_bigram_repetition"],
               metric="call_bigram_repetition", warning=CALL_BIGRAM_WARNING,
               what="repetitive call sequences (the same pairs of calls again and again)"),
        graded("agentic.tool_spam", Layer.BEHAVIOUR, m["repeated_call_rate"], metric="repeated_call_rate",
               warning=REPEATED_CALL_WARNING, what="tool spam: calls repeat identical earlier calls",
               evidence=refs(spam, EVIDENCE_MAX), numbers={"tool_calls_mean": _nan(f["tool_calls"].mean())}),
    )  # fmt: skip
    return LayerOutput(findings, m)


def _caps(t: Trajectories) -> LayerOutput:
    """Episodes cut at the turn / token cap, and whether the turn cap cuts work that would succeed."""
    f, ok = t.frame, pl.col("success")
    n = f.height
    at_turn_cap = pl.col("stop_reason") == StopReason.MAX_TURNS
    at_token_cap = (pl.col("stop_reason") == StopReason.LENGTH) | pl.col("truncated")
    turn_cut = _where(f, at_turn_cap)
    cut = _where(f, at_turn_cap | at_token_cap)
    m = {
        "max_turns_rate": _rate(turn_cut.height, n),
        "token_cap_rate": _rate(_where(f, at_token_cap & ~at_turn_cap).height, n),
        "cut_rate": _rate(cut.height, n),
    }
    cap = _nan(turn_cut["num_turns"].max()) if turn_cut.height else math.nan
    m["turn_cap"] = cap
    successes = _where(f, ok)
    m["success_at_cap_rate"] = (
        _rate(successes.filter(pl.col("num_turns") >= cap).height, successes.height) if not math.isnan(cap)
        else math.nan
    )  # fmt: skip
    solved = f.filter(ok).select(*GROUP_KEYS).unique()
    m["cut_solvable_rate"] = _rate(turn_cut.join(solved, on=list(GROUP_KEYS)).height, turn_cut.height)
    m["cut_progress_rate"] = math.nan
    if t.has_turns and turn_cut.height:
        seen = turn_cut.filter(pl.col("n_turns_seen") > 0)
        clean = seen.filter((pl.col("failed_calls") == 0) & (pl.col("repeated_share").fill_null(0.0) == 0))
        m["cut_progress_rate"] = _rate(clean.height, seen.height)
    findings = (
        graded("agentic.episode_cut", Layer.BEHAVIOUR, m["cut_rate"], metric="cut_rate", warning=CUT_WARNING,
               what="episodes cut at the turn or token cap (no final answer)", evidence=refs(cut, EVIDENCE_MAX),
               numbers={"max_turns_rate": m["max_turns_rate"], "token_cap_rate": m["token_cap_rate"],
                        "cut_progress_rate": m["cut_progress_rate"], "cut_solvable_rate": m["cut_solvable_rate"]}),
        graded("agentic.cut_successes", Layer.BEHAVIOUR, m["success_at_cap_rate"], metric="success_at_cap_rate",
               warning=CUT_SUCCESS_WARNING,
               what="the turn cap binds on successes (they use every turn it allows; longer ones are cut)",
               evidence=refs(turn_cut, EVIDENCE_MAX), numbers={"turn_cap": cap}),
    )  # fmt: skip
    return LayerOutput(findings, m)


def _reward(t: Trajectories) -> LayerOutput:
    """Does the reward pay behaviour instead of success? Paid-without-success, reward correlations, marks."""
    f, ok = t.frame, pl.col("success")
    scored = f.filter(pl.col("strict_score").is_not_null())
    right = scored.filter(pl.col("strict_score") >= STRICT_CORRECT)
    wrong = scored.filter(pl.col("strict_score") < STRICT_CORRECT)
    ref = _nan(right["reward"].mean()) if right.height else _nan(wrong["reward"].max())
    paid = wrong.filter(pl.col("reward") >= REWARDED_WRONG_RELATIVE * ref * (1 - ROUNDING_SLACK)) if ref > 0 else None
    means = f.select(pl.col("reward").filter(ok).mean(), pl.col("reward").filter(~ok).mean().alias("failed")).row(0)
    m = {
        "reward_mean_success": _nan(means[0]),
        "reward_mean_failed": _nan(means[1]),
        "paid_without_success_rate": _rate(paid.height, scored.height) if paid is not None else math.nan,
        "tool_calls_reward_corr": _corr(f.filter(~ok), "tool_calls", "reward"),
        "turns_reward_corr": _corr(f.filter(ok), "num_turns", "reward"),
        "marked_rate": _rate(f.filter(pl.col("reward") == TRAJECTORY_MARK).height, f.height),
    }
    findings = (
        graded(PAID_WITHOUT_SUCCESS, Layer.BEHAVIOUR, m["paid_without_success_rate"],
               metric="paid_without_success_rate", warning=PAID_WITHOUT_SUCCESS_WARNING,
               critical=PAID_WITHOUT_SUCCESS_CRITICAL,
               what="the reward pays episodes that did not succeed (it pays a behaviour, not the task)",
               evidence=refs(paid, EVIDENCE_MAX) if paid is not None else (),
               numbers={"success_reward_mean": ref, "scored": float(scored.height)}),
        graded(REWARD_PAYS_TOOL_CALLS, Layer.BEHAVIOUR, m["tool_calls_reward_corr"],
               metric="tool_calls_reward_corr", warning=REWARD_CORR_WARNING,
               what="the reward pays tool calls: unsuccessful episodes earn more the more they call (toxic, §9)"),
        graded(REWARD_PAYS_FEWER_TURNS, Layer.BEHAVIOUR, m["turns_reward_corr"], metric="turns_reward_corr",
               warning=-REWARD_CORR_WARNING, above=False,
               what="the reward pays brevity: successful episodes earn more the fewer turns they take (toxic, §9)"),
        graded("agentic.level1_marked", Layer.BEHAVIOUR, m["marked_rate"], metric="marked_rate",
               warning=MARKED_WARNING, what="the trajectory filter marks most episodes (it hides a behaviour problem)"),
    )  # fmt: skip
    return LayerOutput(findings, m)
