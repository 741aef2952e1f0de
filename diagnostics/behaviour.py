"""Behaviour layer: truncation, length dynamics, degeneration, format failures, model state, agentic turns.

Pure functions over `Rollout` records (paper §6.1 dimensions 2–4, §6.2, §6.3 rule 2, §10). Text checks are
domain-agnostic: tokens are whitespace-separated words when `response_tokens` is missing, answer tags are
the common ones (`<ans>`, `<answer>`, `\\boxed{}`, `####`). Agentic rules run only when some rollout has
more than one turn or a tool call.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from diagnostics.findings import Finding, Layer, LayerOutput, graded, rollout_ref
from diagnostics.schema import Rollout, StopReason
from diagnostics.score import HACK_STRICT_FLAT, STRICT_CORRECT, per_step_mean, trend

# Paper §6.1 (Coding): truncation > 15% WARNING.
TRUNCATION_WARNING = 0.15
# Paper §6.1 (Math): corr(length, reward) > 0.3 = length gaming.
LENGTH_CORR_WARNING = 0.30
# Paper §6.3 anti-patterns: ~3x length with no score gain = length gaming.
LENGTH_GROWTH_WARNING = 3.0
# Degeneration (paper §6.2 bigram_repetition_rate; template collapse): a response is degenerate when its
# bigram repetition exceeds this (with enough bigrams), a token repeats this many times in a row, or a
# character repeats this many times in a row.
BIGRAM_REPETITION_DEGENERATE = 0.5
BIGRAM_MIN = 8
TOKEN_RUN_DEGENERATE = 8
CHAR_RUN_DEGENERATE = 20
DEGENERATE_WARNING = 0.10
# Paper §6.1 (Coding): FmtFail > 30% = misconfigured format gate.
FORMAT_FAILURE_WARNING = 0.30
MULTI_ANSWER_WARNING = 0.05
EMPTY_WARNING = 0.05
# Paper §6.1 dimension 4: mean token logprob > -0.05 CRITICAL (exploration collapse), > -0.1 WARNING.
LOGPROB_WARNING = -0.10
LOGPROB_CRITICAL = -0.05
MIN_WRONG_FOR_LOGPROB = 20  # strict-wrong samples needed to grade collapse on them (else all samples)
# Agentic (paper §6.1 dim 3, §8, §10): one-turn exits without tools; echo trap (> 60 turns, no reward).
ABANDON_MAX_TURNS = 1
ABANDON_WARNING = 0.20
ABANDON_CRITICAL = 0.50
ECHO_TRAP_TURNS = 60
ECHO_TRAP_WARNING = 0.10
# Paper §6.3 rule 2: turns rising for 3 eval steps, or failed rollouts' turns > 1.5 x mean.
TURNS_RISING_STEPS = 3
FAILED_TURNS_RATIO = 1.5
EVIDENCE_MAX = 5

ANSWER_RE = re.compile(r"<ans>(.*?)</ans>|<answer>(.*?)</answer>|\\boxed\{([^}]*)\}|^####\s*(\S.*)$", re.S | re.M)
TAG_HINT_RE = re.compile(r"<ans>|<answer>|\\boxed|####")
_CHAR_RUN_RE = re.compile(r"(\S)\1{" + str(CHAR_RUN_DEGENERATE - 1) + ",}")


def _ref(r: Rollout) -> str:
    return rollout_ref(r.run_id, r.step, r.prompt_id, r.sample_index)


def response_length(r: Rollout) -> int:
    """Return `response_tokens`, or the whitespace word count when the backend did not record tokens."""
    return r.response_tokens if r.response_tokens > 0 else len(r.response.split())


def is_truncated(r: Rollout) -> bool:
    """Return True when the response hit the length cap."""
    return r.truncated or r.stop_reason is StopReason.LENGTH


def answers(text: str) -> list[str]:
    """Return the tagged answers in `text` (all supported tag styles), stripped."""
    return [next(g for g in m.groups() if g is not None).strip() for m in ANSWER_RE.finditer(text)]


def repetition(text: str) -> tuple[float, int, bool]:
    """Return `(bigram_repetition_rate, longest_same_token_run, has_long_char_run)` of one response."""
    tokens = text.split()
    bigrams = list(itertools.pairwise(tokens))
    rep = 1.0 - len(set(bigrams)) / len(bigrams) if len(bigrams) >= BIGRAM_MIN else 0.0
    longest = run = 1 if tokens else 0
    for prev, cur in itertools.pairwise(tokens):
        run = run + 1 if cur == prev else 1
        longest = max(longest, run)
    return rep, longest, _CHAR_RUN_RE.search(text) is not None


def is_degenerate(text: str) -> bool:
    """Return True when a response is repetitive spam (see the thresholds above)."""
    rep, run, char_run = repetition(text)
    return rep > BIGRAM_REPETITION_DEGENERATE or run >= TOKEN_RUN_DEGENERATE or char_run


def _rate(rollouts: Sequence[Rollout], hits: Sequence[Rollout]) -> float:
    return len(hits) / len(rollouts) if rollouts else math.nan


def diagnose_truncation(rollouts: Sequence[Rollout]) -> LayerOutput:
    """Truncation rate and stop-reason shares."""
    cut = [r for r in rollouts if is_truncated(r)]
    rate = _rate(rollouts, cut)
    reasons = Counter(r.stop_reason.value for r in rollouts)
    metrics = {"truncation_rate": rate}
    metrics.update({f"stop_reason/{s.value}": reasons[s.value] / len(rollouts) for s in StopReason if rollouts})
    strict_cut = [r for r in cut if r.strict_score is not None]
    finding = graded(
        "behaviour.truncation",
        Layer.BEHAVIOUR,
        rate,
        metric="truncation_rate",
        warning=TRUNCATION_WARNING,
        what="responses cut at the length cap (length budget bottleneck)",
        evidence=[_ref(r) for r in cut[:EVIDENCE_MAX]],
        numbers={"truncated": float(len(cut)), "truncated_with_strict": float(len(strict_cut))},
    )
    return LayerOutput((finding,), metrics)


def diagnose_length(rollouts: Sequence[Rollout]) -> LayerOutput:
    """Length distribution, corr(length, reward) and length growth over the run (length gaming)."""
    lengths = np.array([response_length(r) for r in rollouts], dtype=np.float64)
    rewards = np.array([r.reward for r in rollouts], dtype=np.float64)
    if len(rollouts) >= 3 and lengths.std() > 0 and rewards.std() > 0:
        corr = float(np.corrcoef(lengths, rewards)[0, 1])
    else:
        corr = math.nan
    by_step: dict[int, list[float]] = {}
    for r, n in zip(rollouts, lengths, strict=True):
        by_step.setdefault(r.step, []).append(float(n))
    step_means = [float(np.mean(v)) for _, v in sorted(by_step.items())]
    first, last, _ = trend(step_means)
    growth = last / first if first and not math.isnan(first) else math.nan
    _, _, strict_delta = trend([v for _, v in per_step_mean(rollouts, strict=True)])
    metrics = {
        "response_length_mean": float(lengths.mean()) if len(lengths) else math.nan,
        "response_length_p50": float(np.percentile(lengths, 50)) if len(lengths) else math.nan,
        "response_length_p90": float(np.percentile(lengths, 90)) if len(lengths) else math.nan,
        "length_reward_corr": corr,
        "length_growth_ratio": growth,
    }
    longest = [rollouts[i] for i in np.argsort(-lengths)[:EVIDENCE_MAX]] if len(lengths) else []
    corr_finding = graded(
        "behaviour.length_reward_corr",
        Layer.BEHAVIOUR,
        corr,
        metric="length_reward_corr",
        warning=LENGTH_CORR_WARNING,
        what="length gaming: longer responses earn more reward",
        evidence=[_ref(r) for r in longest],
        numbers={"n": float(len(rollouts))},
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
        evidence=[_ref(r) for r in longest],
        numbers={"length_growth_ratio": growth, "strict_acc_delta": strict_delta},
    )
    return LayerOutput((corr_finding, growth_finding), metrics)


def diagnose_degeneration(rollouts: Sequence[Rollout]) -> LayerOutput:
    """Repetition and degeneration: bigram repetition, repeated-token and repeated-character runs."""
    reps = [repetition(r.response) for r in rollouts]
    bad = [
        r
        for r, (rep, run, char_run) in zip(rollouts, reps, strict=True)
        if rep > BIGRAM_REPETITION_DEGENERATE or run >= TOKEN_RUN_DEGENERATE or char_run
    ]
    rate = _rate(rollouts, bad)
    metrics = {
        "bigram_repetition_rate": float(np.mean([x[0] for x in reps])) if reps else math.nan,
        "degenerate_rate": rate,
    }
    finding = graded(
        "behaviour.degeneration",
        Layer.BEHAVIOUR,
        rate,
        metric="degenerate_rate",
        warning=DEGENERATE_WARNING,
        what="repetitive or degenerate responses (answer spam, repeated tokens)",
        evidence=[_ref(r) for r in bad[:EVIDENCE_MAX]],
    )
    return LayerOutput((finding,), metrics)


def diagnose_format(rollouts: Sequence[Rollout]) -> LayerOutput:
    """Format failures (no tagged answer), several answers in one response, and empty responses.

    The tag rules apply to single-turn rollouts of a domain that uses answer tags (some prompt or response
    mentions one); otherwise they report "no data" rather than flag every response.
    """
    single = [r for r in rollouts if r.num_turns <= 1 and r.tool_calls == 0]
    uses_tags = any(TAG_HINT_RE.search(r.prompt) or TAG_HINT_RE.search(r.response) for r in single)
    parsed = [(r, answers(r.response)) for r in single] if uses_tags else []
    failed = [r for r, a in parsed if not any(a)]
    multi = [r for r, a in parsed if len(a) > 1]
    empty = [r for r in rollouts if not r.response.strip()]
    fail_rate = _rate(single, failed) if parsed else math.nan
    multi_rate = _rate(single, multi) if parsed else math.nan
    empty_rate = _rate(rollouts, empty)
    metrics = {"format_failure_rate": fail_rate, "multi_answer_rate": multi_rate, "empty_response_rate": empty_rate}
    findings = (
        graded(
            "behaviour.format_failure",
            Layer.BEHAVIOUR,
            fail_rate,
            metric="format_failure_rate",
            warning=FORMAT_FAILURE_WARNING,
            what="responses without a (non-empty) tagged answer",
            evidence=[_ref(r) for r in failed[:EVIDENCE_MAX]],
        ),
        graded(
            "behaviour.multi_answer",
            Layer.BEHAVIOUR,
            multi_rate,
            metric="multi_answer_rate",
            warning=MULTI_ANSWER_WARNING,
            what="responses giving several candidate answers (answer spam)",
            evidence=[_ref(r) for r in multi[:EVIDENCE_MAX]],
        ),
        graded(
            "behaviour.empty_response",
            Layer.BEHAVIOUR,
            empty_rate,
            metric="empty_response_rate",
            warning=EMPTY_WARNING,
            what="empty responses",
            evidence=[_ref(r) for r in empty[:EVIDENCE_MAX]],
        ),
    )
    return LayerOutput(findings, metrics)


def diagnose_model_state(rollouts: Sequence[Rollout]) -> LayerOutput:
    """Mean token logprob: close to 0 means the policy stopped exploring (paper §6.1 dimension 4).

    Where responses carry strict scores, the rule reads the strict-wrong ones (`wrong_mean_logprob`): a
    policy that is confidently *right* has nothing left to explore (a tiny model at 94% on arithmetic
    samples its answers near-deterministically), one that is confidently *wrong* has collapsed. The
    paper's rule reads all tokens; that remains the fallback without strict scores.
    """
    values = [r.mean_logprob for r in rollouts if r.mean_logprob is not None]
    wrong = [
        r.mean_logprob
        for r in rollouts
        if r.mean_logprob is not None and r.strict_score is not None and r.strict_score < STRICT_CORRECT
    ]
    mean = float(np.mean(values)) if values else math.nan
    wrong_mean = float(np.mean(wrong)) if len(wrong) >= MIN_WRONG_FOR_LOGPROB else math.nan
    graded_on_wrong = not math.isnan(wrong_mean)
    finding = graded(
        "behaviour.exploration_collapse",
        Layer.BEHAVIOUR,
        wrong_mean if graded_on_wrong else mean,
        metric="wrong_mean_logprob" if graded_on_wrong else "mean_logprob",
        warning=LOGPROB_WARNING,
        critical=LOGPROB_CRITICAL,
        what="exploration collapse (near-deterministic sampling" + (" of wrong answers)" if graded_on_wrong else ")"),
        numbers={"n": float(len(values)), "n_wrong": float(len(wrong)), "mean_logprob": mean},
    )
    return LayerOutput((finding,), {"mean_logprob": mean, "wrong_mean_logprob": wrong_mean})


def _rising(series: Sequence[float], steps: int) -> bool:
    tail = series[-(steps + 1) :]
    return len(tail) == steps + 1 and all(b > a for a, b in itertools.pairwise(tail))


def diagnose_agentic(rollouts: Sequence[Rollout]) -> LayerOutput:
    """Turns and tool calls: abandonment (one-turn exits), echo trap, rising turns (paper §6.3 rule 2, §10)."""
    if not any(r.num_turns > 1 or r.tool_calls > 0 for r in rollouts):
        return LayerOutput((), {})
    turns = np.array([r.num_turns for r in rollouts], dtype=np.float64)
    abandon = [r for r in rollouts if r.num_turns <= ABANDON_MAX_TURNS and r.tool_calls == 0]
    echo = [r for r in rollouts if r.num_turns > ECHO_TRAP_TURNS and r.reward <= 0]
    failed_turns = [r.num_turns for r in rollouts if r.reward <= 0]
    failed_ratio = float(np.mean(failed_turns)) / float(turns.mean()) if failed_turns and turns.mean() > 0 else math.nan
    by_step: dict[int, list[int]] = {}
    for r in rollouts:
        by_step.setdefault(r.step, []).append(r.num_turns)
    step_turns = [float(np.mean(v)) for _, v in sorted(by_step.items())]
    rising = _rising(step_turns, TURNS_RISING_STEPS)
    metrics = {
        "turns_mean": float(turns.mean()),
        "turns_p90": float(np.percentile(turns, 90)),
        "tool_calls_mean": float(np.mean([r.tool_calls for r in rollouts])),
        "abandon_rate": _rate(rollouts, abandon),
        "echo_trap_rate": _rate(rollouts, echo),
        "failed_turns_ratio": failed_ratio,
    }
    findings: list[Finding] = [
        graded(
            "behaviour.abandonment",
            Layer.BEHAVIOUR,
            metrics["abandon_rate"],
            metric="abandon_rate",
            warning=ABANDON_WARNING,
            critical=ABANDON_CRITICAL,
            what=f"one-turn exits without tool use (<= {ABANDON_MAX_TURNS} turn, 0 tool calls)",
            evidence=[_ref(r) for r in abandon[:EVIDENCE_MAX]],
        ),
        graded(
            "behaviour.echo_trap",
            Layer.BEHAVIOUR,
            metrics["echo_trap_rate"],
            metric="echo_trap_rate",
            warning=ECHO_TRAP_WARNING,
            what=f"echo trap: > {ECHO_TRAP_TURNS} turns with no reward",
            evidence=[_ref(r) for r in echo[:EVIDENCE_MAX]],
        ),
        graded(
            "behaviour.failed_turns",
            Layer.BEHAVIOUR,
            failed_ratio,
            metric="mean turns of unrewarded / mean turns",
            warning=FAILED_TURNS_RATIO,
            what="echo-trap precursor: failed rollouts run much longer",
        ),
        graded(
            "behaviour.turns_rising",
            Layer.BEHAVIOUR,
            1.0 if rising else (0.0 if len(step_turns) > TURNS_RISING_STEPS else math.nan),
            metric=f"mean turns rose {TURNS_RISING_STEPS} steps in a row",
            warning=0.5,
            what="echo-trap precursor: mean turns keep rising",
            numbers={f"turns_step_{i}": v for i, v in enumerate(step_turns[-(TURNS_RISING_STEPS + 1) :])},
        ),
    ]
    return LayerOutput(tuple(findings), metrics)


def diagnose_behaviour(rollouts: Sequence[Rollout]) -> LayerOutput:
    """Run every behaviour-layer rule."""
    return LayerOutput.merge(
        [
            diagnose_truncation(rollouts),
            diagnose_length(rollouts),
            diagnose_degeneration(rollouts),
            diagnose_format(rollouts),
            diagnose_model_state(rollouts),
            diagnose_agentic(rollouts),
        ]
    )
