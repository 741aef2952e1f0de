"""The match_heldout_sources op: the training mix becomes the held-out set's mix of data sources.

Refused (a clear TemplateError, nothing written) without a held-out mix, when no entry draws a held-out source,
or when the selection already has that mix; a source drawn by several entries is split between them.
"""

from __future__ import annotations

import pytest

from skills.data_weights import match_heldout
from skills.templates import TemplateError

SHARE = "heldout_source_share/"


def test_entries_get_the_held_out_share_of_their_sources_and_the_total_is_kept() -> None:
    metrics = {SHARE + "a": 0.5, SHARE + "b": 0.25, SHARE + "c": 0.25}
    new, note = match_heldout({"a": 2.0, "b": 0.0, "x": 2.0}, metrics, {"a": {"a"}, "b": {"b", "c"}, "x": {"x"}})
    assert new == {"a": 2.0, "b": 2.0, "x": 0.0} and "held-out mix" in note


def test_a_source_drawn_by_two_entries_is_split_between_them() -> None:
    new, _ = match_heldout({"e1": 1.0, "e2": 0.0}, {SHARE + "s": 1.0}, {"e1": {"s"}, "e2": {"s"}})
    assert new == {"e1": 0.5, "e2": 0.5}


@pytest.mark.parametrize(
    ("weights", "metrics", "words"),
    [
        ({"a": 1.0}, {}, "no held-out mix"),
        ({"a": 1.0}, {SHARE + "z": 1.0}, "no entry"),
        ({"a": 0.5, "b": 0.5}, {SHARE + "a": 0.5, SHARE + "b": 0.5}, "already has"),
        ({"a": -1.0}, {SHARE + "a": 1.0}, "must be a number"),
    ],
)
def test_refusals_say_why(weights: dict[str, float], metrics: dict[str, float], words: str) -> None:
    with pytest.raises(TemplateError, match=words):
        match_heldout(weights, metrics)
