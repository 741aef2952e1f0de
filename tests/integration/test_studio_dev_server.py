"""`langgraph dev` serves the repository's langgraph.json offline; the official SDK drives it.

The server runs from the repository root on a free port (no analytics, no reload, no browser), with the
durable dev checkpointer pointed at a temporary file. The test lists assistants, reads the graph, creates
a thread, seeds it with a fabricated v0 (as observe's output, so no training is needed), runs it to the
launch gate and resumes it with a rejection: the run finishes and the store records the answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from dev_server import dev_server as serve
from llm_session import fake_session
from sqlalchemy import select

from agent.adapters import ledger
from agent.adapters.ledger import store_url
from store import models


@pytest.fixture()
def dev_server(tmp_path: Path) -> Iterator[str]:
    # The owner's settings come from the server's environment; a client's context may not set them.
    with serve(tmp_path, EVOTRAINER_SERVER_WORKDIR=str(tmp_path), EVOTRAINER_SERVER_SANDBOX="process") as url:
        yield url


def test_dev_server_lists_draws_runs_to_the_launch_gate_and_resumes(
    dev_server: str, tmp_path: Path, git_available: None
) -> None:
    from langgraph_sdk import get_client

    settings = {"policy": "heuristic", "llm_model": "", "gate": "launch", "max_iterations": 1, "max_candidates": 1,
                "base_steps": 8, "pilot_steps": 8}  # fmt: skip
    ctx, state = fake_session(tmp_path, **settings)
    context = settings

    async def drive() -> tuple:
        client = get_client(url=dev_server)
        assistants = await client.assistants.search()
        assistant = next(a for a in assistants if a["graph_id"] == "evotrainer")
        drawing = await client.assistants.get_graph(assistant["assistant_id"])
        thread = await client.threads.create(metadata={"session": state["session_id"], "graph_id": "evotrainer"})
        tid = thread["thread_id"]
        await client.threads.update_state(tid, state, as_node="observe")
        await client.runs.wait(tid, "evotrainer", input=None, context=context)
        at_gate = await client.threads.get_state(tid)
        await client.runs.wait(tid, "evotrainer", command={"resume": {"approve": False, "note": "from studio"}},
                               context=context)  # fmt: skip
        final = await client.threads.get_state(tid)
        return assistants, drawing, at_gate, final

    assistants, drawing, at_gate, final = asyncio.run(drive())
    assert any(a["graph_id"] == "evotrainer" for a in assistants)
    nodes = {n["id"] for n in drawing["nodes"]}
    assert {"observe", "diagnose", "propose", "backtest", "launch_gate", "train", "promote_gate", "record"} <= nodes
    assert at_gate["next"] == ["launch_gate"], at_gate
    interrupts = [i["value"] for task in at_gate["tasks"] for i in task["interrupts"]]
    assert interrupts and interrupts[0]["gate"] == "launch" and interrupts[0]["candidates"][0]["diff"]
    assert final["next"] == [] and final["values"]["status"] == "finished"
    with ledger.db(store_url(ctx)) as db:
        gate = db.scalars(select(models.GateRequest)).one()
        assert (gate.status, gate.note) == ("rejected", "from studio")
