"""A reward re-made from its own training-side checks, where they agree with the evaluator.

When the reward and the protected evaluator disagree on many training rollouts and no single component of the
reward explains it, the reward's own checks may still hold the answer together: a program that parses *and*
passes every test, a lookup made *and* an answer written, a partial credit paid only when full.
`fit_alignment` searches the rules "pay 1 when every check holds" over the reward's components and its score
(one or two checks, each `component >= t` or `component <= t`, `t` an observed value) for the one whose pay
agrees best with the strict score of the *training* rollouts (the strict scores the health report computes on
them; never held-out rows or protected files). It is kept only when it halves the reward's own disagreement,
with enough strict-right and strict-wrong rollouts to tell.

Disagreement, for the reward and a rule alike, is counted as the backtest counts it
(`diagnostics/backtest.py: strict_disagreement`, one definition): the share of strict-wrong rollouts paid plus
the share of strict-right ones not paid. A rule may raise neither share. The candidate built from the rule
(`skills/score_checks.py`) is then gated like every probe aimed at the reward's disagreement: its backtest must
show that disagreement fall on the cached rollouts, and the hack corpus must hold.
Pure (polars and numpy over the run table).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

MIN_EACH = 20  # strict-right and strict-wrong training rollouts, each, before a rule is fitted
MAX_COMPONENTS = 8  # components searched (in the run table's order)
MAX_THRESHOLDS = 12  # thresholds tried per component (its distinct values, or quantiles of them)
MAX_GAIN = 0.5  # a rule is kept when its disagreement is at most this share of the reward's own
SCORE = "score"  # the reward's own score counts as one of its checks (a partial credit paid only when full)

Op = Literal[">=", "<="]


@dataclass(frozen=True)
class Check:
    """One training-side check: a reward component compared with a threshold."""

    component: str
    op: Op
    threshold: float

    @property
    def shown(self) -> str:
        """The check as a hypothesis writes it."""
        return f"{self.component} {self.op} {self.threshold:g}"


@dataclass(frozen=True)
class Alignment:
    """The best rule over the reward's components and how it and the reward agree with the strict score."""

    checks: tuple[Check, ...]
    rewarded_wrong: float  # strict-wrong training rollouts the rule pays / strict-wrong ones
    unrewarded_correct: float  # strict-right ones it does not pay / strict-right ones
    reward_rewarded_wrong: float  # the same two rates for the reward as it is
    reward_unrewarded_correct: float
    n_right: int
    n_wrong: int

    @property
    def disagreement(self) -> float:
        """The rule's rewarded-wrong plus unrewarded-correct rate."""
        return self.rewarded_wrong + self.unrewarded_correct

    @property
    def reward_disagreement(self) -> float:
        """The reward's rewarded-wrong plus unrewarded-correct rate."""
        return self.reward_rewarded_wrong + self.reward_unrewarded_correct


def fit_alignment(rows: pl.DataFrame) -> Alignment | None:
    """The rule of one or two checks over the reward's components that best agrees with the training rollouts'
    strict scores, when it halves the reward's disagreement; None otherwise (too few rollouts of either kind,
    fewer than one varying component, or no rule good enough)."""
    import numpy as np
    import polars as pl

    from diagnostics.backtest import strict_disagreement
    from diagnostics.score import STRICT_CORRECT
    from diagnostics.table import COMPONENT_PREFIX

    score_column = COMPONENT_PREFIX + SCORE
    if "strict_score" not in rows.columns or "reward" not in rows.columns:
        return None
    names = [c for c in rows.columns if c.startswith(COMPONENT_PREFIX) and c != score_column][: MAX_COMPONENTS - 1]
    frame = (
        rows.select("reward", "strict_score", *names).drop_nulls().with_columns(pl.col("reward").alias(score_column))
    )
    names = [score_column, *names]
    strict = frame["strict_score"].cast(pl.Float64).to_numpy()
    right = strict >= STRICT_CORRECT
    n_right, n_wrong = int(right.sum()), int((~right).sum())
    if n_right < MIN_EACH or n_wrong < MIN_EACH:
        return None
    paid_wrong, failed_right = strict_disagreement(strict, frame["reward"].cast(pl.Float64).to_numpy())
    reward_rates = (paid_wrong / n_wrong, failed_right / n_right)
    masks: list[tuple[Check, np.ndarray]] = []
    for name in names:
        values = frame[name].cast(pl.Float64, strict=False).to_numpy()
        distinct = np.unique(values[np.isfinite(values)])
        if distinct.size < 2:
            continue
        if distinct.size > MAX_THRESHOLDS:
            distinct = np.unique(np.quantile(distinct, np.linspace(0, 1, MAX_THRESHOLDS)))
        component = name.removeprefix(COMPONENT_PREFIX)
        for t in distinct:
            masks.append((Check(component, ">=", float(t)), values >= t))
            masks.append((Check(component, "<=", float(t)), values <= t))
    best: tuple[tuple[float, float], tuple[Check, ...]] | None = None
    pairs = (((a, b), ma & mb) for (a, ma), (b, mb) in itertools.combinations(masks, 2) if a.component != b.component)
    for checks, mask in itertools.chain((((c,), m) for c, m in masks), pairs):
        rates = _rates(mask, right, n_right, n_wrong)  # a rule pays 1 or 0: paid is the mask itself
        if rates[0] > reward_rates[0] or rates[1] > reward_rates[1]:
            continue  # it would trade one disagreement for the other
        if best is None or sum(rates) < sum(best[0]) - 1e-12:  # ties: the first found, single checks first
            best = (rates, checks)
    if best is None or not sum(best[0]) <= MAX_GAIN * sum(reward_rates):
        return None
    return Alignment(best[1], *best[0], *reward_rates, n_right, n_wrong)


def _rates(paid: np.ndarray, right: np.ndarray, n_right: int, n_wrong: int) -> tuple[float, float]:
    """(paid strict-wrong / strict-wrong, unpaid strict-right / strict-right)."""
    return float((paid & ~right).sum()) / n_wrong, float((~paid & right).sum()) / n_right
