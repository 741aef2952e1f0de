"""Pure grading of a backtest: a candidate's rewards (and filter, length budget) replayed on cached rollouts.

The I/O adapter (`sandboxes/backtest.py`) runs the candidate code in a sandbox and hands this module the
numbers; nothing here runs code or reads files. Checks (paper §7): reward distribution shift, dead groups
rescued, rank-order violations against strict correctness, agreement with the protected strict evaluator,
successful responses a shorter length budget would cut, kept-sample ratio after the group filter, and the
hack-corpus score.

Agreement with the strict evaluator: over the cached rollouts that carry a strict score, a
reward *pays* a response when it rewards it above the midpoint of its range on these rollouts (from
min(0, lowest reward) to the highest; a reward that never varies above 0 pays nothing). The report gives
the share of strict-wrong responses the reward pays and of strict-right ones it fails, for the candidate
and for the incumbent (the cached rewards); a candidate reward that disagrees with the strict evaluator on
more responses than the incumbent's (by more than `AGREEMENT_SLACK` of them: a handful of odd responses,
such as an answer with a stray space that a declared protocol strips and an evaluator's regex refuses, is
no evidence against a reward) is refused before training, with both sets of numbers.

Verdict: FAIL when the hack corpus is rewarded, rank violations increase, the reward disagrees with the
strict evaluator more than the incumbent's, or the filter keeps < 50% of the samples; INCONCLUSIVE with
fewer than `MIN_GROUPS` groups; PASS otherwise. Candidate code that crashed or hung yields a result with
that `outcome` (classified, never a fake score) and verdict FAIL; an infrastructure failure yields
INCONCLUSIVE.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from diagnostics.groups import KEPT_LIVE_WARNING
from diagnostics.hack_corpus import HackCorpusScore
from diagnostics.schema import Rollout
from diagnostics.score import STRICT_CORRECT, rank_violations
from diagnostics.signal import DEAD_STD, GroupKey, group_rollouts
from harness.failures import Outcome, recorded

MIN_GROUPS = 8
KEPT_RATIO_MIN = KEPT_LIVE_WARNING  # one bar for the backtest and the report's signal.filter_drops_signal
AGREEMENT_SLACK = 0.01  # share of strict-scored responses a candidate may disagree on beyond the incumbent
# The disagreement a probe aimed at one of these alerts must reduce on the cached rollouts: the
# strict-wrong responses the reward pays, or the strict-right ones it fails.
PAID_WRONG, FAILED_RIGHT = "paid_wrong", "failed_right"
MUST_FALL = {
    "score.rewarded_wrong": PAID_WRONG,
    "score.misranked_groups": PAID_WRONG,
    "score.reward_hacking": PAID_WRONG,
    "version.reward_hacking": PAID_WRONG,
    "score.unrewarded_correct": FAILED_RIGHT,
}


class Verdict(enum.StrEnum):
    """What the backtest predicts for the candidate."""

    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True, slots=True)
class StepBatch:
    """The groups of one training step in filter-call order: keys and the candidate's rewards per group."""

    step: int
    keys: tuple[GroupKey, ...]
    group_rewards: tuple[tuple[float, ...], ...]


@dataclass(frozen=True, slots=True)
class BacktestMetrics:
    """The numbers a backtest measured (before = cached rewards, after = the candidate's)."""

    n_rollouts: int
    n_groups: int
    reward_mean_before: float
    reward_std_before: float
    reward_mean_after: float
    reward_std_after: float
    dead_groups_before: int
    dead_groups_after: int
    dead_ratio_before: float
    dead_ratio_after: float
    groups_rescued: int
    groups_killed: int
    n_groups_with_strict: int
    rank_pairs: int
    rank_violations_before: int
    rank_violations_after: int
    rank_ties_after: int
    successes: int
    max_new_tokens_before: int | None
    max_new_tokens_after: int | None
    newly_truncated: int
    cut_successes: int
    kept_groups: int | None
    kept_sample_ratio: float | None
    kept_live_ratio: float | None  # kept share of samples in groups with reward variance (dead ones carry no signal)
    hack_max_score: float | None
    # Agreement with the strict evaluator (None in reports written before it was measured).
    n_strict: int | None = None
    strict_wrong: int | None = None
    strict_wrong_paid_before: int | None = None
    strict_wrong_paid_after: int | None = None
    strict_right_failed_before: int | None = None
    strict_right_failed_after: int | None = None

    @property
    def strict_disagreements(self) -> tuple[int, int] | None:
        """(incumbent, candidate) responses on which the reward and the strict evaluator disagree."""
        if self.n_strict is None or not self.n_strict:
            return None
        before = (self.strict_wrong_paid_before or 0) + (self.strict_right_failed_before or 0)
        after = (self.strict_wrong_paid_after or 0) + (self.strict_right_failed_after or 0)
        return before, after


