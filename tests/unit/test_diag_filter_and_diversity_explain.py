"""Metrics a group filter changes are reported before and after it, and within-group diversity.

The trainer records on each training rollout whether the filter kept its group; the report compares the kept
groups with the dropped ones (reward spread, strict accuracy, the learning signal kept) and fires when the
filter throws the signal away or prefers the groups with less of it. Identical responses inside a group are
counted from a hash of the text, so the columnar report never holds the text.
"""

from __future__ import annotations

import math
from pathlib import Path

from diagnostics.findings import Severity
from diagnostics.groups import diagnose_groups
from diagnostics.schema import Rollout, read_run_rollouts, write_rollouts
from diagnostics.signal import diagnose_dead_groups
from diagnostics.table import read_run_table, table_from_rollouts


def _rows(keep_live: bool, kept_flags: bool = True, response: str = "{g}-{i}") -> list[Rollout]:
    """10 groups of 4: groups 0-4 dead (all reward 1), 5-9 live; the filter keeps one kind and drops the other."""
    out = []
    for g in range(10):
        live = g >= 5
        for i in range(4):
            kept = (live == keep_live) if kept_flags else None
            out.append(
                Rollout("r", 1, "train", f"p{g}", f"g{g}", i, "q", response.format(g=g, i=i), "1",
                        float(i % 2) if live else 1.0, strict_score=float(i % 2) if live else 1.0, kept=kept)
            )  # fmt: skip
    return out


def _finding(out, alert_id: str):  # type: ignore[no-untyped-def]
    return next(f for f in out.findings if f.alert_id == alert_id)


def test_a_filter_that_keeps_the_live_groups_is_healthy() -> None:
    out = diagnose_groups(table_from_rollouts(_rows(keep_live=True)))
    m = out.metrics
    assert m["kept_group_ratio"] == 0.5 and m["kept_live_ratio"] == 1.0
    assert m["reward_spread_after_filter"] == 0.5 and m["reward_spread_dropped"] == 0.0
    assert m["train_strict_acc"] == 0.75 and m["train_strict_acc_after_filter"] == 0.5  # before / after
    assert m["filter_spread_gap"] == -0.5
    assert _finding(out, "signal.filter_drops_signal").severity is Severity.OK
    assert _finding(out, "signal.filter_inverted").severity is Severity.OK


def test_a_filter_that_keeps_dead_groups_and_drops_live_ones_fires_both_rules() -> None:
    out = diagnose_groups(table_from_rollouts(_rows(keep_live=False)))
    dropped = _finding(out, "signal.filter_drops_signal")
    inverted = _finding(out, "signal.filter_inverted")
    assert dropped.severity is Severity.CRITICAL and out.metrics["kept_live_ratio"] == 0.0
    assert inverted.severity is Severity.WARNING and inverted.value == 0.5
    assert inverted.numbers["reward_spread_dropped"] == 0.5 and inverted.evidence_rollout_ids
    dead = diagnose_dead_groups(table_from_rollouts(_rows(keep_live=False)))
    assert dead.metrics["dead_group_ratio"] == 0.5 and dead.metrics["dead_group_ratio_after_filter"] == 1.0


def test_without_kept_flags_the_filter_rules_are_not_evaluated_and_say_why() -> None:
    out = diagnose_groups(table_from_rollouts(_rows(keep_live=True, kept_flags=False)))
    assert math.isnan(out.metrics["kept_group_ratio"]) and math.isnan(out.metrics["kept_live_ratio"])
    assert _finding(out, "signal.filter_drops_signal").severity is Severity.OK
    assert any("carry no `kept` flag" in note for note in out.notes)
    assert "dead_group_ratio_after_filter" not in diagnose_dead_groups(table_from_rollouts(_rows(True, False))).metrics


def test_identical_groups_are_counted_without_the_text() -> None:
    out = diagnose_groups(table_from_rollouts(_rows(keep_live=True, response="same for {g}")))
    assert out.metrics["identical_group_ratio"] == 1.0 and out.metrics["distinct_response_ratio"] == 0.25
    assert out.metrics["dead_identical_share"] == 1.0  # the dead groups are identical: a collapsed sampler
    assert _finding(out, "signal.identical_groups").severity is Severity.CRITICAL
    diverse = diagnose_groups(table_from_rollouts(_rows(keep_live=True)))
    assert diverse.metrics["identical_group_ratio"] == 0.0 and diverse.metrics["distinct_response_ratio"] == 1.0
    assert diverse.metrics["dead_identical_share"] == 0.0  # dead but diverse: the reward cannot tell them apart


def test_kept_flags_round_trip_through_files_and_a_bad_flag_is_a_problem(tmp_path: Path) -> None:
    rows = _rows(keep_live=True)
    path = tmp_path / "rollouts" / "train" / "step_1.jsonl"
    write_rollouts(path, rows)
    assert [r.kept for r in read_run_rollouts(tmp_path).rollouts] == [r.kept for r in rows]
    with open(path, "a") as fh:
        fh.write(path.read_text().splitlines()[0].replace('"kept":false', '"kept":"no"') + "\n")
    table = read_run_table(tmp_path)
    assert table.train.height == len(rows) and table.train["kept"].to_list() == [r.kept for r in rows]
    assert [p.line for p in table.problems] == [len(rows) + 1]
    assert rows[0].to_json()["kept"] is False
    assert "kept" not in Rollout("r", 1, "train", "p", "g", 0, "q", "a", "1", 1.0).to_json()  # old files unchanged


def _levelled(keep_easy: bool) -> list[Rollout]:
    """18 live groups of 4: nine solved 3 of 4 times (easy), nine 1 of 4 (hard); the filter keeps one level."""
    out = []
    for g in range(18):
        easy = g < 9
        for i in range(4):
            right = i < 3 if easy else i < 1
            kept = easy == keep_easy if g % 3 else True  # every third group kept whatever its level
            out.append(
                Rollout("r", 1, "train", f"p{g}", f"g{g}", i, "q", f"{g}-{i}", "1", float(right),
                        strict_score=float(right), kept=kept)
            )  # fmt: skip
    return out


def test_a_filter_that_keeps_only_the_easy_live_groups_is_biased() -> None:
    out = diagnose_groups(table_from_rollouts(_levelled(keep_easy=True)))
    biased = _finding(out, "signal.filter_biased")
    # kept: 9 easy (0.75) + 3 hard (0.25) -> 0.625; dropped: 6 hard -> 0.25
    assert out.metrics["filter_reward_bias"] == 0.625 - 0.25
    assert biased.severity is Severity.WARNING and biased.evidence_rollout_ids
    assert _finding(out, "signal.filter_drops_signal").severity is Severity.OK  # it keeps 2/3 of the signal


def test_a_filter_that_keeps_the_hard_groups_is_not_called_biased() -> None:
    out = diagnose_groups(table_from_rollouts(_levelled(keep_easy=False)))
    assert out.metrics["filter_reward_bias"] < 0
    assert _finding(out, "signal.filter_biased").severity is Severity.OK
