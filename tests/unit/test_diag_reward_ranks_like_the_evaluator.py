"""The report compares the training reward with the strict evaluator on the run's own rollouts.

Both directions (pay for wrong answers, no pay for right ones) and the ranking inside each GRPO group, which is
what the advantage reads: a reward that ranks a wrong sample at or above a right one fires an alert with the
numbers, also when it pays nothing at all (the two rates then have no reference and are NaN, with a note),
and the seed skill that writes a strict reward from the declared answer protocol is matched on it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import numpy as np
import polars as pl
import pytest

from diagnostics.findings import Severity
from diagnostics.schema import Rollout
from diagnostics.score import diagnose_score, rank_agreement, rank_violations
from diagnostics.table import table_from_rollouts
from skills.models import SkillRecord
from skills.retrieval import rank_skills
from skills.seeds import SEED_SKILLS


def _run(reward: Callable[[bool, int], float], n_groups: int = 12, steps: int = 2) -> pl.DataFrame:
    """Groups of 6 samples, the first `g % 5 + 1` strict-right; `reward(right, sample_index)` pays each."""
    rows = []
    for step in range(steps):
        for g in range(n_groups):
            for i in range(6):
                right = i < g % 5 + 1
                rows.append(
                    Rollout(
                        "r",
                        step,
                        "train",
                        f"p{g}",
                        f"{step}-{g}",
                        i,
                        "q",
                        "<ans>1</ans>",
                        "1",
                        reward(right, i),
                        strict_score=float(right),
                    )
                )
    return table_from_rollouts(rows)


def _finding(train: pl.DataFrame, alert_id: str):  # type: ignore[no-untyped-def]
    out = diagnose_score([], train, train.clear())
    return out, next(f for f in out.findings if f.alert_id == alert_id)


def test_a_reward_that_agrees_with_the_evaluator_ranks_every_group_right() -> None:
    out, finding = _finding(_run(lambda right, i: float(right)), "score.misranked_groups")
    assert finding.severity is Severity.OK and out.metrics["misranked_group_rate"] == 0.0
    assert out.metrics["reward_rank_agreement"] == 1.0 and out.metrics["rank_violations"] == 0.0
    assert out.metrics["mixed_groups"] == 24.0  # every group has right and wrong samples


def test_a_reward_that_pays_some_wrong_answers_misranks_their_groups() -> None:
    train = _run(lambda right, i: 1.0 if right or i == 5 else 0.0)  # the last sample (always wrong) is paid
    out, finding = _finding(train, "score.misranked_groups")
    assert finding.severity is Severity.CRITICAL and out.metrics["misranked_group_rate"] == 1.0
    assert finding.numbers["misranked_groups"] == 24.0 and finding.evidence_rollout_ids
    assert all(ref.endswith("/5") for ref in finding.evidence_rollout_ids)  # the paid wrong samples
    assert 0.5 < out.metrics["reward_rank_agreement"] < 1.0  # ties count half


def test_a_reward_that_pays_nothing_is_caught_by_the_ranking_and_named_in_the_notes() -> None:
    out, finding = _finding(_run(lambda right, i: 0.0), "score.misranked_groups")
    assert math.isnan(out.metrics["rewarded_wrong_rate"]) and math.isnan(out.metrics["unrewarded_correct_rate"])
    assert finding.severity is Severity.CRITICAL and out.metrics["reward_rank_agreement"] == 0.5
    assert any(n.startswith("score.rewarded_wrong: not evaluated") for n in out.notes)
    assert any(n.startswith("score.unrewarded_correct: not evaluated") for n in out.notes)


def test_an_inverted_reward_has_agreement_zero() -> None:
    out, _ = _finding(_run(lambda right, i: float(not right)), "score.misranked_groups")
    assert out.metrics["reward_rank_agreement"] == 0.0
    assert out.metrics["rank_violation_rate"] == 1.0


def test_too_few_mixed_groups_is_not_evaluated_and_says_why() -> None:
    out, finding = _finding(_run(lambda right, i: float(right), n_groups=2, steps=1), "score.misranked_groups")
    assert math.isnan(finding.value) and finding.severity is Severity.OK
    assert any("score.misranked_groups: not evaluated: 2 training group(s)" in n for n in out.notes)


def test_columnar_counts_equal_the_backtests_reference_definition() -> None:
    rng = random.Random(7)
    rows, expected = [], [0, 0, 0]
    for g in range(60):
        n = rng.randint(2, 8)
        strict = np.array([float(rng.random() < 0.5) for _ in range(n)])
        rewards = np.array([rng.choice([0.0, 0.2, 0.5, 1.0]) for _ in range(n)])
        partial = g % 17 == 0  # a group with an unscored sample is left out, as the backtest does
        if not partial:
            expected = [a + b for a, b in zip(expected, rank_violations(strict, rewards), strict=True)]
        for i in range(n):
            score = None if partial and i == 0 else float(strict[i])
            rows.append(Rollout("r", 0, "train", f"p{g}", f"g{g}", i, "q", "a", "1", float(rewards[i]),
                                strict_score=score))  # fmt: skip
    groups = rank_agreement(table_from_rollouts(rows))
    got = [int(groups["pairs"].sum()), int(groups["violations"].sum()), int(groups["ties"].sum())]
    assert got == expected and expected[0] > 0


@pytest.mark.parametrize(
    ("reward", "fires"),
    [(lambda right, i: 1.0 if right or i == 5 else 0.0, True), (lambda right, i: float(right), False)],
    ids=["misranking-reward", "strict-reward"],
)
def test_the_strict_reward_skill_is_matched_on_misranking_alone(
    reward: Callable[[bool, int], float], fires: bool
) -> None:
    train = _run(reward)
    out = diagnose_score([], train, train.clear())
    metrics = {k: v for k, v in out.metrics.items() if not math.isnan(v)}
    metrics = {**metrics, "rewarded_wrong_rate": 0.0, "unrewarded_correct_rate": 0.0, "reward_hacking": 0.0}
    records = [SkillRecord(spec=s, wins=0, losses=0, uses=0) for s in SEED_SKILLS]
    matched = {m.name for m in rank_skills(records, metrics, "math")}
    assert ("strict-answer-extraction" in matched) is fires
