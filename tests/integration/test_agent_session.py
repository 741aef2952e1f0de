"""A whole campaign session on the demo harness: real training, git, Docker sandbox and SQL store.

Small step budgets keep it to a few minutes on 2 cores; the demo (`evotrainer run`) uses larger ones.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from store import models
from store.engine import make_engine, session_scope

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--base-steps", "12", "--pilot-steps", "12", "--iterations", "2", "--candidates", "2", "--max-steps", "200"]

pytestmark = [pytest.mark.slow, pytest.mark.docker]


def _cli(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _store(cwd: Path):  # type: ignore[no-untyped-def]
    return session_scope(make_engine(f"sqlite:///{cwd / '.evotrainer' / 'evotrainer.db'}"))


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def session_dir(tmp_path: Path, docker_client: object) -> Path:
    return tmp_path


def test_session_leaves_an_auditable_trail(session_dir: Path) -> None:
    """Every candidate is a branch, every version is in the ledger, hacked candidates are never merged."""
    out = _cli("run", "--harness", str(ROOT / "examples" / "arithmetic"), "--repo", "repo", *SMALL, cwd=session_dir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    repo = session_dir / "repo"
    branches = set(_git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/evo/").split())
    with _store(session_dir) as db:
        [session] = db.scalars(select(models.EvoSession)).all()
        assert session.status == "finished"
        versions = db.scalars(select(models.Version).order_by(models.Version.index)).all()
        candidates = db.scalars(select(models.Candidate)).all()
        runs = db.scalars(select(models.Run)).all()
        assert versions[0].index == 0 and versions[0].strict_score is not None
        assert len(versions) >= 2, "each iteration advances the incumbent (merge or continued control)"
        assert candidates, "the defective harness triggers at least one skill"
        for cand in candidates:
            assert cand.branch in branches
            if cand.status != "refused":
                assert _git(repo, "log", "-1", "--format=%B", cand.branch).strip(), cand.branch
        assert len({r.id for r in runs}) == len(runs)
        assert all(r.status == "finished" and r.outcome is not None for r in runs)
        merged = [c for c in candidates if c.status == "merged"]
        for cand in merged:
            assert _git(repo, "merge-base", "--is-ancestor", cand.branch, session.main_branch) == ""
        uses = db.scalars(select(models.SkillUse)).all()
        assert uses, "skills were applied and their use recorded"
    for run in runs:
        report = Path(run.artefact_dir) / "health_report.json"
        if run.candidate_id in {c.id for c in merged}:
            import json

            assert json.loads(report.read_text())["metrics"]["reward_hacking"] == 0


def _wait_for(predicate, timeout: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return False


def test_kill_nine_mid_training_then_resume_completes_without_duplicate_runs(session_dir: Path) -> None:
    """kill -9 of the controller while a pilot trains; `resume` finishes the session and launches no run twice."""
    args = [
        sys.executable,
        "-m",
        "agent.cli",
        "run",
        "--harness",
        str(ROOT / "examples" / "arithmetic"),
        "--repo",
        "repo",
        "--base-steps",
        "12",
        "--pilot-steps",
        "12",
        "--iterations",
        "1",
        "--candidates",
        "2",
    ]
    proc = subprocess.Popen(
        args,
        cwd=session_dir,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    runs_root = session_dir / ".evotrainer" / "sessions"

    def pilot_started() -> bool:
        return any(p.name.endswith("-control") for p in runs_root.glob("*/runs/*")) if runs_root.exists() else False

    assert _wait_for(pilot_started, 600), "the session never reached its pilots"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    [session_id] = [p.name for p in runs_root.iterdir()]
    out = _cli("resume", session_id, cwd=session_dir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    with _store(session_dir) as db:
        session = db.get(models.EvoSession, session_id)
        assert session is not None and session.status == "finished"
        runs = db.scalars(select(models.Run)).all()
    for run in runs:
        log = (Path(run.artefact_dir) / "train.log").read_text()
        assert log.count("step 0 |") == 1, f"{run.id} was launched more than once"
