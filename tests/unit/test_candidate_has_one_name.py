"""A candidate has one name, `v<i>.<k>-<slug>`, in its branch, id, run folder, report and CLI.

The run id is `<session>-<name>` (the control of iteration i: `<session>-v<i>.0-control`, a replicate adds
`-r<r>`); run ids of sessions started before the rename (`<session>-i<i>-k<i>.<k>-<slug>`) still parse.
"""

from __future__ import annotations

from agent.adapters.pilots import candidate_name, parse_pilot_run_id, pilot_run_id
from sandboxes.git_worktree import candidate_branch
from store.repository import candidate_id


def test_branch_id_and_run_folder_carry_the_same_name() -> None:
    cid = candidate_id("s7", 2, 1, "strict-answer-extraction")
    name = candidate_name("s7", cid)
    assert name == "v2.1-strict-answer-extraction"
    assert candidate_branch("s7", 2, 1, "strict-answer-extraction") == f"evo/s7/{name}"
    assert pilot_run_id("s7", 2, cid) == f"s7-{name}"
    assert pilot_run_id("s7", 2, cid, replicate=1) == f"s7-{name}-r1"
    assert pilot_run_id("s7", 2, None) == "s7-v2.0-control"
    assert pilot_run_id("s7", 2, None, replicate=2) == "s7-v2.0-control-r2"


def test_run_ids_parse_back_in_both_schemes() -> None:
    cid = candidate_id("s7", 3, 2, "raise-length-budget")
    for run_id in (pilot_run_id("s7", 3, cid), "s7-i3-k3.2-raise-length-budget"):
        assert parse_pilot_run_id("s7", run_id, cid) == (3, "v3.2-raise-length-budget", 0)
    for run_id in (pilot_run_id("s7", 3, cid, 1), "s7-i3-k3.2-raise-length-budget-r1"):
        assert parse_pilot_run_id("s7", run_id, cid) == (3, "v3.2-raise-length-budget", 1)
    for run_id, replicate in (("s7-v3.0-control", 0), ("s7-i3-control", 0), ("s7-i3-control-r2", 2)):
        assert parse_pilot_run_id("s7", run_id, None) == (3, "v3.0-control", replicate)
    assert parse_pilot_run_id("s7", "s7-v0", None) is None
    assert parse_pilot_run_id("s7", "other-v3.0-control", None) is None


def test_a_slug_that_ends_like_a_replicate_is_not_taken_for_one() -> None:
    cid = candidate_id("s", 1, 1, "lr-r2")
    assert parse_pilot_run_id("s", pilot_run_id("s", 1, cid), cid) == (1, "v1.1-lr-r2", 0)
    assert parse_pilot_run_id("s", pilot_run_id("s", 1, cid, 3), cid) == (1, "v1.1-lr-r2", 3)
