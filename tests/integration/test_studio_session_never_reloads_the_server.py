"""A session started through `langgraph dev` never makes the server restart itself.

The dev server watches the folder it serves for changed Python files; a session writes many (its git
repository, candidate worktrees, partial copies). Served as docs/studio.md says (reload on) with no workdir
of the owner's, the sessions live under `$XDG_STATE_HOME/evotrainer/server`, outside the watched tree: a whole
session (v0, a candidate, its pilot and control, the decision) runs through the SDK with no restart.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from dev_server import ROOT, dev_server
from llm_session import copy_demo

pytestmark = [pytest.mark.slow]

RESTART_MARKERS = ("Reloading", "WatchFiles detected changes", "StatReload detected", "Background run failed")


def test_a_whole_session_through_the_dev_server_never_restarts_it(tmp_path: Path, git_available: None) -> None:
    from langgraph_sdk import get_client

    harness = copy_demo(tmp_path / "harnesses" / "mine")
    state = tmp_path / "state"
    settings = {"max_iterations": 1, "max_candidates": 1, "base_steps": 4, "pilot_steps": 4}
    owner = {"XDG_STATE_HOME": str(state), "EVOTRAINER_SERVER_SANDBOX": "process",
             "EVOTRAINER_SERVER_HARNESS_ROOTS": str(tmp_path / "harnesses")}  # fmt: skip
    with dev_server(tmp_path, reload=True, EVOTRAINER_CACHE=str(tmp_path / "cache"), **owner) as url:

        async def run() -> tuple[dict[str, object], list[dict[str, object]]]:
            client = get_client(url=url)
            thread = await client.threads.create()
            final = await client.runs.wait(
                thread["thread_id"], "evotrainer", input={"harness": str(harness)}, context=settings, raise_error=False
            )
            runs = await client.runs.list(thread["thread_id"])
            return final, runs  # type: ignore[return-value]

        final, runs = asyncio.run(run())
        log = (tmp_path / "dev.log").read_text()
    assert [r["status"] for r in runs] == ["success"], (runs, log[-3000:])
    assert isinstance(final, dict) and final.get("status") == "finished", str(final)[-2000:]
    assert not [m for m in RESTART_MARKERS if m in log], log[-3000:]
    workdir = state / "evotrainer" / "server"
    assert (workdir / ".evotrainer" / "evotrainer.db").is_file()
    assert Path(str(final["harness_dir"])).resolve().is_relative_to(workdir.resolve())
    assert not Path(str(final["harness_dir"])).resolve().is_relative_to(ROOT)
