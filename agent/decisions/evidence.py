"""The decision policy, in one place: outcome classes, keep / prune / revert / merge, replication, declines.

A higher training reward alone never promotes anything in `evotrainer` mode: the strict held-out score,
compared per prompt against a control run with a paired bootstrap (`diagnostics.stats`), decides
(`classify_outcome`; `classify_restoration` by non-inferiority for a candidate that only moves settings back
into their documented range), and a new hack alert (`diagnostics.findings.HACK_ALERT_IDS`) or new critical
alert turns an apparent improvement into `mixed`. The `score-only` baseline decides on the training reward
alone, as the paper's AutoResearch-style loop does.

Pure functions over typed records: `Evaluation` in, `DecisionInfo` (the graph state's record) out; the
`evaluate`, `decide` and `confirm` nodes only read artefacts and call these.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from agent.state import DecisionInfo, EvaluationInfo
from diagnostics.findings import HACK_ALERT_IDS, Finding, Severity, new_alerts
from diagnostics.signal import DEAD_CRITICAL, DEAD_UNSOLVED
from diagnostics.stats import PairedComparison, paired_bootstrap

if TYPE_CHECKING:
    import polars as pl

OutcomeClass = Literal["improvement", "regression", "mixed", "insufficient"]
# Score-only promotes when the final training reward beats the control's by more than this.
SCORE_ONLY_MARGIN = 0.0
# Fewer paired prompts than this is never evidence either way.
MIN_PAIRS = 5


def final_strict_scores(rows: pl.DataFrame) -> dict[str, float]:
    """Mean strict score per prompt at the last validation step that has strict scores (run-table rows)."""
    from diagnostics.score import strict_by_step

    by_step = strict_by_step(rows)
    return by_step[max(by_step)] if by_step else {}


def paired(control: Mapping[str, float], candidate: Mapping[str, float]) -> tuple[list[float], list[float]]:
    """Scores of the prompts both runs were evaluated on, in a stable order."""
    common = sorted(set(control) & set(candidate))
    return [control[p] for p in common], [candidate[p] for p in common]


def _dead_by_success(finding: Finding) -> bool:
    """A critical dead-group alert that is not critical once the solved dead groups are left out."""
    unsolved = finding.numbers.get(DEAD_UNSOLVED, math.nan)
    return finding.alert_id == "signal.dead_groups" and unsolved == unsolved and unsolved <= DEAD_CRITICAL


def classify_outcome(
    comparison: PairedComparison,
    alerts_new: Sequence[Finding],
    alerts_parent: Sequence[Finding],
    min_effect: float = 0.0,
) -> OutcomeClass:
    """Classify a candidate against its parent from paired strict scores and health alerts.

    `min_effect` is the smallest |delta| that counts: the per-prompt bootstrap does not see training-seed
    noise (two runs of the same harness with different seeds differ by several points), so a session sets
    it from that noise (`benchmarks/null_candidates.py`); a smaller delta is "insufficient" whatever its CI.

    - fewer than `MIN_PAIRS` pairs, |delta| < `min_effect`, or a CI that contains 0 -> "insufficient";
    - CI entirely below 0 -> "regression";
    - CI entirely above 0 with a new critical alert or any hack alert the parent did not have -> "mixed";
    - CI entirely above 0 otherwise -> "improvement".

    A new critical `signal.dead_groups` that would not be critical without the groups the strict evaluator
    scores all right (`dead_unsolved_ratio`) does not count: prompts the policy now solves every time are
    progress, not a lost learning signal (the agentic tool-spam repair: 0.910 -> 0.980 with 0.569 dead groups,
    nearly all of them solved, was "mixed").
    """
    if comparison.n < MIN_PAIRS or math.isnan(comparison.ci_low) or math.isnan(comparison.ci_high):
        return "insufficient"
    if abs(comparison.delta) < min_effect:
        return "insufficient"
    if comparison.ci_high < 0:
        return "regression"
    if comparison.ci_low > 0:
        return _improvement_unless_alarmed(alerts_new, alerts_parent)
    return "insufficient"


def classify_restoration(
    comparison: PairedComparison,
    alerts_new: Sequence[Finding],
    alerts_parent: Sequence[Finding],
    min_effect: float = 0.0,
) -> OutcomeClass:
    """Classify a candidate whose only change moves trainer settings from outside their documented safe range
    back into it (`agent.decisions.knobs.range_restoration`): non-inferiority instead of superiority.

    The backend's documentation is prior evidence that the old value is a misconfiguration, so the candidate
    needs to show no harm, not a gain above the noise floor: a defect whose cost builds up late (cold-sampling
    seed 1: the reset to the documented temperature gained +0.073, tied on a fresh seed, then gained +0.040, while
    the cold run ended 0.063 below the fixed harness at 160 steps) cannot pass `min_effect` within one pilot.

    - fewer than `MIN_PAIRS` pairs or a NaN CI -> "insufficient";
    - CI entirely below 0 -> "regression";
    - delta > 0 and a CI that reaches no lower than -`min_effect`: "mixed" with a new critical or hack alert
      (as in `classify_outcome`), else "improvement";
    - otherwise -> "insufficient".
    """
    if comparison.n < MIN_PAIRS or math.isnan(comparison.ci_low) or math.isnan(comparison.ci_high):
        return "insufficient"
    if comparison.ci_high < 0:
        return "regression"
    if comparison.delta > 0 and comparison.ci_low > -min_effect:
        return _improvement_unless_alarmed(alerts_new, alerts_parent)
    return "insufficient"


def _improvement_unless_alarmed(alerts_new: Sequence[Finding], alerts_parent: Sequence[Finding]) -> OutcomeClass:
    """Return "mixed" when the candidate brings a new critical alert (bar dead groups it solved) or hack alert."""
    critical = [f for f in new_alerts(alerts_new, alerts_parent, Severity.CRITICAL) if not _dead_by_success(f)]
    hacks = [f for f in new_alerts(alerts_new, alerts_parent, Severity.WARNING) if f.alert_id in HACK_ALERT_IDS]
    return "mixed" if critical or hacks else "improvement"


@dataclass(frozen=True, kw_only=True)
class Evaluation:
    """Everything the decision needs about one candidate pilot (in the graph state as `EvaluationInfo`)."""

    candidate_id: str
    run_ok: bool
    message: str
    comparison: PairedComparison | None
    outcome_class: str  # improvement | regression | mixed | insufficient
    train_reward: float
    control_train_reward: float
    new_alerts: tuple[str, ...] = ()
    restoration: bool = False  # only moves settings back into their documented range: non-inferiority decides

    @classmethod
    def failed(cls, candidate_id: str, why: str, train_reward: float, control_train_reward: float) -> Evaluation:
        """A pilot that yields no comparison (its run failed, the control failed, no scores): insufficient."""
        return cls(candidate_id=candidate_id, run_ok=False, message=why, comparison=None,
                   outcome_class="insufficient", train_reward=train_reward,
                   control_train_reward=control_train_reward)  # fmt: skip

    def to_state(self, iteration: int) -> EvaluationInfo:
        """The graph state's record of this evaluation."""
        cmp = self.comparison
        return EvaluationInfo(
            iteration=iteration,
            candidate_id=self.candidate_id,
            run_ok=self.run_ok,
            message=self.message,
            comparison=None if cmp is None else cmp.to_json(),
            outcome_class=self.outcome_class,
            train_reward=self.train_reward,
            control_train_reward=self.control_train_reward,
            new_alerts=list(self.new_alerts),
            restoration=self.restoration,
        )

    @classmethod
    def from_state(cls, row: EvaluationInfo) -> Evaluation:
        """Read an evaluation back from the graph state."""
        cmp = row["comparison"]
        return cls(
            candidate_id=row["candidate_id"],
            run_ok=row["run_ok"],
            message=row["message"],
            comparison=PairedComparison(**cmp) if cmp else None,
            outcome_class=row["outcome_class"],
            train_reward=row["train_reward"],
            control_train_reward=row["control_train_reward"],
            new_alerts=tuple(row["new_alerts"]),
            restoration=bool(row.get("restoration", False)),
        )


