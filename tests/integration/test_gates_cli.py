"""A gated session pauses at the launch gate, survives a kill, and `evotrainer approve` answers it.

The session is real (git repo copy of examples/arithmetic, SQLite store and checkpointer, heuristic policy,
process sandbox); its v0 run is fabricated and seeded into the checkpoint as observe's output, so the CLI
reaches the launch gate without training. Approval continues into real training (marked slow).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from llm_session import fake_session
from sqlalchemy import select

from agent.adapters import ledger
from agent.adapters.ledger import store_url
from agent.commands.run import _save_context
from store import models

EVOTRAINER = [str(Path(sys.executable).parent / "evotrainer")]


def _seed(tmp_path: Path, **context: object) -> tuple:
    """A session whose checkpoint says observe just ran (v0 fabricated); context saved for the CLI."""
    from agent.graph import builder
    from agent.session import checkpointer, thread_config

    settings = {"policy": "heuristic", "llm_model": "", "gate": "launch", "max_iterations": 1,
                "max_candidates": 1, "base_steps": 8, "pilot_steps": 8}  # fmt: skip
    ctx, state = fake_session(tmp_path, **{**settings, **context})
    _save_context(ctx, state["session_id"])
    with checkpointer(store_url(ctx)) as saver:
        builder.compile(checkpointer=saver).update_state(thread_config(state["session_id"]), state, as_node="observe")
    return ctx, state


def _cli(tmp_path: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EVOTRAINER_CACHE": str(tmp_path / "cache"), "COLUMNS": "200"}
    env.pop("EVOTRAINER_DB", None)
    return subprocess.run([*EVOTRAINER, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)


def _pause_then_kill(tmp_path: Path, ctx, session_id: str) -> int:  # type: ignore[no-untyped-def]
    """Resume the session in a child process, SIGKILL it once its launch gate is pending; return the gate id."""
    env = {**os.environ, "EVOTRAINER_CACHE": str(tmp_path / "cache")}
    proc = subprocess.Popen([*EVOTRAINER, "resume", session_id], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.time() + 240
    gate = None
    while time.time() < deadline and gate is None:
        time.sleep(0.5)
        with ledger.db(store_url(ctx)) as db:
            row = db.scalars(select(models.GateRequest).where(models.GateRequest.session_id == session_id)).first()
            gate = None if row is None else (row.id, row.status)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert gate is not None and gate[1] == "pending", "the session never reached its launch gate"
    return gate[0]


def test_rejected_launch_gate_survives_a_kill_and_prunes_the_candidate_with_the_note(
    tmp_path: Path, git_available: None
) -> None:
    ctx, state = _seed(tmp_path)
    session_id = state["session_id"]
    gate_id = _pause_then_kill(tmp_path, ctx, session_id)

    done = _cli(tmp_path, "approve", session_id, "--reject", "--note", "reward change too risky")
    assert done.returncode == 0, done.stderr + done.stdout
    assert "rejected the launch gate" in done.stdout

    with ledger.db(store_url(ctx)) as db:
        gate = db.get(models.GateRequest, gate_id)
        assert gate.status == "rejected" and gate.note == "reward change too risky"
        pack = gate.payload
        cands = db.scalars(select(models.Candidate).where(models.Candidate.session_id == session_id)).all()
        session = db.get(models.EvoSession, session_id)
        runs = db.scalars(select(models.Run).where(models.Run.session_id == session_id)).all()
    assert [c.status for c in cands] == ["pruned"]
    assert cands[0].refusal_reason == "rejected at the launch gate: reward change too risky"
    assert len(runs) == 1  # only the fabricated v0: nothing was trained
    assert session.status == "finished"
    # the pack a human saw: the diff, the backtest verdict, the diagnostic delta, the predicted cost
    shown = pack["candidates"][0]
    assert shown["diff"].startswith("diff --git") and shown["backtest"] in ("pass", "inconclusive")
    assert "rank_violations_before" in shown["diagnostic_delta"]
    assert pack["predicted_cost"]["training_steps"] == 16

    status = _cli(tmp_path, "status", session_id)
    assert status.returncode == 0 and "rejected at the launch gate" in status.stdout


@pytest.mark.slow
def test_approved_launch_gate_resumes_after_a_kill_into_training(tmp_path: Path, git_available: None) -> None:
    ctx, state = _seed(tmp_path, sandbox="none")  # the gate is under test here, not the sandbox
    session_id = state["session_id"]
    gate_id = _pause_then_kill(tmp_path, ctx, session_id)
    answered = _cli(tmp_path, "approve", session_id, "--note", "go", "--no-resume")
    assert answered.returncode == 0, answered.stderr
    resumed = _cli(tmp_path, "resume", session_id, timeout=1200)
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout
    with ledger.db(store_url(ctx)) as db:
        assert db.get(models.GateRequest, gate_id).status == "approved"
        runs = db.scalars(select(models.Run).where(models.Run.session_id == session_id)).all()
        cands = db.scalars(select(models.Candidate).where(models.Candidate.session_id == session_id)).all()
    assert len(runs) == 3, [r.id for r in runs]  # v0 + the candidate's pilot + the control
    assert cands[0].status in ("kept", "pruned", "merged", "reverted")
    assert json.loads((ctx.session_dir(session_id) / "context.json").read_text())["gate"] == "launch"


def test_two_failed_iterations_in_a_row_escalate_an_ungated_session_to_the_launch_gate(
    tmp_path: Path, git_available: None
) -> None:
    from agent.graph import builder
    from agent.session import checkpointer, thread_config

    ctx, state = fake_session(tmp_path, policy="heuristic", llm_model="", gate="none", max_candidates=1)
    state["failures_in_row"] = 2  # the paper's rule: two failed iterations → a human decides
    cfg = thread_config(state["session_id"])
    with checkpointer(store_url(ctx)) as saver:
        graph = builder.compile(checkpointer=saver)
        graph.update_state(cfg, state, as_node="observe")
        graph.invoke(None, cfg, context=ctx)
        snapshot = graph.get_state(cfg)
    (pack,) = [i.value for task in snapshot.tasks for i in task.interrupts]
    assert snapshot.next == ("launch_gate",)
    assert pack["gate"] == "launch" and pack["escalated"].startswith("2 failed iterations in a row")
