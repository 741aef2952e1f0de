"""On a shared server a session belongs to the caller who created it, and nobody can tell its id from a free one.

Against a real `langgraph dev --config langgraph.shared.json` with two callers (alice, bob), driven by the
official SDK: alice starts a session from a harness (stopped before v0 trains); its id is her thread's id and
the store records her as its owner. On this server a session's id is always its thread's id, so bob naming
her session id, with or without a harness, gets exactly the refusal a free id gets (no existence oracle), bob
cannot write her session id into his own thread's state (state writes are refused), and her session gains no
run, candidate or branch. Alice choosing an id of her own is refused the same way.
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
from agent.nodes.setup import CHOSEN_ID_REFUSED
from store.repository import find_session, session_candidates, session_runs

ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789ab"
MISSING = "nobody-s1"


def _status(exc: Exception) -> int:
    response = getattr(exc, "response", None)
    return int(getattr(response, "status_code", 0) or 0)


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

        async def run(client: Any, values: dict[str, Any]) -> tuple[str, Any]:
            tid = (await client.threads.create(metadata={"graph_id": "evotrainer"}))["thread_id"]
            out = await client.runs.wait(tid, "evotrainer", input=values, context=context,
                                         interrupt_before=["observe"], raise_error=False)  # fmt: skip
            return tid, out

        tid, alice_out = await run(alice, {"harness": str(harness)})
        out: dict[str, Any] = {"alice_tid": tid, "alice": alice_out}
        hers = alice_out.get("session_id", "")
        _, out["bob_missing"] = await run(bob, {"session_id": MISSING})
        _, out["bob_names_hers"] = await run(bob, {"session_id": hers})
        _, out["bob_names_hers_with_harness"] = await run(bob, {"session_id": hers, "harness": str(harness)})
        _, out["alice_chooses"] = await run(alice, {"session_id": MISSING, "harness": str(harness)})
        own = (await bob.threads.create(metadata={"graph_id": "evotrainer"}))["thread_id"]
        try:
            await bob.threads.update_state(own, {"session_id": hers, "harness_dir": "/x"}, as_node="setup")
            out["bob_writes_hers"] = 200
        except Exception as exc:  # the SDK raises on an HTTP error
            out["bob_writes_hers"] = _status(exc)
        return out

    with dev_server(tmp_path, config="langgraph.shared.json", **env) as url:
        out = asyncio.run(drive(url))

    assert "__error__" not in out["alice"] and out["alice"]["session_id"] == out["alice_tid"], out["alice"]
    session = out["alice"]["session_id"]
    for name in ("bob_missing", "bob_names_hers", "bob_names_hers_with_harness", "alice_chooses"):
        assert out[name]["__error__"]["message"] == CHOSEN_ID_REFUSED, (name, out[name])
    assert out["bob_writes_hers"] == 403
    with ledger.db(ledger.store_url(Context(workdir=str(tmp_path)))) as db:
        row = find_session(db, session)
        assert row is not None and row.owner == "alice" and find_session(db, MISSING) is None
        assert session_runs(db, session) == [] and session_candidates(db, session) == []
