"""Agentic layer: does the environment answer some call wrongly? (issue 28 §4)

An environment misbehaves, seen from the rollouts alone, when the episodes that got a successful answer to one
particular call (a tool and its arguments: the `call` hash of `diagnostics/trajectories.py`) succeed far less
often than the episodes that did not: a wrong value in a lookup table, a stale cache entry, an observation
formatted wrongly for some inputs. Failed calls are another rule's (`agentic.tool_failure`); here the call
succeeded and its answer misled. Pure function over the per-episode features; `diagnostics/agentic.py` runs it.
"""

from __future__ import annotations

import math

import polars as pl

from diagnostics.agentic_docs import MISLEADING_RESULT
from diagnostics.findings import Layer, LayerOutput, graded
from diagnostics.query import refs
from diagnostics.trajectories import Trajectories

# A call counts with >= RESULT_MIN_EPISODES episodes on each side; its gap (success rate without it minus with it)
# counts only when a one-sided binomial test puts it below RESULT_ALPHA after a Bonferroni correction over the
# calls compared (one call out of many falling short by chance is no alert). EvoTrainer's thresholds.
RESULT_MIN_EPISODES = 20
RESULT_ALPHA = 0.01
RESULT_GAP_WARNING = 0.30
RESULT_GAP_CRITICAL = 0.50
EVIDENCE_MAX = 5


def tool_results(t: Trajectories) -> LayerOutput:
    """Does the environment answer some call wrongly? The call whose successful answer most lowers its episodes'
    success, where the gap is significant (see `RESULT_GAP_WARNING`)."""
    m = {"tool_result_gap": math.nan, "tool_result_gap_episodes": math.nan}
    what = "a tool answer misleads: episodes that got it fail far more often (the environment may answer it wrongly)"
    no_data = "no recorded turns" if t.calls is None else ""
    if t.calls is None or not t.calls.height:
        return LayerOutput((graded(MISLEADING_RESULT, Layer.BEHAVIOUR, math.nan, metric="tool_result_gap",
                                   warning=RESULT_GAP_WARNING, critical=RESULT_GAP_CRITICAL, what=what,
                                   inconclusive=no_data),), m)  # fmt: skip
    from scipy import stats as sps

    episodes = t.frame.select(pl.col("success").fill_null(False)).with_row_index("episode")
    n, wins = episodes.height, int(episodes["success"].sum())
    per_call = (
        t.calls.join(episodes, on="episode")
        .group_by("tool", "call")
        .agg(n_with=pl.len(), ok_with=pl.col("success").sum())
        .filter((pl.col("n_with") >= RESULT_MIN_EPISODES) & (n - pl.col("n_with") >= RESULT_MIN_EPISODES))
        .sort("tool", "call")
    )
    best: tuple[float, str, int, int] | None = None
    for tool, call, n_with, ok_with in per_call.iter_rows():
        rate_without = (wins - ok_with) / (n - n_with)
        p_value = float(sps.binom.cdf(ok_with, n_with, rate_without)) * per_call.height
        gap = rate_without - ok_with / n_with
        if p_value < RESULT_ALPHA and (best is None or gap > best[0]):
            best = (gap, str(tool), int(call), int(n_with))
    m["tool_result_gap"] = best[0] if best is not None else 0.0 if per_call.height else math.nan
    evidence: list[str] = []
    if best is not None:
        m["tool_result_gap_episodes"] = float(best[3])
        hit = t.calls.filter(pl.col("call") == best[2]).select("episode")
        failed = t.frame.with_row_index("episode").join(hit, on="episode", maintain_order="left")
        failed = failed.filter(~pl.col("success").fill_null(False))
        evidence = refs(failed, EVIDENCE_MAX)
        what += f"; worst: a {best[1]} call made in {best[3]} episodes"
    finding = graded(MISLEADING_RESULT, Layer.BEHAVIOUR, m["tool_result_gap"], metric="tool_result_gap",
                     warning=RESULT_GAP_WARNING, critical=RESULT_GAP_CRITICAL, what=what, evidence=evidence,
                     numbers={"calls_compared": float(per_call.height), "episodes": float(n)})  # fmt: skip
    return LayerOutput((finding,), m)
