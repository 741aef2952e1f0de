"""A client's thread state is input: on the open dev server, state that names another repository, a revision
that is an option, a checkpoint outside the session or another session's id is refused, naming the field,
and nothing is read, truncated, loaded or trained.

Against a real `langgraph dev` driven by the official SDK: each hostile state is written to a fresh thread
with `update_state(..., as_node="observe")` (what `POST /threads/{id}/state` lets any client do) on top of a
session whose v0 is fabricated, and the thread is run on. The nodes take the session's repository, revisions
and folders from the store (`agent/launch/session_guard.py`), so each run ends with a refusal instead.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import subprocess
from pathlib import Path
from typing import Any

from dev_server import dev_server
from llm_session import copy_demo, fake_session

from agent.adapters import ledger
from agent.adapters.ledger import store_url
from agent.session import start_session
from store.repository import session_candidates, session_runs


class _OpensAFile:
    """A pickle that, when loaded, creates `path`: proof that a checkpoint was unpickled."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return open, (self.path, "w")


def _other_repository(folder: Path) -> str:
    """A git repository outside every session, with a committed secret; return its head commit."""
    copy_demo(folder)
    (folder / "db_password").write_text("hunter2-secret\n")
    for cmd in (["init", "-q"], ["add", "-A"], ["-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(folder), *cmd], check=True)
    return subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()  # fmt: skip


def test_hostile_thread_state_is_refused_and_touches_nothing(tmp_path: Path, git_available: None) -> None:
    from langgraph_sdk import get_client

    settings = {"policy": "heuristic", "llm_model": "", "gate": "launch", "max_iterations": 1, "max_candidates": 1,
                "base_steps": 8, "pilot_steps": 8}  # fmt: skip
    ctx, state = fake_session(tmp_path, **settings)
    other_id, _ = start_session(ctx, copy_demo(tmp_path / "src-b"), tmp_path / "repo-b")
    victim = tmp_path / "victim.txt"
    victim.write_text("must stay\n")
    other_commit = _other_repository(tmp_path / "elsewhere")
    marker = tmp_path / "unpickled"
    evil = tmp_path / "evil.pt"
    evil.write_bytes(pickle.dumps(_OpensAFile(marker)))
    version = state["version"]
    hostile = {
        "version.commit": ({**state, "version": {**version, "commit": f"--output={victim}"}}, "launch"),
        "harness_dir": (
            {**state, "harness_dir": str(tmp_path / "elsewhere"), "version": {**version, "commit": other_commit}},
            "launch",
        ),
        "version.checkpoint": ({**state, "version": {**version, "checkpoint": str(evil)}}, "none"),
        "session": ({**state, "session_id": other_id}, "none"),
    }

    async def drive(url: str) -> dict[str, tuple[Any, Any]]:
        client = get_client(url=url)
        out = {}
        for name, (values, gate) in hostile.items():
            thread = await client.threads.create(metadata={"graph_id": "evotrainer"})
            tid = thread["thread_id"]
            await client.threads.update_state(tid, values, as_node="observe")
            result = await client.runs.wait(tid, "evotrainer", input=None, context={**settings, "gate": gate},
                                            raise_error=False)  # fmt: skip
            out[name] = (result, await client.threads.get_state(tid))
        return out

    env = {"EVOTRAINER_SERVER_WORKDIR": str(tmp_path), "EVOTRAINER_SERVER_SANDBOX": "process"}
    with dev_server(tmp_path, **env) as url:
        out = asyncio.run(drive(url))

    for name, expected in (("version.commit", "version.commit '--output="), ("harness_dir", "harness_dir '"),
                           ("version.checkpoint", "version.checkpoint '"), ("session", "harness_dir '")):  # fmt: skip
        result, thread_state = out[name]
        text = json.dumps(result) + json.dumps(thread_state)
        assert "__error__" in result and expected in result["__error__"]["message"], (name, result)
        assert not [i for task in thread_state["tasks"] for i in task["interrupts"]], (name, "a gate was asked")
        assert "hunter2-secret" not in text and "db_password" not in text, name
    assert victim.read_text() == "must stay\n"  # `git diff --output=FILE` truncates FILE
    assert not marker.exists(), "the client's checkpoint was unpickled"
    with ledger.db(store_url(ctx)) as db:  # nothing was proposed, backtested or trained in either session
        assert [r.id for r in session_runs(db, state["session_id"])] == [version["run_id"]]
        assert session_candidates(db, state["session_id"]) == [] and session_candidates(db, other_id) == []
        assert session_runs(db, other_id) == []
    branches = subprocess.run(["git", "-C", str(tmp_path / "elsewhere"), "branch", "--list"], check=True,
                              capture_output=True, text=True).stdout  # fmt: skip
    assert "evo/" not in branches