# What a restoration's rationale says about the rule it was decided by.
RESTORATION_RULE = (
    "restores settings to their documented range, or repairs a reward defect its backtest showed: decided by "
    "non-inferiority (a gain, with the 95% CI above -min_effect)"
)


def decide(evaluations: Sequence[Evaluation], mode: str) -> list[DecisionInfo]:
    """Keep / prune / revert / merge each candidate; at most one merge (the best) per iteration.

    evotrainer mode: improvement → keep (the largest strict delta → merge); regression → revert;
    mixed / insufficient / failed run → prune. score-only mode: the highest training reward above the
    control's → merge, every other candidate → revert.
    """
    if mode == "score-only":
        return _decide_score_only(evaluations)
    decisions = []
    for ev in evaluations:
        if not ev.run_ok:
            decisions.append(_decision(ev, "prune", "insufficient", f"pilot failed: {ev.message}"))
            continue
        cmp = ev.comparison
        assert cmp is not None, f"{ev.candidate_id}: a finished pilot must have a comparison"
        evidence = (
            f"strict {cmp.mean_a:.3f} → {cmp.mean_b:.3f} (Δ {cmp.delta:+.3f}, 95% CI "
            f"[{cmp.ci_low:+.3f}, {cmp.ci_high:+.3f}], n={cmp.n}, Wilcoxon p={cmp.p_wilcoxon:.3g})"
        )
        if ev.new_alerts:
            evidence += f"; new alerts: {', '.join(ev.new_alerts)}"
        if ev.restoration:
            evidence += f"; {RESTORATION_RULE}"
        action = {"improvement": "keep", "regression": "revert"}.get(ev.outcome_class, "prune")
        decisions.append(_decision(ev, action, ev.outcome_class, evidence))
    improving = [d for d in decisions if d["decision"] == "keep"]
    if improving:
        best = max(improving, key=lambda d: (d["delta"], d["ci_low"]))
        best["decision"] = "merge"
    return decisions


