"""Pure decision rules: per-prompt strict scores, paired comparisons, and keep / prune / revert / merge.

A higher training reward alone never promotes anything in `evotrainer` mode: the strict held-out score,
compared per prompt against a control run with a paired bootstrap, decides, and a hack or new critical
alert turns an apparent improvement into `mixed`. The `score-only` baseline decides on the training
reward alone, as the paper's AutoResearch-style loop does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from diagnostics.findings import Finding
from diagnostics.stats import PairedComparison, classify_outcome, classify_restoration, paired_bootstrap

if TYPE_CHECKING:
    import polars as pl

# Score-only promotes when the final training reward beats the control's by more than this.
SCORE_ONLY_MARGIN = 0.0


def final_strict_scores(rows: pl.DataFrame) -> dict[str, float]:
    """Mean strict score per prompt at the last validation step that has strict scores (run-table rows)."""
    from diagnostics.score import strict_by_step

    by_step = strict_by_step(rows)
    return by_step[max(by_step)] if by_step else {}


def paired(control: Mapping[str, float], candidate: Mapping[str, float]) -> tuple[list[float], list[float]]:
    """Scores of the prompts both runs were evaluated on, in a stable order."""
    common = sorted(set(control) & set(candidate))
    return [control[p] for p in common], [candidate[p] for p in common]


@dataclass(frozen=True)
class Evaluation:
    """Everything the decision needs about one candidate pilot."""

    candidate_id: str
    run_ok: bool
    message: str
    comparison: PairedComparison | None
    outcome_class: str  # improvement | regression | mixed | insufficient
    train_reward: float
    control_train_reward: float
    new_alerts: tuple[str, ...]
    restoration: bool = False  # only moves settings back into their documented range: non-inferiority decides


# What a restoration's rationale says about the rule it was decided by.
RESTORATION_RULE = (
    "restores settings to their documented range: decided by non-inferiority (a gain, with the 95% CI above "
    "-min_effect)"
)


def decide(evaluations: Sequence[Evaluation], mode: str) -> list[dict[str, Any]]:
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


def _decide_score_only(evaluations: Sequence[Evaluation]) -> list[dict[str, Any]]:
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


def _decision(ev: Evaluation, action: str, outcome: str, rationale: str) -> dict[str, Any]:
    cmp = ev.comparison
    return {
        "candidate_id": ev.candidate_id,
        "decision": action,
        "outcome": outcome,
        "delta": cmp.delta if cmp else 0.0,
        "ci_low": cmp.ci_low if cmp else 0.0,
        "ci_high": cmp.ci_high if cmp else 0.0,
        "train_gain": ev.train_reward - ev.control_train_reward,
        "rationale": rationale,
    }


@dataclass(frozen=True)
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
        return Replication(False, None, tuple(deltas), "insufficient", "no replicate scores to compare")
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
    return Replication(confirmed, pooled, tuple(deltas), outcome, evidence)


def apply_replication(
    decisions: Sequence[Mapping[str, Any]], candidate_id: str, rep: Replication
) -> list[dict[str, Any]]:
    """The decisions after the merge candidate's replication: confirmed → merge on pooled evidence, else prune."""
    out = []
    for d in decisions:
        d = dict(d)
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
    """Do not feed a decline (issue 29 §2): the reason to stop a session whose incumbent, trained on with no
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
