"""Agentic layer: does the environment misbehave?

Two ways an environment's code misbehaves can be seen from the rollouts alone (a call is a tool and its
arguments: the `call` hash of `diagnostics/trajectories.py`):

- **it answers a call wrongly** (`agentic.tool_result_misleads`): the episodes that got a successful answer to
  one particular call succeed far less often than the episodes that did not: a wrong value in a lookup table,
  a stale cache entry, an observation formatted wrongly for some inputs. Here the call succeeded and its
  answer misled;
- **it refuses calls it answers elsewhere** (`agentic.tool_refuses_known_calls`): a call the environment
  answered successfully in at least `KNOWN_MIN_EPISODES` episodes fails in others. The call was well-formed,
  so what failed it is the environment's state: a limit of its code (calls, time, budget) that binds, a
  resource it ran out of. A failure of a call that never succeeds anywhere (a key the table lacks) is the
  policy's, and `agentic.tool_failure`'s; a call the trainer did not run (written in the last allowed turn, an
  echo-trap repeat: `success` null) is no refusal.

Pure functions over the per-episode features; `diagnostics/agentic.py` runs them.
"""

from __future__ import annotations

import math

import polars as pl

from diagnostics.agentic_docs import MISLEADING_RESULT, REFUSED_KNOWN_CALLS
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
# A call is known once the environment answered it successfully in KNOWN_MIN_EPISODES episodes; the refusal rate
# (failed calls among the calls to known calls) is graded once REFUSED_MIN_CALLS such failures are seen.
# EvoTrainer's thresholds: a healthy deterministic environment refuses none (0.0 on the lookup examples).
KNOWN_MIN_EPISODES = 5
REFUSED_MIN_CALLS = 20
REFUSED_WARNING = 0.05
REFUSED_CRITICAL = 0.15


def tool_results(t: Trajectories) -> LayerOutput:
    """Does the environment answer some call wrongly? The call whose successful answer most lowers its episodes'
    success, where the gap is significant (see `RESULT_GAP_WARNING`)."""
    m = {"tool_result_gap": math.nan, "tool_result_gap_episodes": math.nan}
    what = "a tool answer misleads: episodes that got it fail far more often (the environment may answer it wrongly)"
    no_data = "no recorded turns" if t.calls is None else ""
    answered = None if t.calls is None else t.calls.filter(pl.col("ok")).select("episode", "tool", "call")
    if answered is None or not answered.height:
        return LayerOutput((graded(MISLEADING_RESULT, Layer.BEHAVIOUR, math.nan, metric="tool_result_gap",
                                   warning=RESULT_GAP_WARNING, critical=RESULT_GAP_CRITICAL, what=what,
                                   inconclusive=no_data),), m)  # fmt: skip
    from scipy import stats as sps

    episodes = t.frame.select(pl.col("success").fill_null(False)).with_row_index("episode")
    n, wins = episodes.height, int(episodes["success"].sum())
    per_call = (
        answered.join(episodes, on="episode")
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
        hit = answered.filter(pl.col("call") == best[2]).select("episode")
        failed = t.frame.with_row_index("episode").join(hit, on="episode", maintain_order="left")
        failed = failed.filter(~pl.col("success").fill_null(False))
        evidence = refs(failed, EVIDENCE_MAX)
        what += f"; worst: a {best[1]} call made in {best[3]} episodes"
    finding = graded(MISLEADING_RESULT, Layer.BEHAVIOUR, m["tool_result_gap"], metric="tool_result_gap",
                     warning=RESULT_GAP_WARNING, critical=RESULT_GAP_CRITICAL, what=what, evidence=evidence,
                     numbers={"calls_compared": float(per_call.height), "episodes": float(n)})  # fmt: skip
    return LayerOutput((finding,), m)


def refused_calls(t: Trajectories) -> LayerOutput:
    """Does the environment refuse well-formed calls? The share of calls to known calls (answered successfully in
    `KNOWN_MIN_EPISODES` episodes or more) that it failed; the evidence, episodes with such a refusal."""
    m = {"refused_known_call_rate": math.nan, "refused_known_calls": math.nan}
    what = "the environment refuses calls it answers in other episodes (a limit or state of its code binds)"
    if t.calls is None or not t.calls.height:
        return LayerOutput((graded(REFUSED_KNOWN_CALLS, Layer.BEHAVIOUR, math.nan, metric="refused_known_call_rate",
                                   warning=REFUSED_WARNING, critical=REFUSED_CRITICAL, what=what,
                                   inconclusive="no recorded turns"),), m)  # fmt: skip
    known = (
        t.calls.filter(pl.col("ok"))
        .group_by("tool", "call")
        .agg(pl.col("episode").n_unique().alias("episodes"))
        .filter(pl.col("episodes") >= KNOWN_MIN_EPISODES)
        .select("tool", "call")
    )
    to_known = t.calls.filter(pl.col("ok").is_not_null()).join(known, on=["tool", "call"])  # calls the env ran
    refused = to_known.filter(~pl.col("ok"))
    m["refused_known_calls"] = float(refused.height)
    inconclusive = ""
    if refused.height < REFUSED_MIN_CALLS:
        inconclusive = f"{refused.height} refused calls (< {REFUSED_MIN_CALLS})" if refused.height else ""
        m["refused_known_call_rate"] = 0.0 if not refused.height and to_known.height else math.nan
    else:
        m["refused_known_call_rate"] = refused.height / to_known.height
    evidence: list[str] = []
    if refused.height:
        tools = sorted({str(tool) for tool in refused["tool"]})
        what += f"; refused: {', '.join(tools)} ({refused.height} of {to_known.height} calls to known calls)"
        episodes = t.frame.with_row_index("episode").join(refused.select("episode").unique(), on="episode")
        evidence = refs(episodes.sort("episode"), EVIDENCE_MAX)
    finding = graded(REFUSED_KNOWN_CALLS, Layer.BEHAVIOUR, m["refused_known_call_rate"],
                     metric="refused_known_call_rate", warning=REFUSED_WARNING, critical=REFUSED_CRITICAL, what=what,
                     evidence=evidence, inconclusive=inconclusive if math.isnan(m["refused_known_call_rate"]) else "",
                     numbers={"refused_known_calls": m["refused_known_calls"]})  # fmt: skip
    return LayerOutput((finding,), m)