# BacktestMetrics fields a report may lack (written before they existed): read back as None.
_LATER_FIELDS = frozenset(
    {
        "n_strict",
        "strict_wrong",
        "strict_wrong_paid_before",
        "strict_wrong_paid_after",
        "strict_right_failed_before",
        "strict_right_failed_after",
    }
)


@dataclass(frozen=True, slots=True)
class BacktestResult:
    """A backtest's result: outcome class, verdict with reasons, and the evidence."""

    candidate: str
    outcome: Outcome
    verdict: Verdict
    reasons: tuple[str, ...]
    metrics: BacktestMetrics | None = None
    hack: HackCorpusScore | None = None
    message: str = ""
    error_path: str = ""

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict (NaN and infinities become null)."""
        metrics = None
        if self.metrics is not None:
            metrics = {
                k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in asdict(self.metrics).items()
            }
        return {
            "candidate": self.candidate,
            "outcome": self.outcome.value,
            "verdict": self.verdict.value,
            "reasons": list(self.reasons),
            "metrics": metrics,
            "hack": None if self.hack is None else self.hack.to_json(),
            "message": self.message,
            "error_path": self.error_path,
        }

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> BacktestResult:
        """Rebuild from `to_json` output; raises `KeyError`/`ValueError` on a malformed report."""
        metrics = None
        if row["metrics"] is not None:
            raw = row["metrics"]
            values: dict[str, Any] = {}
            for f in fields(BacktestMetrics):
                v = raw.get(f.name) if f.name in _LATER_FIELDS else raw[f.name]
                values[f.name] = math.nan if v is None and f.type == "float" else v
            metrics = BacktestMetrics(**values)
        return cls(
            candidate=str(row["candidate"]),
            outcome=Outcome(row["outcome"]),
            verdict=Verdict(row["verdict"]),
            reasons=tuple(str(r) for r in row["reasons"]),
            metrics=metrics,
            hack=None if row["hack"] is None else HackCorpusScore.from_json(row["hack"]),
            message=str(row["message"]),
            error_path=str(row["error_path"]),
        )


def step_batches(rollouts: Sequence[Rollout], new_rewards: Sequence[float]) -> list[StepBatch]:
    """Group the candidate's rewards by step and group, in the order the filter is called (step ascending)."""
    if len(rollouts) != len(new_rewards):
        raise ValueError(f"{len(new_rewards)} rewards for {len(rollouts)} rollouts")
    by_key: dict[GroupKey, list[float]] = {}
    for r, reward in zip(rollouts, new_rewards, strict=True):
        by_key.setdefault((r.step, r.group_id), []).append(float(reward))
    steps: dict[int, list[GroupKey]] = {}
    for key in by_key:
        steps.setdefault(key[0], []).append(key)
    return [StepBatch(step, tuple(keys), tuple(tuple(by_key[k]) for k in keys)) for step, keys in sorted(steps.items())]


def strict_disagreement(strict: np.ndarray, rewards: np.ndarray) -> tuple[int, int]:
    """Count `(strict-wrong responses paid, strict-right responses failed)` (see the module docstring).

    `strict[N]` and `rewards[N]` are aligned; the pay threshold is the midpoint of [min(0, lowest), highest].
    """
    if not len(rewards):
        return 0, 0
    low, high = min(0.0, float(rewards.min())), float(rewards.max())
    paid = rewards > (low + high) / 2 if high > low else np.zeros(len(rewards), dtype=bool)
    right = strict >= STRICT_CORRECT
    return int((paid & ~right).sum()), int((~paid & right).sum())


def _is_dead(rewards: np.ndarray) -> bool:
    return bool(rewards.std() < DEAD_STD)


