"""A client of `langgraph dev` chooses only what the server's owner allows.

Against a real `langgraph dev` (offline, free port) driven by the official `langgraph-sdk`, with the owner's
settings in the server's environment (workdir, sandbox, harness roots):

- a run whose context sets `sandbox: none`, a `ray_address`, `workdir`, `db_url`, `backend`, a price, a
  budget above the owner's cap or an unknown key fails, with an error naming the field (and, for the owner's
  fields and caps, the variable the owner sets); the same through `config.configurable` and through an
  assistant's stored context;
- the Ray address a client named is never contacted, and nothing is created at the paths it named;
- a harness outside the owner's roots, or a `repo` of the client's choosing, is refused;
- the context schema the server publishes lists only the fields a client may set.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from dev_server import dev_server
from llm_session import copy_demo

from agent.launch.server_context import CLIENT_FIELDS, HARNESS_ROOTS_ENV

pytestmark = [pytest.mark.slow]


class Listener:
    """A TCP port that records whether anyone connected (the Ray address a client names)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self.connections = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


def test_a_client_context_cannot_choose_where_code_runs_or_data_goes(tmp_path: Path, git_available: None) -> None:
    from langgraph_sdk import get_client

    work, roots, elsewhere = tmp_path / "work", tmp_path / "harnesses", tmp_path / "elsewhere"
    work.mkdir()
    harness = copy_demo(roots / "arith")
    outside = copy_demo(elsewhere / "arith")
    ray = Listener()
    settings = {"max_iterations": 1, "max_candidates": 1, "base_steps": 4, "pilot_steps": 4}
    refused_contexts: list[tuple[dict[str, Any], str]] = [
        ({"sandbox": "none"}, "EVOTRAINER_SERVER_SANDBOX"),
        ({"ray_address": f"http://127.0.0.1:{ray.port}"}, "EVOTRAINER_SERVER_RAY_ADDRESS"),
        ({"workdir": str(elsewhere)}, "EVOTRAINER_SERVER_WORKDIR"),
        ({"db_url": f"sqlite:///{elsewhere / 'stolen.db'}"}, "EVOTRAINER_SERVER_DB_URL"),
        ({"backend": "verl"}, "EVOTRAINER_SERVER_BACKEND"),
        ({"gatee": "launch"}, "unknown context field 'gatee'"),
        ({"max_train_steps": 10**5}, "cap 2400: ask for at most 2400 (the server's owner sets EVOTRAINER_SERVER_MAX_T"),
        ({"price_per_1k": 0}, "EVOTRAINER_SERVER_PRICE_PER_1K"),
    ]
    owner = {"EVOTRAINER_SERVER_WORKDIR": str(work), "EVOTRAINER_SERVER_SANDBOX": "process",
             HARNESS_ROOTS_ENV: str(roots), "EVOTRAINER_CACHE": str(tmp_path / "cache")}  # fmt: skip

    async def drive(url: str) -> dict[str, Any]:
        client = get_client(url=url)
        [assistant] = await client.assistants.search(graph_id="evotrainer", metadata={"created_by": "system"})
        schemas = await client.assistants.get_schemas(assistant["assistant_id"])
        out: dict[str, Any] = {"schemas": schemas, "context": [], "configurable": [], "input": []}

        async def run(**kwargs: Any) -> tuple[Any, str]:
            thread = await client.threads.create()
            result = await client.runs.wait(thread["thread_id"], raise_error=False, **kwargs)
            status = (await client.threads.get(thread["thread_id"]))["status"]
            return result, status

        good = {"harness": str(harness)}
        for extra, _ in refused_contexts:
            out["context"].append(await run(assistant_id="evotrainer", input=good, context={**settings, **extra}))
            out["configurable"].append(
                await run(assistant_id="evotrainer", input=good, config={"configurable": {**settings, **extra}})
            )
        stored = await client.assistants.create("evotrainer", context={"sandbox": "none"}, name="client-made")
        out["assistant"] = await run(assistant_id=stored["assistant_id"], input=good, context=settings)
        await client.assistants.delete(stored["assistant_id"])  # the dev server keeps it in .langgraph_api/
        for bad_input in ({"harness": str(outside)}, {"harness": "../elsewhere/arith"},
                          {"harness": str(harness), "repo": str(elsewhere / "repo")}):  # fmt: skip
            out["input"].append(await run(assistant_id="evotrainer", input=bad_input, context=settings))
        return out

    try:
        with dev_server(tmp_path, **owner) as url:
            out = asyncio.run(drive(url))
    finally:
        ray.close()

    for (extra, expected), via_context, via_configurable in zip(
        refused_contexts, out["context"], out["configurable"], strict=True
    ):
        [field] = extra
        for result, status in (via_context, via_configurable):
            error = json.dumps(result)
            assert status == "error" and "__error__" in result, (extra, result)
            assert repr(field) in error and expected in error, (extra, error)
    result, status = out["assistant"]
    assert status == "error" and "EVOTRAINER_SERVER_SANDBOX" in json.dumps(result), result
    outside_error, dotdot_error, repo_error = (json.dumps(result) for result, _ in out["input"])
    assert "not under the server's harness roots" in outside_error and str(outside) in outside_error
    assert "not under the server's harness roots" in dotdot_error, dotdot_error
    assert "'repo' is decided by the server" in repo_error, repo_error
    assert ray.connections == 0, "the controller contacted the Ray address a client named"
    assert sorted(p.name for p in elsewhere.iterdir()) == ["arith"], "something was created where a client said"
    assert not (work / "evotrainer-arith").exists() and not (work / ".evotrainer" / "sessions").exists()
    context_schema = out["schemas"]["context_schema"]
    [published] = context_schema["allOf"]
    assert set(published["properties"]) == set(CLIENT_FIELDS), context_schema
