"""An LLM-driven session end to end over HTTP, with real git, Docker and training.

`evotrainer run --llm mock-model` runs in a child process against the stdlib mock OpenAI server, which
replays tests/fixtures/llm/e2e_reward_fix.json: read the health report, sample spam rollouts, search
skills, open a reward candidate, read and rewrite the reward in its worktree, backtest it in the Docker
sandbox, submit it, finish. The graph then trains the candidate and the control (tiny model, 8 steps) and
decides. Token accounting in the store and in `evotrainer status` must equal what the mock reported.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from llm_session import copy_demo
from mock_openai import MockOpenAI, load_script
from sqlalchemy import select

from agent.adapters import ledger
from store import models
from store.engine import resolve_db_url

pytestmark = [pytest.mark.slow, pytest.mark.llm, pytest.mark.docker]
EVOTRAINER = str(Path(sys.executable).parent / "evotrainer")
SCRIPT = Path(__file__).resolve().parents[1] / "fixtures" / "llm" / "e2e_reward_fix.json"


def test_llm_session_diagnoses_edits_backtests_submits_then_trains_and_decides(
    tmp_path: Path, git_available: None, docker_client: object
) -> None:
    copy_demo(tmp_path / "h")
    script = load_script(SCRIPT)
    args = ["--llm", "mock-model", "--harness", "h", "--repo", "repo", "--sandbox", "docker", "--base-steps", "8",
            "--pilot-steps", "8", "--iterations", "1", "--candidates", "1", "--max-steps", "100"]  # fmt: skip
    with MockOpenAI(script) as mock:
        env = {**os.environ, "OPENAI_BASE_URL": mock.base_url, "OPENAI_API_KEY": "unused",
               "EVOTRAINER_CACHE": str(tmp_path / "cache"), "COLUMNS": "200"}  # fmt: skip
        env.pop("EVOTRAINER_DB", None)
        done = subprocess.run([EVOTRAINER, "run", *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=1800)  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert len(mock.requests) == len(script)  # the model's `finish` ended the loop
    assert '"verdict": "pass"' in mock.reply_to("backtest")[1]
    assert "submitted" in mock.reply_to("submit")[1]

    with ledger.db(resolve_db_url(None, tmp_path)) as db:
        (session,) = db.scalars(select(models.EvoSession)).all()
        (cand,) = db.scalars(select(models.Candidate)).all()
        backtests = db.scalars(select(models.Backtest).where(models.Backtest.candidate_id == cand.id)).all()
        runs = db.scalars(select(models.Run).where(models.Run.session_id == session.id)).all()
        usage = db.scalars(select(models.LLMUsage).order_by(models.LLMUsage.id)).all()
        used = db.scalars(select(models.SearchTrace).where(models.SearchTrace.used.is_(True))).all()
    assert session.policy == "llm" and session.status == "finished"
    assert cand.factor == "reward" and cand.status in ("kept", "pruned", "merged", "reverted")
    assert [b.verdict for b in backtests] == ["pass"]
    assert {r.kind for r in runs} == {"full", "pilot"} and len(runs) == 3  # v0, the candidate, the control
    assert [(u.prompt_tokens, u.completion_tokens) for u in usage] == mock.usages
    assert {t.tool for t in used} >= {"search_skills", "read_file"}

    prompt_total = sum(p for p, _ in mock.usages)
    assert str(prompt_total) in done.stdout  # the end-of-session LLM table
    status = subprocess.run([EVOTRAINER, "status"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert str(prompt_total + sum(c for _, c in mock.usages)) in status.stdout
    detail = subprocess.run([EVOTRAINER, "status", session.id], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert "LLM usage" in detail.stdout and str(prompt_total) in detail.stdout
