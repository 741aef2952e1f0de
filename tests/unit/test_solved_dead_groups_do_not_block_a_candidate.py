"""A candidate whose new dead groups are prompts it now solves every time is still an improvement.

`signal.dead_groups` counts every zero-variance group; a group whose samples the strict evaluator all scores
right is progress, not a lost signal. The gate (`evidence.classify_outcome`) leaves such a new critical alert
out when the graded ratio without the solved groups is not critical; dead groups of wrong answers still block.
"""

from __future__ import annotations

from agent.decisions.evidence import classify_outcome
from diagnostics.schema import Rollout
from diagnostics.signal import DEAD_UNSOLVED, diagnose_dead_groups
from diagnostics.stats import PairedComparison
from diagnostics.table import table_from_rollouts


def _rows(solved: int, failed: int, live: int) -> list[Rollout]:
    """Groups of 4: `solved` all right (reward 1), `failed` all wrong (0), `live` half right."""
    out = []
    kinds = ["solved"] * solved + ["failed"] * failed + ["live"] * live
    for g, kind in enumerate(kinds):
        for i in range(4):
            right = kind == "solved" or (kind == "live" and i % 2 == 0)
            out.append(Rollout("r", 1, "train", f"p{g}", f"g{g}", i, "q", f"{g}-{i}", "1", float(right),
                               strict_score=float(right)))  # fmt: skip
    return out


def _findings(rows: list[Rollout]):  # type: ignore[no-untyped-def]
    return diagnose_dead_groups(table_from_rollouts(rows)).findings


def _better() -> PairedComparison:
    return PairedComparison(mean_a=0.8, mean_b=0.87, delta=0.07, ci_low=0.03, ci_high=0.11, p_wilcoxon=0.001, n=300)


def test_new_dead_groups_of_solved_prompts_keep_an_improvement() -> None:
    parent, new = _findings(_rows(2, 2, 6)), _findings(_rows(6, 2, 2))  # dead 40% -> 80%, 6 of 8 solved
    dead = next(f for f in new if f.alert_id == "signal.dead_groups")
    assert dead.severity.value == "critical" and abs(dead.numbers[DEAD_UNSOLVED] - 0.2) < 1e-12
    assert classify_outcome(_better(), new, parent) == "improvement"


def test_new_dead_groups_of_wrong_answers_still_make_it_mixed() -> None:
    parent, new = _findings(_rows(2, 2, 6)), _findings(_rows(2, 6, 2))  # dead 40% -> 80%, 6 of 8 all wrong
    dead = next(f for f in new if f.alert_id == "signal.dead_groups")
    assert dead.severity.value == "critical" and dead.numbers[DEAD_UNSOLVED] > 0.5
    assert classify_outcome(_better(), new, parent) == "mixed"