def _decide_score_only(evaluations: Sequence[Evaluation]) -> list[DecisionInfo]:
    decisions = []
    for ev in evaluations:
        gain = ev.train_reward - ev.control_train_reward
        text = f"training reward {ev.control_train_reward:.3f} → {ev.train_reward:.3f} (Δ {gain:+.3f})"
        if not ev.run_ok:
            decisions.append(_decision(ev, "prune", "insufficient", f"pilot failed: {ev.message}"))
        else:
            outcome = "improvement" if gain > SCORE_ONLY_MARGIN else "regression"
            decisions.append(_decision(ev, "keep" if gain > SCORE_ONLY_MARGIN else "revert", outcome, text))
    kept = [d for d in decisions if d["decision"] == "keep"]
    if kept:
        max(kept, key=lambda d: d["train_gain"])["decision"] = "merge"
    for d in decisions:
        if d["decision"] == "keep":
            d["decision"] = "revert"
    return decisions


def _decision(ev: Evaluation, action: str, outcome: str, rationale: str) -> DecisionInfo:
    cmp = ev.comparison
    return DecisionInfo(
        candidate_id=ev.candidate_id,
        decision=action,
        outcome=outcome,
        delta=cmp.delta if cmp else 0.0,
        ci_low=cmp.ci_low if cmp else 0.0,
        ci_high=cmp.ci_high if cmp else 0.0,
        train_gain=ev.train_reward - ev.control_train_reward,
        rationale=rationale,
    )


@dataclass(frozen=True, kw_only=True)
class Replication:
    """A merge candidate re-trained with fresh seeds (candidate and control alike), pooled with the first pilot."""

    confirmed: bool
    pooled: PairedComparison | None
    replicate_deltas: tuple[float, ...]
    outcome_class: str  # classify_outcome of the pooled comparison
    evidence: str


