"""`trusted_session` takes the session from the store and refuses graph state that leaves it, naming the field.

On a real session (git repository, SQLite store, fabricated v0): the state the graph itself wrote passes; each
field a client could point elsewhere is refused with its name — a link inside the session folder that leads
out of it included — and a server caller may act only on a session nobody or they themselves own.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from llm_session import fake_session

from agent.launch.session_guard import StateRefused, may_use, missing_session, trusted_session


@pytest.fixture()
def session(tmp_path: Path, git_available: None) -> tuple[Any, dict[str, Any]]:
    return fake_session(tmp_path, policy="heuristic", llm_model="")


def test_the_graphs_own_state_passes_and_names_the_stores_session(session: tuple[Any, dict[str, Any]]) -> None:
    ctx, state = session
    trusted = trusted_session(ctx, state)
    assert trusted.repo == Path(state["harness_dir"]).resolve()
    assert trusted.folder == ctx.session_dir(state["session_id"]).resolve()
    assert trusted.commit(state["version"]["commit"], "version.commit") == state["version"]["commit"]


def test_each_field_that_leaves_the_session_is_refused_by_name(
    session: tuple[Any, dict[str, Any]], tmp_path: Path
) -> None:
    ctx, state = session
    version, runs = state["version"], ctx.session_dir(state["session_id"]) / "runs"
    outside = tmp_path / "outside.pt"
    outside.write_bytes(b"x")
    link = runs / "escape.pt"
    os.symlink(outside, link)  # inside the folder by name, outside it once resolved
    cand = {"id": "c", "branch": "evo/other-session/v1.1-x", "worktree": "", "iteration": 1}
    cases = {
        "version.commit '--output": {**state, "version": {**version, "commit": f"--output={outside}"}},
        "version.commit 'deadbeef": {**state, "version": {**version, "commit": "deadbeef" * 5}},
        "harness_dir '": {**state, "harness_dir": str(tmp_path)},
        "version.checkpoint '": {**state, "version": {**version, "checkpoint": str(outside)}},
        "version.checkpoint '" + str(link): {**state, "version": {**version, "checkpoint": str(link)}},
        "version.run_dir '": {**state, "version": {**version, "run_dir": str(runs / ".." / ".." / "..")}},
        "is not what session": {**state, "version": {**version, "run_id": "another-run"}},
        "rollback.checkpoint '": {**state, "rollback": {"checkpoint": "/etc/passwd", "steps": 0}},
        "pilots[].init_checkpoint '": {**state, "pilots": [{"run_dir": "", "init_checkpoint": str(outside)}]},
        "backtests[].report_path '": {**state, "backtests": [{"report_path": "/etc/hostname"}]},
        "candidates[].branch '": {**state, "candidates": [cand]},
        "candidates[].worktree '": {**state, "candidate": {**cand, "branch": "", "worktree": str(tmp_path)}},
        "no session nobody": {**state, "session_id": "nobody"},
    }
    for expected, values in cases.items():
        with pytest.raises(StateRefused) as refused:
            trusted_session(ctx, values)
        assert expected in str(refused.value), (expected, str(refused.value))
    assert outside.read_bytes() == b"x"


def test_a_server_caller_may_act_only_on_its_own_or_unowned_sessions() -> None:
    assert may_use(None, "alice") and may_use(None, None)  # the owner's own process (CLI)
    assert may_use("alice", "alice") and may_use("", None)  # the caller / the open server on unowned sessions
    assert not may_use("bob", "alice") and not may_use("", "alice") and not may_use("bob", None)
    assert missing_session("s-AAA") == missing_session("s-BBB").replace("s-BBB", "s-AAA")
