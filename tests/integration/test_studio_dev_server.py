"""Issue #6: `langgraph dev` serves the repository's langgraph.json offline; the official SDK drives it.

The server runs from the repository root on a free port (no analytics, no reload, no browser), with the
durable dev checkpointer pointed at a temporary file. The test lists assistants, reads the graph, creates
a thread, seeds it with a fabricated v0 (as observe's output, so no training is needed), runs it to the
launch gate and resumes it with a rejection: the run finishes and the store records the answer.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from llm_session import fake_session
from sqlalchemy import select

from agent import ledger
from agent.ledger import store_url
from store import models

ROOT = Path(__file__).resolve().parents[2]
LANGGRAPH = Path(sys.executable).parent / "langgraph"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def dev_server(tmp_path: Path) -> str:
    if not LANGGRAPH.exists():
        pytest.skip("langgraph-cli[inmem] is not installed")
    port = _free_port()
    env = {**os.environ, "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGSMITH_TRACING": "false",
           "EVOTRAINER_STUDIO_DB": str(tmp_path / "studio.db")}  # fmt: skip
    log = open(tmp_path / "dev.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [str(LANGGRAPH), "dev", "--no-browser", "--no-reload", "--port", str(port), "--config", "langgraph.json"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:
            try:
                urllib.request.urlopen(url + "/ok", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail(f"langgraph dev did not start: {(tmp_path / 'dev.log').read_text()[-3000:]}")
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_dev_server_lists_draws_runs_to_the_launch_gate_and_resumes(
    dev_server: str, tmp_path: Path, git_available: None
) -> None:
    from langgraph_sdk import get_client

    settings = {"policy": "heuristic", "llm_model": "", "gate": "launch", "max_iterations": 1, "max_candidates": 1,
                "base_steps": 8, "pilot_steps": 8}  # fmt: skip
    ctx, state = fake_session(tmp_path, **settings)
    context = {"workdir": str(tmp_path), "sandbox": "process", **settings}

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
