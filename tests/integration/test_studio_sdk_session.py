"""A Studio / SDK user starts a session with only a harness path, streams it, answers its gate.

Against a real `langgraph dev` (offline, free port) driven by the official `langgraph-sdk`:

- `get_schemas` returns an input schema that names `harness` (Studio's input form);
- bad input comes back as a readable run error naming the problem, not "An internal error occurred";
- the SDK example of docs/studio.md, run as written except for its URL, HARNESS and SETTINGS lines,
  starts a session from nothing (the `setup` node creates repository, store and session), streams it
  to the launch gate and rejects it with a note: the session finishes and the store has the answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dev_server import ROOT, dev_server
from llm_session import copy_demo
from sqlalchemy import select

from store import models
from store.engine import make_engine, session_scope

DOC = ROOT / "docs" / "studio.md"

pytestmark = [pytest.mark.slow]


def _doc_example(url: str, harness: Path, settings: dict[str, Any]) -> str:
    """The doc's Python block with its three parameter lines replaced (each must be there exactly once)."""
    [code] = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    for name, value in (("URL", repr(url)), ("HARNESS", repr(str(harness))), ("SETTINGS", repr(settings))):
        code, n = re.subn(rf"^{name} = .*$", f"{name} = {value}", code, flags=re.M)
        assert n == 1, f"docs/studio.md must assign {name} on one line"
    return code


def test_sdk_starts_a_session_from_a_harness_path_streams_it_and_answers_its_gate(
    tmp_path: Path, git_available: None
) -> None:
    from langgraph_sdk import get_client

    harness = copy_demo(tmp_path / "my-harness")
    settings = {"gate": "launch", "max_iterations": 1, "max_candidates": 1, "base_steps": 4, "pilot_steps": 4}
    owner = {"EVOTRAINER_SERVER_WORKDIR": str(tmp_path), "EVOTRAINER_SERVER_SANDBOX": "process",
             "EVOTRAINER_SERVER_HARNESS_ROOTS": str(tmp_path)}  # fmt: skip
    with dev_server(tmp_path, EVOTRAINER_CACHE=str(tmp_path / "cache"), **owner) as url:

        async def schema_and_bad_input() -> tuple[dict[str, Any], Any]:
            client = get_client(url=url)
            [assistant] = await client.assistants.search(graph_id="evotrainer", metadata={"created_by": "system"})
            schemas = await client.assistants.get_schemas(assistant["assistant_id"])
            thread = await client.threads.create()
            bad = await client.runs.wait(
                thread["thread_id"], "evotrainer", input={"harness": str(tmp_path / "missing")}, context=settings,
                raise_error=False,
            )  # fmt: skip
            return schemas, bad

        schemas, bad = asyncio.run(schema_and_bad_input())
        out = subprocess.run(
            [sys.executable, "-c", _doc_example(url, harness, settings)],
            cwd=tmp_path, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip

    input_schema = schemas["input_schema"]
    assert input_schema is not None and "harness" in input_schema["properties"], schemas
    error = json.dumps(bad)
    assert "does not exist" in error and str(tmp_path / "missing") in error, error
    assert "internal error" not in error.lower(), error

    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "gate: launch" in out.stdout, out.stdout
    assert "finished" in out.stdout.splitlines()[-1], out.stdout
    session_id = out.stdout.splitlines()[-1].split()[1]
    engine = make_engine(f"sqlite:///{tmp_path / '.evotrainer' / 'evotrainer.db'}")
    with session_scope(engine) as db:
        session = db.get(models.EvoSession, session_id)
        assert session is not None and session.status == "finished"
        assert Path(session.harness_path) == harness.resolve()
        gate = db.scalars(select(models.GateRequest).where(models.GateRequest.session_id == session_id)).one()
        assert (gate.gate, gate.status, gate.note) == ("launch", "rejected", "not now")
        versions = db.scalars(select(models.Version).where(models.Version.session_id == session_id)).all()
        assert versions and versions[0].index == 0
    engine.dispose()
    repo = Path(session.repo_path)
    assert repo == (tmp_path / "evotrainer-arithmetic").resolve(), repo
    assert (repo / "evotrainer.yaml").read_text() == (harness / "evotrainer.yaml").read_text()
