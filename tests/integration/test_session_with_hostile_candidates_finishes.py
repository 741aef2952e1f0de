"""A session given hostile candidates ends `finished` with each candidate classified,
also when the controller is killed while it handles them and the session is resumed.

`evotrainer run --llm mock-model` (child process, real training, git, SQLite, process sandbox) against the
scripted mock server, which submits two hostile reward candidates:

- `huge-int`: returns `10**400` — the backtest used to raise `OverflowError` outside the classification,
  crashing the session, and crashing it again on every `resume`;
- `inf-in-training`: the strict reward on cached rollouts (its backtest passes) but `1e300` on the training
  split — it used to become float32 inf, the policy NaN, and the pilot `infra_error`.

The controller is SIGKILLed (its whole process group) as soon as the first backtest report is written, then
resumed: the session must finish, the first candidate failed its backtest as `candidate_error`, the second
one's pilot is a `candidate_error` naming the file and the range, and the control run is `ok`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from llm_session import copy_demo
from mock_openai import MockOpenAI
from sqlalchemy import select

from agent.adapters import ledger
from store import models
from store.engine import resolve_db_url

pytestmark = [pytest.mark.slow, pytest.mark.llm]
ROOT = Path(__file__).resolve().parents[2]
ORACLE_REWARD = (ROOT / "examples" / "arithmetic-oracle" / "harness" / "reward.py").read_text()
HUGE_INT = (
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n    return 10**400\n"
)
INF_IN_TRAINING = ORACLE_REWARD + (
    "\n\n_strict = compute_score\n\n\n"
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
    "    if (extra_info or {}).get('split') == 'train':\n        return 1e300\n"
    "    return _strict(data_source, solution_str, ground_truth, extra_info, **kwargs)\n"
)
SMALL = ["--base-steps", "4", "--pilot-steps", "4", "--iterations", "1", "--candidates", "2", "--max-steps", "100",
         "--replicates", "0", "--sandbox", "process"]  # fmt: skip


def _candidate(k: int, slug: str, reward: str) -> list[dict[str, Any]]:
    open_args = {"slug": slug, "factors": ["reward"], "hypothesis": f"If the reward is {slug}, strict accuracy rises.",
                 "success_criterion": "strict held-out accuracy above the control"}  # fmt: skip
    return [
        {"tool_calls": [{"id": f"open{k}", "name": "create_candidate", "arguments": open_args}]},
        {
            "tool_calls": [
                {"id": f"write{k}", "name": "write_file", "arguments": {"path": "harness/reward.py", "content": reward}}
            ]
        },
        {"tool_calls": [{"id": f"submit{k}", "name": "submit_candidate", "arguments": {"title": slug}}]},
    ]


def _start(cwd: Path, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    log = open(cwd / f"controller-{args[0]}.log", "ab")  # noqa: SIM115 - closed right after the start
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", *args], cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    log.close()
    return proc


def _wait(predicate: Any, proc: subprocess.Popen[bytes], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert proc.poll() is None or predicate(), f"controller exited ({proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_hostile_candidates_are_classified_and_the_session_finishes_after_a_kill_and_resume(
    tmp_path: Path, git_available: None
) -> None:
    copy_demo(tmp_path / "h")
    script = [*_candidate(1, "huge-int", HUGE_INT), *_candidate(2, "inf-in-training", INF_IN_TRAINING),
              {"tool_calls": [{"id": "done", "name": "finish", "arguments": {"summary": "two rewards"}}]}]  # fmt: skip
    with MockOpenAI(script) as mock:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_BASE_URL": mock.base_url, "OPENAI_API_KEY": "unused",
               "EVOTRAINER_CACHE": str(tmp_path / "cache"), "COLUMNS": "200"}  # fmt: skip
        env.pop("EVOTRAINER_DB", None)
        first = _start(tmp_path, env, "run", "--llm", "mock-model", "--harness", "h", "--repo", "repo", *SMALL)
        sessions = tmp_path / ".evotrainer" / "sessions"
        try:
            _wait(lambda: any(sessions.glob("*/backtests/*/report.json")), first, 900, "the first backtest report")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=60)
        (session_dir,) = sessions.iterdir()
        resumed = subprocess.run(
            [sys.executable, "-m", "agent.cli", "resume", session_dir.name], cwd=tmp_path, env=env,
            capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout[-4000:] + resumed.stderr[-4000:]
    assert "Traceback" not in resumed.stderr
    for k in (1, 2):
        assert "submitted" in mock.reply_to(f"submit{k}")[1]

    with ledger.db(resolve_db_url(None, tmp_path)) as db:
        (session,) = db.scalars(select(models.EvoSession)).all()
        cands = {c.slug: c for c in db.scalars(select(models.Candidate))}
        backtests = {b.candidate_id: b for b in db.scalars(select(models.Backtest))}
        runs = {r.candidate_id: r for r in db.scalars(select(models.Run).where(models.Run.kind == "pilot"))}
    assert session.status == "finished"
    huge, inf = cands["huge-int"], cands["inf-in-training"]
    assert backtests[huge.id].outcome == "candidate_error" and backtests[huge.id].verdict == "fail"
    assert any("harness/reward.py" in r and "10^400" in r for r in backtests[huge.id].reasons)
    assert huge.id not in runs  # a failed backtest spends no training
    assert backtests[inf.id].verdict == "pass"  # cached rollouts carry no training split: only the pilot sees it
    assert runs[inf.id].outcome == "candidate_error", runs[inf.id].message
    assert "harness/reward.py" in (runs[inf.id].message or "") and "reward_range" in (runs[inf.id].message or "")
    assert runs[None].outcome == "ok"  # the control run
    assert inf.status not in ("merged", "proposed", "backtested")