def _measure(
    rollouts: Sequence[Rollout],
    new_rewards: Sequence[float],
    keep: Mapping[GroupKey, bool] | None,
    max_new_tokens_before: int | None,
    max_new_tokens_after: int | None,
    hack: HackCorpusScore | None,
) -> BacktestMetrics:
    after_by_id = {id(r): float(x) for r, x in zip(rollouts, new_rewards, strict=True)}
    groups = group_rollouts(rollouts)
    dead_before = dead_after = rescued = killed = with_strict = pairs = viol_b = viol_a = ties_a = 0
    kept_samples = kept_groups = live_samples = kept_live = 0
    for key, members in groups.items():
        before = np.array([r.reward for r in members])
        after = np.array([after_by_id[id(r)] for r in members])
        d_b, d_a = _is_dead(before), _is_dead(after)
        dead_before += d_b
        dead_after += d_a
        rescued += d_b and not d_a
        killed += d_a and not d_b
        if all(r.strict_score is not None for r in members):
            strict = np.array([r.strict_score for r in members], dtype=np.float64)
            with_strict += 1
            n_pairs, v_b, _ = rank_violations(strict, before)
            _, v_a, t_a = rank_violations(strict, after)
            pairs, viol_b, viol_a, ties_a = pairs + n_pairs, viol_b + v_b, viol_a + v_a, ties_a + t_a
        live_samples += 0 if d_a else len(members)
        if keep is not None and keep[key]:
            kept_groups += 1
            kept_samples += len(members)
            kept_live += 0 if d_a else len(members)
    successes = [r for r in rollouts if r.strict_score is not None and r.strict_score >= STRICT_CORRECT]
    newly_truncated = cut_successes = 0
    if max_new_tokens_after is not None and (
        max_new_tokens_before is None or max_new_tokens_after < max_new_tokens_before
    ):
        newly_truncated = sum(1 for r in rollouts if not r.truncated and r.response_tokens > max_new_tokens_after)
        cut_successes = sum(1 for r in successes if r.response_tokens > max_new_tokens_after)
    before_all = np.array([r.reward for r in rollouts], dtype=np.float64)
    after_all = np.array(list(new_rewards), dtype=np.float64)
    has_strict = np.array([r.strict_score is not None for r in rollouts], dtype=bool)
    strict_all = np.array([r.strict_score if r.strict_score is not None else 0.0 for r in rollouts])[has_strict]
    paid_b, failed_b = strict_disagreement(strict_all, before_all[has_strict])
    paid_a, failed_a = strict_disagreement(strict_all, after_all[has_strict])
    n, g = len(rollouts), len(groups)
    return BacktestMetrics(
        n_rollouts=n,
        n_groups=g,
        reward_mean_before=float(before_all.mean()) if n else math.nan,
        reward_std_before=float(before_all.std()) if n else math.nan,
        reward_mean_after=float(after_all.mean()) if n else math.nan,
        reward_std_after=float(after_all.std()) if n else math.nan,
        dead_groups_before=dead_before,
        dead_groups_after=dead_after,
        dead_ratio_before=dead_before / g if g else math.nan,
        dead_ratio_after=dead_after / g if g else math.nan,
        groups_rescued=rescued,
        groups_killed=killed,
        n_groups_with_strict=with_strict,
        rank_pairs=pairs,
        rank_violations_before=viol_b,
        rank_violations_after=viol_a,
        rank_ties_after=ties_a,
        successes=len(successes),
        max_new_tokens_before=max_new_tokens_before,
        max_new_tokens_after=max_new_tokens_after,
        newly_truncated=newly_truncated,
        cut_successes=cut_successes,
        kept_groups=kept_groups if keep is not None else None,
        kept_sample_ratio=(kept_samples / n if n else math.nan) if keep is not None else None,
        kept_live_ratio=(kept_live / live_samples if live_samples else math.nan) if keep is not None else None,
        hack_max_score=None if hack is None else hack.max_score,
        n_strict=int(has_strict.sum()),
        strict_wrong=int((strict_all < STRICT_CORRECT).sum()),
        strict_wrong_paid_before=paid_b,
        strict_wrong_paid_after=paid_a,
        strict_right_failed_before=failed_b,
        strict_right_failed_after=failed_a,
    )


