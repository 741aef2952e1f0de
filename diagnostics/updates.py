"""Update-stability rules: is each policy update a small, trusted step? (signal layer, from trainer metrics)

A GRPO/PPO update is meant to move the policy a little per step: the clipped ratio keeps the
token-mean KL between the sampling and the updated policy (verl's `actor/ppo_kl`) around 1e-3. A
learning rate far too high, or a clip range that never binds, makes single updates jump (KL of 0.1 and
more) and the policy collapses: the training reward falls to zero within a few steps and every group
dies. Pure functions over `MetricRow`s (verl names: `actor/ppo_kl`, `actor/entropy`, `critic/score/mean`).

The update the trainer applied, from the local trainer's `actor/update_norm` (L2 norm of the
step's parameter change), `actor/ref_param_distance` (L2 distance from the lineage's reference policy) and
`actor/kl_loss` (KL to that reference): `update_norm_mean`, `update_norm_max`, `ref_distance`, `kl_to_ref`,
and `no_update_share`, the share of steps that changed no parameter (the filter kept no group), graded by
`signal.no_update`: a run whose steps do not move the policy cannot learn whatever the reward says.
A run whose trainer logs none of them gets NaN and a note (verl logs `actor/ppo_kl` and `actor/kl_loss`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from diagnostics.findings import Finding, Layer, LayerOutput, graded
from diagnostics.schema import TRAIN_REWARD_METRIC, MetricRow

PPO_KL_WARNING = 0.02  # ~10x the largest step KL of the demo's oracle harness (max 0.0019 over 30 steps)
PPO_KL_CRITICAL = 0.05
COLLAPSE_WARNING = 0.5  # the training score lost half of its early level
COLLAPSE_CRITICAL = 0.8
EDGE_STEPS = 5  # steps averaged at the start and the end of a run
NO_UPDATE_WARNING = 0.25  # share of steps whose update changed no parameter
NO_UPDATE_CRITICAL = 0.5


def _series(rows: Sequence[MetricRow], key: str) -> list[float]:
    return [float(r.data[key]) for r in sorted(rows, key=lambda r: r.step) if key in r.data]


def diagnose_updates(rows: Sequence[MetricRow]) -> LayerOutput:
    """Largest per-step policy shift (`ppo_kl_max`) and the training score's collapse from its early level."""
    kl = _series(rows, "actor/ppo_kl")
    score = _series(rows, TRAIN_REWARD_METRIC)
    entropy = _series(rows, "actor/entropy")
    kl_max = max(kl) if kl else math.nan
    early = float(np.mean(score[:EDGE_STEPS])) if score else math.nan
    late = float(np.mean(score[-EDGE_STEPS:])) if score else math.nan
    collapse = (early - late) / early if len(score) >= 2 * EDGE_STEPS and early > 0 else math.nan
    ent_growth = (
        float(np.mean(entropy[-EDGE_STEPS:]) / np.mean(entropy[:EDGE_STEPS]))
        if len(entropy) >= 2 * EDGE_STEPS and np.mean(entropy[:EDGE_STEPS]) > 0
        else math.nan
    )
    metrics = {"ppo_kl_max": kl_max, "train_score_collapse": collapse, "entropy_growth_ratio": ent_growth}
    size = update_size(rows)
    metrics.update(size.metrics)
    findings: list[Finding] = [
        graded(
            "signal.update_too_large",
            Layer.SIGNAL,
            kl_max,
            metric="ppo_kl_max",
            warning=PPO_KL_WARNING,
            critical=PPO_KL_CRITICAL,
            what="policy updates far larger than a trust-region step (learning rate or clip range)",
            numbers={"steps": float(len(kl))},
        ),
        graded(
            "signal.train_score_collapse",
            Layer.SIGNAL,
            collapse,
            metric="train_score_collapse",
            warning=COLLAPSE_WARNING,
            critical=COLLAPSE_CRITICAL,
            what="the training score collapsed from its early level (policy collapse)",
            numbers={"early": early, "late": late},
        ),
        *size.findings,
    ]
    notes = list(size.notes)
    if not kl:
        notes.append("signal.update_too_large: not evaluated: the trainer logs no actor/ppo_kl")
    if math.isnan(collapse):
        notes.append(
            f"signal.train_score_collapse: not evaluated: {len(score)} step(s) log critic/score/mean "
            f"({2 * EDGE_STEPS} needed) or the early score is not above 0"
        )
    return LayerOutput(tuple(findings), metrics, tuple(notes))


def update_size(rows: Sequence[MetricRow]) -> LayerOutput:
    """The applied update's size and the distance from the reference policy (see the module docstring)."""
    norms = _series(rows, "actor/update_norm")
    drift = _series(rows, "actor/ref_param_distance")
    kl_ref = _series(rows, "actor/kl_loss")
    still = float(np.mean([n == 0.0 for n in norms])) if norms else math.nan
    metrics = {
        "update_norm_mean": float(np.mean(norms)) if norms else math.nan,
        "update_norm_max": max(norms) if norms else math.nan,
        "no_update_share": still,
        "ref_distance": drift[-1] if drift else math.nan,
        "kl_to_ref": float(np.mean(kl_ref[-EDGE_STEPS:])) if kl_ref else math.nan,
    }
    finding = graded(
        "signal.no_update",
        Layer.SIGNAL,
        still,
        metric="no_update_share",
        warning=NO_UPDATE_WARNING,
        critical=NO_UPDATE_CRITICAL,
        what="steps whose update changed no parameter (the group filter kept no group)",
        numbers={"steps": float(len(norms)), "update_norm_mean": metrics["update_norm_mean"]},
    )
    notes = () if norms else ("signal.no_update: not evaluated: the trainer logs no actor/update_norm",)
    return LayerOutput((finding,), metrics, notes)
