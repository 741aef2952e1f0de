"""Behaviour layer: truncation, length dynamics, degeneration, format failures, model state.

Pure functions over run-table rows (`diagnostics/table.py`; paper §6.1 dimensions 2–4, §10). Text checks are
domain-agnostic and computed per row while the text is read (`diagnostics/features.py`: lengths in
whitespace words when `response_tokens` is missing, degeneration). Format and answer rules read the answer
protocol the harness declares (`harness/answers.py`); without one they are not evaluated and the report says
so. The agentic rules (turns, tools, abandonment, echo traps, caps) are in `diagnostics/agentic.py`, the one
place they are defined; they run only on runs with agentic episodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import polars as pl

from diagnostics.features import (
    BIGRAM_MIN,
    BIGRAM_REPETITION_DEGENERATE,
    CHAR_RUN_DEGENERATE,
    TOKEN_RUN_DEGENERATE,
    is_degenerate,
    repetition,
)
from diagnostics.findings import Finding, Layer, LayerOutput, graded
from diagnostics.query import aggregate, is_truncated, refs, where
from diagnostics.schema import StopReason
from diagnostics.score import HACK_STRICT_FLAT, STRICT_CORRECT, per_step_mean, trend

__all__ = [
    "BIGRAM_MIN",
    "BIGRAM_REPETITION_DEGENERATE",
    "CHAR_RUN_DEGENERATE",
    "NO_ANSWER_PROTOCOL",
    "TOKEN_RUN_DEGENERATE",
    "StepStops",
    "diagnose_behaviour",
    "is_degenerate",
    "repetition",
    "stop_shares_per_step",
    "stops_by_step",
]

# Paper §6.1 (Coding): truncation > 15% WARNING.
TRUNCATION_WARNING = 0.15
# Paper §6.1 (Math): corr(length, reward) > 0.3 = length gaming.
LENGTH_CORR_WARNING = 0.30
# In an agentic run a trajectory is longer when it calls more tools. Length "follows tool use" when
# corr(length, tool calls) reaches this and, with the calls held fixed (partial correlation), length no longer
# earns more than LENGTH_CORR_WARNING: the rule cannot tell gaming from using the tool. EvoTrainer's threshold.
LENGTH_FOLLOWS_TOOLS = 0.50
# Paper §6.3 anti-patterns: ~3x length with no score gain = length gaming.
LENGTH_GROWTH_WARNING = 3.0
DEGENERATE_WARNING = 0.10
# Paper §6.1 (Coding): FmtFail > 30% = misconfigured format gate.
FORMAT_FAILURE_WARNING = 0.30
# No response writes the declared answer format at all (an instruct model trained as it ships never
# writes its answer tag; every group is flat and GRPO learns nothing): CRITICAL, graded from this many
# single-turn responses up (fewer cannot show "never"), of which START_MIN ended before the token cap.
NEVER_WRITTEN_MIN = 16
NEVER_WRITTEN_CRITICAL = 0.01  # answer_written_rate below this
START_MIN = 8  # responses that ended on their own, for answer_written_rate_first_steps (the starting policy)
# Responses that write an answer and still run to the token cap: the policy does not stop at its end of turn
# (the wrong stop: warm-start targets that end without the token generation stops on). EvoTrainer's
# thresholds, like truncation's.
RUNS_PAST_ANSWER_WARNING = 0.15
RUNS_PAST_ANSWER_CRITICAL = 0.50
MULTI_ANSWER_WARNING = 0.05
EMPTY_WARNING = 0.05
# Paper §6.1 dimension 4: mean token logprob > -0.05 CRITICAL (exploration collapse), > -0.1 WARNING.
LOGPROB_WARNING = -0.10
LOGPROB_CRITICAL = -0.05
MIN_WRONG_FOR_LOGPROB = 20  # strict-wrong samples needed to grade collapse on them (else all samples)
EVIDENCE_MAX = 5

# What the format rules say when the harness declares no answer protocol (never a guessed tag set).
NO_ANSWER_PROTOCOL = "not evaluated: no answer protocol declared (add `answer:` to evotrainer.yaml)"


FORMAT_WHAT = "responses without a (non-empty) tagged answer"  # the tag: what the declared protocol reads
NEVER_WRITTEN_WHAT = (
    "no response writes the declared answer format, so every reward that reads the answer is flat and GRPO has no "
    "signal (warm-start the policy on worked solutions in that format, or ask for the format in the prompt)"
)
RUNS_PAST_WHAT = (
    "responses that write their answer and run on to the token cap: the policy is not stopped at its end of turn "
    "(check the token warm-start targets end with and the stop ids the trainer reads; a larger max_new_tokens "
    "does not help)"
)
MULTI_WHAT = "responses giving several candidate answers (answer spam)"


def _rate(hits: int, total: int) -> float:
    return hits / total if total else math.nan


def diagnose_truncation(rows: pl.DataFrame) -> LayerOutput:
    """Truncation rate and stop-reason shares."""
    n = rows.height
    cut = where(rows, is_truncated(), "strict_score")
    rate = _rate(cut.height, n)
    metrics = {"truncation_rate": rate}
    if n:
        counts = dict(rows.lazy().group_by("stop_reason").len().collect().iter_rows())
        metrics.update({f"stop_reason/{s.value}": counts.get(s.value, 0) / n for s in StopReason})
    finding = graded(
        "behaviour.truncation",
        Layer.BEHAVIOUR,
        rate,
        metric="truncation_rate",
        warning=TRUNCATION_WARNING,
        what="responses cut at the length cap (length budget bottleneck)",
        evidence=refs(cut, EVIDENCE_MAX),
        numbers={
            "truncated": float(cut.height),
            "truncated_with_strict": float(cut["strict_score"].is_not_null().sum()),
        },
    )
    return LayerOutput((finding,), metrics)


def _longest(rows: pl.DataFrame, k: int) -> pl.DataFrame:
    """The `k` longest responses, ties in file order."""
    if not rows.height:
        return rows
    floor = rows["length"].top_k(k).min()
    return where(rows, pl.col("length") >= floor, "length").sort("length", descending=True, maintain_order=True).head(k)


def length_inconclusive(corr: float, length_tools: float, reward_tools: float) -> tuple[str, float]:
    """Why corr(length, reward) cannot show length gaming in this run ("" when it can), and the partial
    correlation of length and reward with the number of tool calls held fixed (NaN without tool-call variance).

    When the longer trajectories are simply those that call the tool more (corr(length, tool calls) >=
    `LENGTH_FOLLOWS_TOOLS`) and length earns no more than `LENGTH_CORR_WARNING` once the calls are held fixed,
    the rule is inconclusive: the reward may pay the tool use, not the length (`agentic.reward_pays_tool_calls`
    is the rule for that).
    """
    if any(math.isnan(x) for x in (corr, length_tools, reward_tools)):
        return "", math.nan
    spread = (1 - length_tools**2) * (1 - reward_tools**2)
    partial = (corr - length_tools * reward_tools) / math.sqrt(spread) if spread > 1e-12 else math.nan
    if length_tools >= LENGTH_FOLLOWS_TOOLS and (math.isnan(partial) or partial <= LENGTH_CORR_WARNING):
        held = "length is the tool calls" if math.isnan(partial) else f"corr(length, reward) = {partial:.2f}"
        why = (
            f"longer trajectories are the ones that call more tools (corr(length, tool calls) = {length_tools:.2f}); "
            f"with the calls held fixed, {held}"
        )
        return why, partial
    return "", partial


def diagnose_length(rows: pl.DataFrame) -> LayerOutput:
    """Length distribution, corr(length, reward) and length growth over the run (length gaming)."""
    n = rows.height
    length, reward = pl.col("length").cast(pl.Float64), pl.col("reward")
    calls = pl.col("tool_calls").cast(pl.Float64)
    if n:
        mean, p50, p90, len_std, reward_std, corr, calls_std, length_calls, reward_calls = aggregate(
            rows,
            length.mean().alias("mean"),
            length.quantile(0.5, "linear").alias("p50"),
            length.quantile(0.9, "linear").alias("p90"),
            length.std(ddof=0).alias("len_std"),
            reward.std(ddof=0).alias("reward_std"),
            pl.corr(length, reward).alias("corr"),
            calls.std(ddof=0).alias("calls_std"),
            pl.corr(length, calls).alias("length_calls"),
            pl.corr(reward, calls).alias("reward_calls"),
        )
    else:
        mean = p50 = p90 = len_std = reward_std = corr = calls_std = length_calls = reward_calls = math.nan
    corr = float(corr) if n >= 3 and len_std > 0 and reward_std > 0 else math.nan
    varied = n >= 3 and calls_std > 0  # tool use can explain length only where it varies
    why, partial = length_inconclusive(
        corr, float(length_calls) if varied else math.nan, float(reward_calls) if varied else math.nan
    )
    step_means = rows.lazy().group_by("step").agg(length.mean()).sort("step").collect()["length"].to_list()
    first, last, _ = trend(step_means)
    growth = last / first if first and not math.isnan(first) else math.nan
    _, _, strict_delta = trend([v for _, v in per_step_mean(rows, strict=True)])
    metrics = {
        "response_length_mean": mean,
        "response_length_p50": p50,
        "response_length_p90": p90,
        "length_reward_corr": corr,
        "length_growth_ratio": growth,
    }
    longest = refs(_longest(rows, EVIDENCE_MAX), EVIDENCE_MAX)
    corr_finding = graded(
        "behaviour.length_reward_corr",
        Layer.BEHAVIOUR,
        corr,
        metric="length_reward_corr",
        warning=LENGTH_CORR_WARNING,
        what="length gaming: longer responses earn more reward",
        evidence=longest,
        numbers={"n": float(n)} if not varied else {"n": float(n), "length_reward_corr_given_tool_calls": partial},
        inconclusive=why,
    )
    # Growth without strict gain: ~3x length with no score gain is length gaming (paper §6.3).
    gated = growth if math.isnan(strict_delta) or strict_delta <= HACK_STRICT_FLAT else math.nan
    growth_finding = graded(
        "behaviour.length_growth",
        Layer.BEHAVIOUR,
        gated,
        metric="length_growth_ratio (strict score flat)",
        warning=LENGTH_GROWTH_WARNING,
        what="response length grew without strict-score gain",
        evidence=longest,
        numbers={"length_growth_ratio": growth, "strict_acc_delta": strict_delta},
    )
    return LayerOutput((corr_finding, growth_finding), metrics)


def diagnose_degeneration(rows: pl.DataFrame) -> LayerOutput:
    """Repetition and degeneration: bigram repetition, repeated-word and repeated-character runs."""
    bad = where(rows, "degenerate")
    rate = _rate(bad.height, rows.height)
    metrics = {
        "bigram_repetition_rate": float(rows["bigram_rep"].mean()) if rows.height else math.nan,  # type: ignore[arg-type]
        "degenerate_rate": rate,
    }
    finding = graded(
        "behaviour.degeneration",
        Layer.BEHAVIOUR,
        rate,
        metric="degenerate_rate",
        warning=DEGENERATE_WARNING,
        what="repetitive or degenerate responses (answer spam, repeated tokens)",
        evidence=refs(bad, EVIDENCE_MAX),
    )
    return LayerOutput((finding,), metrics)


def diagnose_format(rows: pl.DataFrame, protocol_declared: bool) -> LayerOutput:
    """Format failures (the declared protocol finds no answer), several answers in one response, empty responses.

    The answer rules apply to single-turn rollouts and read the protocol's features (`answers`,
    `answer_ok`); with no protocol declared they are not evaluated (NaN, and the finding says why).
    """
    single = where(
        rows.with_columns(is_truncated().alias("cut")),
        (pl.col("num_turns") <= 1) & (pl.col("tool_calls") == 0),
        "answers",
        "answer_ok",
        "answer_ends",
        "cut",
    )
    failed = single.filter(~pl.col("answer_ok")) if protocol_declared else single.clear()
    multi = single.filter(pl.col("answers") > 1) if protocol_declared else single.clear()
    written = single.filter(pl.col("answers") > 0) if protocol_declared else single.clear()
    past = written.filter(pl.col("cut") & ~pl.col("answer_ends"))
    empty = where(rows, "empty")
    fail_rate = _rate(failed.height, single.height) if protocol_declared else math.nan
    multi_rate = _rate(multi.height, single.height) if protocol_declared else math.nan
    written_rate = _rate(written.height, single.height) if protocol_declared else math.nan
    past_rate = _rate(past.height, single.height) if protocol_declared else math.nan
    start_rate = _start_written_rate(single) if protocol_declared else math.nan
    ended = int((~single["cut"]).sum())
    empty_rate = _rate(empty.height, rows.height)
    metrics = {
        "format_failure_rate": fail_rate,
        "multi_answer_rate": multi_rate,
        "empty_response_rate": empty_rate,
        "answer_written_rate": written_rate,
        "answer_written_rate_first_steps": start_rate,
        "runs_past_answer_rate": past_rate,
    }
    fail = graded(
        "behaviour.format_failure",
        Layer.BEHAVIOUR,
        fail_rate,
        metric="format_failure_rate",
        warning=FORMAT_FAILURE_WARNING,
        what=FORMAT_WHAT,
        evidence=refs(failed, EVIDENCE_MAX),
    )
    spam = graded(
        "behaviour.multi_answer",
        Layer.BEHAVIOUR,
        multi_rate,
        metric="multi_answer_rate",
        warning=MULTI_ANSWER_WARNING,
        what=MULTI_WHAT,
        evidence=refs(multi, EVIDENCE_MAX),
    )
    never = graded(
        "behaviour.format_never_written",
        Layer.BEHAVIOUR,
        written_rate,
        metric="answer_written_rate",
        warning=None,
        critical=NEVER_WRITTEN_CRITICAL,
        above=False,
        what=NEVER_WRITTEN_WHAT,
        evidence=refs(failed, EVIDENCE_MAX),
        numbers={"single_turn_responses": float(single.height), "ended_on_their_own": float(ended)},
        inconclusive=_never_inconclusive(single.height, ended) if protocol_declared else "",
    )
    runs_past = graded(
        "behaviour.runs_past_answer",
        Layer.BEHAVIOUR,
        past_rate,
        metric="runs_past_answer_rate",
        warning=RUNS_PAST_ANSWER_WARNING,
        critical=RUNS_PAST_ANSWER_CRITICAL,
        what=RUNS_PAST_WHAT,
        evidence=refs(past, EVIDENCE_MAX),
        numbers={"answered_then_cut": float(past.height), "answered": float(written.height)},
    )
    if not protocol_declared:
        fail, spam = _not_evaluated(fail, FORMAT_WHAT), _not_evaluated(spam, MULTI_WHAT)
        never, runs_past = _not_evaluated(never, NEVER_WRITTEN_WHAT), _not_evaluated(runs_past, RUNS_PAST_WHAT)
    empty_finding = graded(
        "behaviour.empty_response",
        Layer.BEHAVIOUR,
        empty_rate,
        metric="empty_response_rate",
        warning=EMPTY_WARNING,
        what="empty responses",
        evidence=refs(empty, EVIDENCE_MAX),
    )
    return LayerOutput((fail, spam, never, runs_past, empty_finding), metrics)


def _never_inconclusive(responses: int, ended: int) -> str:
    """Why "never writes the format" cannot be judged: too few responses, or nearly all cut at the token cap
    (an answer cut off is a length problem: `behaviour.truncation`)."""
    if responses < NEVER_WRITTEN_MIN:
        return f"{responses} single-turn responses, fewer than {NEVER_WRITTEN_MIN}"
    if ended < START_MIN:
        return f"only {ended} of {responses} responses ended before the token cap (see behaviour.truncation)"
    return ""


def _start_written_rate(single: pl.DataFrame) -> float:
    """The share of the responses that ended on their own (not at the token cap) in the run's first steps that
    hold an answer: whether the policy the run started from writes the format at all. Cut responses are left
    out (a length budget too small cuts answers off: a longer budget, not a warm start, is the fix). Read over
    the first steps holding `START_MIN` such responses; NaN when the whole run holds fewer."""
    ended = single.filter(~pl.col("cut"))
    if ended.height < START_MIN:
        return math.nan
    per_step = ended.group_by("step").agg(pl.len().alias("n"), (pl.col("answers") > 0).sum().alias("w")).sort("step")
    first = per_step.filter(pl.col("n").cum_sum().shift(1, fill_value=0) < START_MIN)
    return float(first["w"].sum()) / float(first["n"].sum())


def _not_evaluated(finding: Finding, what: str) -> Finding:
    return Finding(
        alert_id=finding.alert_id,
        layer=finding.layer,
        severity=finding.severity,
        message=f"{what}: {NO_ANSWER_PROTOCOL}",
        value=finding.value,
        threshold=finding.threshold,
        rule=finding.rule,
    )


def diagnose_model_state(rows: pl.DataFrame) -> LayerOutput:
    """Mean token logprob: close to 0 means the policy stopped exploring (paper §6.1 dimension 4).

    Where responses carry strict scores, the rule reads the strict-wrong ones (`wrong_mean_logprob`): a
    policy that is confidently *right* has nothing left to explore (a tiny model at 94% on the demo task
    samples its answers near-deterministically), one that is confidently *wrong* has collapsed. The
    paper's rule reads all tokens; that remains the fallback without strict scores.
    """
    logprob = pl.col("mean_logprob")
    wrong_mask = pl.col("strict_score").is_not_null() & (pl.col("strict_score") < STRICT_CORRECT)
    n_values, n_wrong, mean, wrong = aggregate(
        rows,
        logprob.count().alias("n"),
        logprob.filter(wrong_mask).count().alias("n_wrong"),
        logprob.mean().alias("mean"),
        logprob.filter(wrong_mask).mean().alias("wrong"),
    )
    mean = math.nan if mean is None else float(mean)
    wrong_mean = float(wrong) if n_wrong >= MIN_WRONG_FOR_LOGPROB else math.nan
    graded_on_wrong = not math.isnan(wrong_mean)
    finding = graded(
        "behaviour.exploration_collapse",
        Layer.BEHAVIOUR,
        wrong_mean if graded_on_wrong else mean,
        metric="wrong_mean_logprob" if graded_on_wrong else "mean_logprob",
        warning=LOGPROB_WARNING,
        critical=LOGPROB_CRITICAL,
        what="exploration collapse (near-deterministic sampling" + (" of wrong answers)" if graded_on_wrong else ")"),
        numbers={"n": float(n_values), "n_wrong": float(n_wrong), "mean_logprob": mean},
    )
    return LayerOutput((finding,), {"mean_logprob": mean, "wrong_mean_logprob": wrong_mean})


def diagnose_behaviour(rows: pl.DataFrame, protocol_declared: bool) -> LayerOutput:
    """Run every behaviour-layer rule over (training) rows; `protocol_declared` says whether answers were read."""
    return LayerOutput.merge(
        [
            diagnose_truncation(rows),
            diagnose_length(rows),
            diagnose_degeneration(rows),
            diagnose_format(rows, protocol_declared),
            diagnose_model_state(rows),
        ]
    )


def stop_shares_per_step(rows: pl.DataFrame) -> dict[str, list[tuple[int, float]]]:
    """The share of each stop reason among the rollouts of each step, as `{reason: [(step, share), ...]}`.

    What a run's responses ran into over training: the end-of-turn token (``eos``), the token cap
    (``length``), and for agentic episodes the answer, the turn cap, abandonment, tool errors, echo traps.
    Reasons in `StopReason` order; {} when the rows hold fewer than two reasons (one flat line says nothing).
    """
    if not rows.height or "stop_reason" not in rows.columns:
        return {}
    counts = (
        rows.lazy()
        .select("step", reason=pl.col("stop_reason").cast(pl.String))
        .group_by("step", "reason")
        .agg(n=pl.len())
        .with_columns(share=pl.col("n") / pl.col("n").sum().over("step"))
        .collect()
    )
    present = set(counts["reason"].to_list())
    reasons = [r.value for r in StopReason if r.value in present]
    if len(reasons) < 2:
        return {}
    steps = sorted(set(counts["step"].to_list()))
    share = {(int(st), str(r)): float(v) for st, r, v in counts.select("step", "reason", "share").iter_rows()}
    return {r: [(int(st), share.get((int(st), r), 0.0)) for st in steps] for r in reasons}


@dataclass(frozen=True)
class StepStops:
    """One training step's responses: how many, their mean length, and the share of each stop reason."""

    step: int
    n: int
    length_mean: float  # tokens where the backend recorded them, else whitespace words (`diagnostics/features.py`)
    shares: dict[str, float] = field(default_factory=dict)  # stop reason -> share, in `StopReason` order


def stops_by_step(rows: pl.DataFrame, limit: int = 12) -> list[StepStops]:
    """Per-step stop reasons and lengths of the training rows, for at most `limit` steps spread over the run
    (always the first and the last): what `evotrainer diagnose` prints under "stops per training step"."""
    if not rows.height or "stop_reason" not in rows.columns:
        return []
    per = (
        rows.lazy()
        .select("step", "length", reason=pl.col("stop_reason").cast(pl.String))
        .group_by("step")
        .agg(n=pl.len(), length_mean=pl.col("length").cast(pl.Float64).mean(), reasons=pl.col("reason"))
        .sort("step")
        .collect()
    )
    picked = list(range(per.height))
    if per.height > limit > 1:
        picked = sorted({round(i * (per.height - 1) / (limit - 1)) for i in range(limit)})
    order = [r.value for r in StopReason]
    out = []
    for i in picked:
        step, n, length_mean, reasons = per.row(i)
        counts = {r: reasons.count(r) for r in order if r in reasons}
        out.append(StepStops(int(step), int(n), float(length_mean or 0.0), {r: c / n for r, c in counts.items()}))
    return out