def replicate_check(
    first: tuple[Mapping[str, float], Mapping[str, float]],
    replicates: Sequence[tuple[Mapping[str, float], Mapping[str, float]]],
    alerts_new: Sequence[Finding],
    alerts_control: Sequence[Finding],
    min_effect: float,
    restoration: bool = False,
) -> Replication:
    """Is an improvement seen on one training seed seen again on fresh seeds?

    The per-prompt bootstrap of one pilot pair sees evaluation noise but not training-seed noise (two
    runs of the same harness with different seeds differ by several points), so a lucky seed can pass
    it. Each replicate is a (control scores, candidate scores) pair trained on another seed from the
    same checkpoint. Confirmed when every replicate's delta is positive and the comparison of per-prompt
    means over all seeds (the paired bootstrap over prompts, each prompt's score averaged over seeds) is
    still an "improvement" under `classify_outcome` with `min_effect` and the replicate runs' alerts.

    A `restoration` (a candidate that only moves settings back into their documented range) is held to
    non-inferiority instead: every replicate's delta at least 0, and the pooled comparison an "improvement"
    under `classify_restoration`.
    """
    pairs = [first, *replicates]
    common = sorted(set.intersection(*(set(c) & set(k) for c, k in pairs)))
    deltas = []
    for control, cand in replicates:
        a, b = paired(control, cand)
        deltas.append(sum(b) / len(b) - sum(a) / len(a) if a else float("nan"))
    if not common or not replicates:
        why = "no replicate scores to compare"
        return Replication(confirmed=False, pooled=None, replicate_deltas=tuple(deltas), outcome_class="insufficient",
                           evidence=why)  # fmt: skip
    a = [sum(c[p] for c, _ in pairs) / len(pairs) for p in common]
    b = [sum(k[p] for _, k in pairs) / len(pairs) for p in common]
    pooled = paired_bootstrap(a, b)
    classify = classify_restoration if restoration else classify_outcome
    outcome = classify(pooled, alerts_new, alerts_control, min_effect)
    held = all(d >= 0 for d in deltas) if restoration else all(d > 0 for d in deltas)
    confirmed = outcome == "improvement" and held
    shown = ", ".join(f"{d:+.3f}" for d in deltas)
    evidence = (
        f"replicated on {len(replicates)} more seed(s): Δ {shown}; pooled over {len(pairs)} seeds: strict "
        f"{pooled.mean_a:.3f} → {pooled.mean_b:.3f} (Δ {pooled.delta:+.3f}, 95% CI [{pooled.ci_low:+.3f}, "
        f"{pooled.ci_high:+.3f}], n={pooled.n}) → {outcome}"
    )
    return Replication(confirmed=confirmed, pooled=pooled, replicate_deltas=tuple(deltas), outcome_class=outcome,
                       evidence=evidence)  # fmt: skip


def apply_replication(decisions: Sequence[DecisionInfo], candidate_id: str, rep: Replication) -> list[DecisionInfo]:
    """The decisions after the merge candidate's replication: confirmed → merge on pooled evidence, else prune."""
    out = []
    for d in decisions:
        d = DecisionInfo(**d)
        if d["candidate_id"] == candidate_id and d["decision"] == "merge":
            d["rationale"] = f"{d['rationale']}; {rep.evidence}"
            if rep.confirmed and rep.pooled is not None:
                d["delta"], d["ci_low"], d["ci_high"] = rep.pooled.delta, rep.pooled.ci_low, rep.pooled.ci_high
            else:
                d["decision"], d["outcome"] = "prune", "insufficient"
                d["rationale"] += "; not replicated: not merged"
        out.append(d)
    return out


def decline_stop(
    before: Mapping[str, float], after: Mapping[str, float], steps_left: int, max_steps: int
) -> tuple[str, PairedComparison | None]:
    """Do not feed a decline: the reason to stop a session whose incumbent, trained on with no
    candidate to test, got significantly worse on the held-out prompts (paired bootstrap 95% CI below 0).

    `before` / `after` are the per-prompt strict scores of the version that was continued and of its
    continuation. Returns ("", comparison) when the continuation did not decline significantly, or when
    there are fewer than two shared prompts to compare (comparison None).
    """
    a, b = paired(before, after)
    if len(a) < 2:
        return "", None
    cmp = paired_bootstrap(a, b)
    if cmp.ci_high >= 0:
        return "", cmp
    return (
        f"the incumbent declined with no candidate to test (strict {cmp.mean_a:.3f} → {cmp.mean_b:.3f}, Δ "
        f"{cmp.delta:+.3f}, 95% CI [{cmp.ci_low:+.3f}, {cmp.ci_high:+.3f}], n={cmp.n}): training it on would "
        f"feed the decline, so the session stops with {steps_left} of {max_steps} training steps unused",
        cmp,
    )
