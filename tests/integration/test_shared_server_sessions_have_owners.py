"""On a shared server a session belongs to the caller who created it; another caller's session id is refused
exactly like a missing one, from the graph's input and from a state write alike.

Against a real `langgraph dev --config langgraph.shared.json` with two callers (alice, bob), driven by the
official SDK: alice starts a session (stopped before v0 trains); the store records her as its owner. Bob naming
her session id, with or without a harness, and bob writing her session id into his own thread's state are all
refused with the message a session id nobody created gets, and her session gains no run, candidate or branch.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from dev_server import dev_server
from llm_session import copy_demo

from agent.adapters import ledger
from agent.context import Context
from agent.launch.server_auth import TOKENS_ENV
from store.repository import find_session, session_candidates, session_runs

ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789ab"
SESSION, MISSING = "alice-s1", "nobody-s1"


def test_bob_cannot_tell_or_use_alices_session(tmp_path: Path, git_available: None) -> None:
    from langgraph_sdk import get_client

    harness = copy_demo(tmp_path / "harnesses" / "arith")
    env = {TOKENS_ENV: f"alice:{ALICE},bob:{BOB}", "EVOTRAINER_SERVER_WORKDIR": str(tmp_path),
           "EVOTRAINER_SERVER_SANDBOX": "process",
           "EVOTRAINER_SERVER_HARNESS_ROOTS": str(tmp_path / "harnesses")}  # fmt: skip
    context = {"gate": "none", "max_iterations": 1, "base_steps": 8, "pilot_steps": 8}

    async def drive(url: str) -> dict[str, Any]:
        alice = get_client(url=url, headers={"Authorization": f"Bearer {ALICE}"})
        bob = get_client(url=url, headers={"Authorization": f"Bearer {BOB}"})

        async def run(client: Any, values: dict[str, Any], as_node: str | None = None) -> Any:
            tid = (await client.threads.create(metadata={"graph_id": "evotrainer"}))["thread_id"]
            if as_node:  # a state write: the thread goes on from `as_node` with these values
                await client.threads.update_state(tid, values, as_node=as_node)
            stop = [] if as_node else ["observe"]  # a new session stops before v0 trains; a state write runs on
            return await client.runs.wait(tid, "evotrainer", input=None if as_node else values, context=context,
                                          interrupt_before=stop, raise_error=False)  # fmt: skip

        out = {"alice": await run(alice, {"harness": str(harness), "session_id": SESSION})}
        out["bob_missing"] = await run(bob, {"session_id": MISSING})
        out["bob_names_hers"] = await run(bob, {"session_id": SESSION})
        out["bob_names_hers_with_harness"] = await run(bob, {"session_id": SESSION, "harness": str(harness)})
        repo = out["alice"]["harness_dir"]
        out["bob_writes_hers"] = await run(bob, {"session_id": SESSION, "harness_dir": repo}, as_node="setup")
        out["bob_writes_missing"] = await run(bob, {"session_id": MISSING, "harness_dir": repo}, as_node="setup")
        return out

    with dev_server(tmp_path, config="langgraph.shared.json", **env) as url:
        out = asyncio.run(drive(url))

    assert "__error__" not in out["alice"] and out["alice"]["session_id"] == SESSION, out["alice"]
    missing = out["bob_missing"]["__error__"]["message"]
    assert f"no session {MISSING}" in missing, out["bob_missing"]
    for name in ("bob_names_hers", "bob_names_hers_with_harness"):
        assert out[name]["__error__"]["message"] == missing.replace(MISSING, SESSION), (name, out[name])
    written = out["bob_writes_missing"]["__error__"]["message"]
    assert out["bob_writes_hers"]["__error__"]["message"] == written.replace(MISSING, SESSION), out
    assert f"no session {MISSING}" in written
    with ledger.db(ledger.store_url(Context(workdir=str(tmp_path)))) as db:
        row = find_session(db, SESSION)
        assert row is not None and row.owner == "alice" and find_session(db, MISSING) is None
        assert session_runs(db, SESSION) == [] and session_candidates(db, SESSION) == []
