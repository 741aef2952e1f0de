"""Reward evidence from arms that train the same reward code (a reward defect that stays latent).

A reward can pay an exploit that the incumbent's policy has not found yet: its own rollouts show no
disagreement with the strict evaluator, while an arm of the last iteration that changed another factor only
(a bigger batch, more samples per prompt) learns the exploit within its pilot. Those rollouts were scored by
the same reward code, so what they show about the reward (paying strict-wrong answers, not paying strict-right
ones, ranking a group against strict correctness, reward up while strict falls) is evidence about the
incumbent's reward too. Measured on the shortcut-bonus scenario, seed 0: both trainer probes of iteration 2
fired `score.rewarded_wrong` and `score.reward_hacking` while the control stayed clean, and the control of
iteration 3 then collapsed from 0.860 to 0.290.

`with_shared_reward_evidence` adds to the incumbent's report, per reward-agreement rule of the score layer:

- the metric ``shared_reward/<metric>``: the largest value over those arms (NaN when none has one);
- when the rule fired on an arm and not on the incumbent, the finding ``score.shared.<rule>`` (warning: the
  rollouts are another run's), with the arm's numbers and evidence.

`reward_metrics_with_shared` is what skill triggers read: each reward-agreement metric raised to its shared
value, so a reward repair matches on the evidence wherever it was seen. Which arms share the reward code is
the caller's decision (`agent/nodes/diagnose.py`). Pure: reports in, report out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from diagnostics.findings import Finding, HealthReport, Layer, Severity

SHARED_PREFIX = "shared_reward/"
SHARED_ALERT_PREFIX = "score.shared."
# The score layer's reward-agreement rules (`diagnostics/score.py`) and the metric each grades.
REWARD_AGREEMENT = {
    "score.reward_hacking": "reward_hacking",
    "score.rewarded_wrong": "rewarded_wrong_rate",
    "score.unrewarded_correct": "unrewarded_correct_rate",
    "score.misranked_groups": "misranked_group_rate",
}


def _known(value: Any) -> bool:
    return isinstance(value, int | float) and not math.isnan(value)


def with_shared_reward_evidence(own: HealthReport, arms: Sequence[HealthReport]) -> HealthReport:
    """`own` plus the reward-agreement evidence of `arms` (runs that train the same reward code)."""
    if not arms:
        return own
    metrics: dict[str, float] = {}
    found: list[Finding] = []
    for alert_id, metric in REWARD_AGREEMENT.items():
        values = [float(a.metrics[metric]) for a in arms if _known(a.metrics.get(metric))]
        metrics[SHARED_PREFIX + metric] = max(values) if values else math.nan
        mine = own.finding(alert_id)
        if mine is not None and mine.fired:
            continue  # the incumbent's own rollouts already show it
        fired = [(a, f) for a in arms if (f := a.finding(alert_id)) is not None and f.fired]
        if not fired:
            continue
        arm, worst = max(fired, key=lambda af: (af[1].severity.rank, af[1].value))
        found.append(
            Finding(
                alert_id=SHARED_ALERT_PREFIX + alert_id.split(".", 1)[1],
                layer=Layer.SCORE,
                severity=Severity.WARNING,
                message=f"{worst.message} on {arm.run_id}, which trains the same reward code "
                f"({len(fired)} of {len(arms)} such arms): the defect is latent in this run",
                value=worst.value,
                threshold=worst.threshold,
                rule=f"{SHARED_PREFIX}{metric}: {worst.rule} on an arm sharing the reward code",
                evidence_rollout_ids=worst.evidence_rollout_ids,
                numbers={**worst.numbers, "arms": float(len(arms)), "arms_fired": float(len(fired))},
            )
        )
    return HealthReport(
        own.run_id, own.run_dir, (*own.findings, *found), {**own.metrics, **metrics}, own.problems, own.notes
    )


def reward_metrics_with_shared(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """`metrics` with each reward-agreement metric raised to its ``shared_reward/`` value where that is higher."""
    out = dict(metrics)
    for metric in REWARD_AGREEMENT.values():
        shared = out.get(SHARED_PREFIX + metric)
        if _known(shared) and not (_known(out.get(metric)) and out[metric] >= shared):
            out[metric] = shared
    return out