def _verdict(
    m: BacktestMetrics,
    hack: HackCorpusScore | None,
    reward_changed: bool,
    filter_changed: bool,
    must_fall: Sequence[str] = (),
) -> tuple[Verdict, list[str]]:
    fails: list[str] = []
    notes: list[str] = []
    if reward_changed:
        fails += _disagreement_did_not_fall(m, must_fall)
    if hack is None:
        notes.append("no hack corpus exemplars (no problem to write them for): exploit resistance not checked")
    elif hack.passed:
        notes.append(
            f"hack corpus: {len(hack.per_item)} exploits, the most rewarded at {hack.max_score:.2f}x the correct "
            f"reference (<= {hack.threshold:.2f}x)"
        )
    elif not hack.passed and not reward_changed:
        # The candidate did not touch the reward: its exploitability is the incumbent's, not this change's.
        notes.append(
            f"reward unchanged from the incumbent; its hack-corpus exposure is pre-existing "
            f"(max {hack.max_score:.2f}) and not held against this candidate"
        )
    elif not hack.passed:
        if hack.unrewarded_references:
            fails.append(f"hack corpus: {hack.unrewarded_references} correct reference(s) got reward <= 0")
        worst = [s for s in hack.worst(3) if s.relative > hack.threshold]
        if worst:
            listed = ", ".join(f"{s.kind} ({s.relative:.2f}x)" for s in worst)
            fails.append(f"hack corpus rewarded above {hack.threshold:.2f}x the correct reference: {listed}")
    agreement = _strict_agreement(m)
    if agreement is not None and not reward_changed:
        notes.append(f"reward unchanged from the incumbent; {agreement}")
    elif agreement is not None and m.strict_disagreements is not None:
        before, after = m.strict_disagreements
        if after - before > AGREEMENT_SLACK * (m.n_strict or 0):
            fails.append(
                f"the reward disagrees with the strict evaluator more than the incumbent's ({before} -> {after} of "
                f"{m.n_strict} responses): {agreement}"
            )
        else:
            notes.append(f"strict agreement: {agreement}")
    if m.rank_violations_after > m.rank_violations_before:
        fails.append(
            f"rank violations against strict correctness increase: {m.rank_violations_before} -> "
            f"{m.rank_violations_after} of {m.rank_pairs} wrong/right pairs"
        )
    # Dropping a zero-variance group costs nothing (its GRPO advantage is 0): judge the filter on live groups.
    if m.kept_live_ratio is not None and m.kept_live_ratio < KEPT_RATIO_MIN and not filter_changed:
        notes.append(
            f"filter unchanged from the incumbent; it keeps {m.kept_live_ratio:.0%} of live samples "
            "(pre-existing, not held against this candidate)"
        )
    elif m.kept_live_ratio is not None and m.kept_live_ratio < KEPT_RATIO_MIN:
        fails.append(
            f"filter keeps {m.kept_live_ratio:.0%} of the samples in groups with reward variance "
            f"(< {KEPT_RATIO_MIN:.0%}; {m.kept_sample_ratio:.0%} of all samples)"
        )
    if m.n_groups_with_strict == 0:
        notes.append("no group carries strict scores: rank violations not checked")
    notes.append(
        f"dead groups {m.dead_groups_before} -> {m.dead_groups_after} of {m.n_groups} "
        f"({m.groups_rescued} rescued, {m.groups_killed} newly dead)"
    )
    notes.append(f"rank violations {m.rank_violations_before} -> {m.rank_violations_after} of {m.rank_pairs} pairs")
    if m.max_new_tokens_after is not None and m.newly_truncated:
        notes.append(
            f"max_new_tokens {m.max_new_tokens_before} -> {m.max_new_tokens_after} would cut {m.newly_truncated} "
            f"responses, {m.cut_successes} of them strict-correct"
        )
    if fails:
        return Verdict.FAIL, fails + notes
    if m.n_groups < MIN_GROUPS:
        return Verdict.INCONCLUSIVE, [f"only {m.n_groups} groups (< {MIN_GROUPS}): too few to judge", *notes]
    return Verdict.PASS, notes


