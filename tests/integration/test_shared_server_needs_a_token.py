"""Issue 25 §1: on a shared server (`langgraph.shared.json`) every caller needs a token and sees only its threads.

Against a real `langgraph dev --config langgraph.shared.json` driven by the official `langgraph-sdk`:
- a request without a token, with a wrong one, or with Studio's `x-auth-scheme: langsmith` header (which the dev
  server otherwise lets past the custom handler) is refused with 401;
- one caller cannot read, search, update, run or delete another caller's thread;
- assistants are read-only, scheduled runs and the key-value store are refused;
- a server started with no tokens refuses every request, naming the variable (fail closed).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from dev_server import dev_server

from agent.launch.server_auth import TOKENS_ENV

ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789ab"


def _status(exc: BaseException) -> int:
    assert isinstance(exc, httpx.HTTPStatusError), repr(exc)
    return exc.response.status_code


async def _refused(call: Any) -> int:
    try:
        await call
    except Exception as exc:
        return _status(exc)
    raise AssertionError("the call was not refused")


def test_a_shared_server_needs_a_token_and_keeps_threads_apart(tmp_path: Path) -> None:
    from langgraph_sdk import get_client

    env = {TOKENS_ENV: f"alice:{ALICE},bob:{BOB}"}

    async def drive(url: str) -> None:
        anonymous = get_client(url=url)
        studio_header = get_client(url=url, headers={"x-auth-scheme": "langsmith"})
        wrong = get_client(url=url, headers={"Authorization": "Bearer not-a-token-of-this-server"})
        alice = get_client(url=url, headers={"Authorization": f"Bearer {ALICE}"})
        bob = get_client(url=url, headers={"Authorization": f"Bearer {BOB}"})
        for client in (anonymous, studio_header, wrong):
            assert await _refused(client.threads.search()) == 401
            assert await _refused(client.threads.create()) == 401

        mine = await alice.threads.create(metadata={"note": "alice's session"})
        tid = mine["thread_id"]
        assert (await alice.threads.get(tid))["metadata"]["owner"] == "alice"
        # the dev server keeps threads of earlier runs (.langgraph_api/): check ownership, not counts
        assert tid in {t["thread_id"] for t in await alice.threads.search(limit=1000)}
        assert {t["metadata"]["owner"] for t in await alice.threads.search(limit=1000)} == {"alice"}
        assert tid not in {t["thread_id"] for t in await bob.threads.search(limit=1000)}
        assert await _refused(bob.threads.get(tid)) == 404
        assert await _refused(bob.threads.get_state(tid)) == 404
        assert await _refused(bob.threads.update_state(tid, {"harness": "/etc"})) == 404
        assert await _refused(bob.runs.create(tid, "evotrainer", input={"harness": "x"})) == 404
        assert await _refused(bob.threads.delete(tid)) == 404
        spoof = await bob.threads.create(metadata={"owner": "alice"})  # a caller cannot claim another's name
        assert (await bob.threads.get(spoof["thread_id"]))["metadata"]["owner"] == "bob"
        assert spoof["thread_id"] not in {t["thread_id"] for t in await alice.threads.search(limit=1000)}

        assistants = await bob.assistants.search()
        assert assistants and assistants[0]["graph_id"] == "evotrainer"
        assert await _refused(bob.assistants.create("evotrainer", config={})) == 403
        assert await _refused(bob.assistants.delete(assistants[0]["assistant_id"])) == 403
        assert await _refused(bob.crons.create("evotrainer", schedule="* * * * *", input={})) == 403
        assert await _refused(bob.store.put_item(("x",), "k", {"v": 1})) == 403

    with dev_server(tmp_path, config="langgraph.shared.json", **env) as url:
        asyncio.run(drive(url))


def test_a_shared_server_with_no_tokens_refuses_everyone(tmp_path: Path) -> None:
    from langgraph_sdk import get_client

    async def drive(url: str) -> None:
        client = get_client(url=url, headers={"Authorization": f"Bearer {ALICE}"})
        with pytest.raises(httpx.HTTPStatusError) as caught:
            await client.threads.search()
        assert caught.value.response.status_code == 403
        assert TOKENS_ENV in caught.value.response.text

    with dev_server(tmp_path, config="langgraph.shared.json", **{TOKENS_ENV: ""}) as url:
        asyncio.run(drive(url))
