"""Which gate of the reward's code stops the strict-right responses it fails (the probe's compass).

A gate (`harness/code_gates.py`: ``if COND: return <constant payout>``) leaves a fingerprint on what it
stops: the reward equals its ``score`` and every other component it returns equals its constant. Among the
strict-right training rollouts the reward fails (`score.unrewarded_correct`: paid below half the top reward),
the share that carries a gate's fingerprint is how much of the disagreement that gate can explain: a gate
that explains none of it is not the defect, however it reads. Rows whose fingerprint two gates share count
for both (the backtest then tells them apart on the cached rollouts). A gate that pays a bare number leaves
no fingerprint but the reward itself, which every other way of paying 0 shares: its evidence is weak
(`GateEvidence.fingerprint` is empty), and its probe ranks like any move with the same effect.

Adapter: reads the reward file (never through a link) and the run's training rows; builds no candidate.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.code_gates import Gate, GateError, reward_gates
from harness.manifest import Harness

if TYPE_CHECKING:
    import polars as pl

log = logging.getLogger(__name__)

SAME = 1e-9  # a payout equal to the gate's constant, up to float noise


@dataclass(frozen=True)
class GateEvidence:
    """One gate of the reward's entry function and the failed strict-right rollouts it can explain."""

    gate: Gate
    path: str  # the reward file, harness-relative
    failed_right: int  # strict-right training rollouts the reward pays below half its top reward
    right: int  # strict-right training rollouts
    explained: int  # of `failed_right`, those carrying the gate's payout in every field it returns
    fingerprint: tuple[str, ...]  # the logged fields the payout was matched on besides the reward ("parsed", …)

    @property
    def share(self) -> float:
        """The share of the failed strict-right rollouts the gate can explain (NaN when none failed)."""
        return self.explained / self.failed_right if self.failed_right else math.nan

    @property
    def failed_rate(self) -> float:
        """The share of strict-right rollouts the reward fails (`unrewarded_correct_rate`; NaN without any)."""
        return self.failed_right / self.right if self.right else math.nan


def gate_evidence(harness: Harness, text: str | None, rows: pl.DataFrame | None) -> tuple[GateEvidence, ...]:
    """The gates of the reward's entry function (`text`: its file as it is), each with what it explains on the
    training `rows` (none without rows: a gate is only a candidate where the evidence points at it)."""
    if text is None or rows is None or "strict_score" not in rows.columns or "reward" not in rows.columns:
        return ()
    try:
        gates = reward_gates(text, harness.reward.function)
    except GateError as exc:  # a candidate's unparsable reward: its backtest and run say why
        log.warning("gates of %s not read: %s", harness.reward.path, exc)
        return ()
    if not gates:
        return ()
    import polars as pl

    from diagnostics.score import REWARDED_WRONG_RELATIVE, RIGHT
    from diagnostics.table import COMPONENT_PREFIX

    top = rows.filter(pl.col("strict_score").is_not_null())["reward"].max()
    if not isinstance(top, int | float) or top <= 0:
        return ()
    right = rows.filter(RIGHT)
    failed = right.filter(pl.col("reward") < REWARDED_WRONG_RELATIVE * top)
    out = []
    for gate in gates:
        score = dict(gate.values).get("score")
        marks = [] if score is None else [(pl.col("reward") - score).abs() <= SAME]
        fields = tuple(k for k, _ in gate.values if k != "score" and f"{COMPONENT_PREFIX}{k}" in failed.columns)
        for key, value in gate.values:
            if key in fields:
                marks.append((pl.col(f"{COMPONENT_PREFIX}{key}").fill_null(math.inf) - value).abs() <= SAME)
        explained = failed.filter(pl.all_horizontal(marks)).height if marks else 0
        out.append(GateEvidence(gate, harness.reward.path, failed.height, right.height, explained, fields))
    return tuple(out)