def _disagreement_did_not_fall(m: BacktestMetrics, aims: Sequence[str]) -> list[str]:
    """Why a candidate reward aimed at a disagreement alert fails: it does not reduce that disagreement."""
    out = []
    counts = {
        PAID_WRONG: (m.strict_wrong_paid_before, m.strict_wrong_paid_after, "strict-wrong responses it pays"),
        FAILED_RIGHT: (m.strict_right_failed_before, m.strict_right_failed_after, "strict-right responses it fails"),
    }
    for kind in dict.fromkeys(MUST_FALL[a] for a in aims if a in MUST_FALL):
        before, after, what = counts[kind]
        if before is None or after is None:
            out.append(f"aimed at the reward's disagreement with the strict evaluator, but no cached rollout "
                       f"carries a strict score to show it fall ({what})")  # fmt: skip
        elif after >= before:
            named = ", ".join(a for a in aims if MUST_FALL.get(a) == kind)
            out.append(f"aimed at {named}, yet the {what} do not fall on the cached rollouts: {before} -> {after}")
    return out


def _strict_agreement(m: BacktestMetrics) -> str | None:
    """The strict-agreement numbers as one sentence, or None when no rollout carries a strict score."""
    if not m.n_strict or m.strict_wrong is None:
        return None
    wrong, right = m.strict_wrong, m.n_strict - m.strict_wrong

    def rate(count: int | None, of: int) -> str:
        return f"{(count or 0) / of:.1%} ({count or 0}/{of})" if of else "n/a (0/0)"

    return (
        f"pays {rate(m.strict_wrong_paid_after, wrong)} of strict-wrong responses and fails "
        f"{rate(m.strict_right_failed_after, right)} of strict-right ones (incumbent: pays "
        f"{rate(m.strict_wrong_paid_before, wrong)}, fails {rate(m.strict_right_failed_before, right)})"
    )


def grade_backtest(
    candidate: str,
    rollouts: Sequence[Rollout],
    new_rewards: Sequence[float],
    *,
    keep: Mapping[GroupKey, bool] | None = None,
    max_new_tokens_before: int | None = None,
    max_new_tokens_after: int | None = None,
    hack: HackCorpusScore | None = None,
    reward_changed: bool = True,
    filter_changed: bool = True,
    must_fall: Sequence[str] = (),
) -> BacktestResult:
    """Grade a candidate's rewards on cached rollouts (aligned one-to-one) and return the result.

    `keep` maps each `(step, group_id)` to the candidate filter's flag (None: the candidate has no filter).
    `reward_changed=False` / `filter_changed=False` (the candidate kept the incumbent's reward / filter)
    report a hack-corpus exposure / a low kept ratio as pre-existing instead of failing the candidate for it.
    `must_fall` are the critical alerts an exploration probe is aimed at: a changed reward aimed at one in
    `MUST_FALL` fails unless that disagreement falls on these rollouts (before any training is spent on it).

    Raises:
        ValueError: rewards do not align with rollouts, or `keep` misses a group.
    """
    if len(rollouts) != len(new_rewards):
        raise ValueError(f"{len(new_rewards)} rewards for {len(rollouts)} rollouts")
    if keep is not None:
        missing = set(group_rollouts(rollouts)) - set(keep)
        if missing:
            raise ValueError(f"filter flags missing for {len(missing)} groups, e.g. {sorted(missing)[0]}")
    metrics = _measure(rollouts, new_rewards, keep, max_new_tokens_before, max_new_tokens_after, hack)
    verdict, reasons = _verdict(metrics, hack, reward_changed, filter_changed, must_fall)
    return BacktestResult(candidate, Outcome.OK, verdict, tuple(reasons), metrics, hack)


def failed_backtest(candidate: str, outcome: Outcome, message: str, error_path: str = "") -> BacktestResult:
    """Return the result of a backtest whose candidate code (or infrastructure) failed; no numbers are faked."""
    assert outcome is not Outcome.OK, "a failed backtest needs a failure outcome"
    verdict = Verdict.INCONCLUSIVE if outcome is Outcome.INFRA_ERROR else Verdict.FAIL
    message = recorded(message)  # capped once, as a run's failure text is (trainer_backend.base.RunResult)
    return BacktestResult(
        candidate, outcome, verdict, (f"{outcome.value}: {message}",), None, None, message, error_path
    )
