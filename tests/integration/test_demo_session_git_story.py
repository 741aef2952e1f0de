"""A real demo-like session tells its story in git, in its names, at its end and in its report.

One `evotrainer run` on the demo harness (tiny CPU model, short budget: two iterations of two candidates;
real training, git, Docker sandbox and SQLite store). Then:

- `git log --first-parent` of the session's main line holds exactly one commit per ledger version, in order
  (control continuations included), each tagged `evo/<session>/v<n>`; every subject in the repository is at
  most 72 characters; `git log --graph --all` draws the final version on top, and every decision commit is
  dated no later than the version commit that follows it;
- a candidate's one name `v<i>.<k>-<slug>` is its branch, its run folder, its report label and its CLI row;
- the end-of-run summary names the final and the best version, the one to use, and the final checkpoint;
- the report of this session renders its health and optimisation curves and its rollout viewer in Chromium;
- a run folder named the old way (`<session>-i<i>-k<i>.<k>-<slug>`) is found again by `train`, not re-run.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select

from store import models
from store.engine import make_engine, session_scope

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--base-steps", "12", "--pilot-steps", "12", "--iterations", "2", "--candidates", "2", "--max-steps", "200"]
SUBJECT_MAX = 72
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)

pytestmark = [pytest.mark.slow, pytest.mark.docker]


@dataclass(frozen=True)
class Demo:
    cwd: Path
    repo: Path
    session_id: str
    stdout: str

    def git(self, *args: str) -> str:
        return subprocess.run(["git", "-C", str(self.repo), *args], capture_output=True, text=True, check=True).stdout

    def store(self):  # type: ignore[no-untyped-def]
        return session_scope(make_engine(f"sqlite:///{self.cwd / '.evotrainer' / 'evotrainer.db'}"))


def _cli(*args: str, cwd: Path, timeout: float = 1500) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
    )


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, docker_client: object) -> Demo:
    cwd = tmp_path_factory.mktemp("demo")
    harness = ROOT / "examples" / "arithmetic"
    out = _cli("run", "--harness", str(harness), "--repo", "repo", *SMALL, "--escalate-after", "0", cwd=cwd)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    [session_id] = [p.name for p in (cwd / ".evotrainer" / "sessions").iterdir()]
    return Demo(cwd, cwd / "repo", session_id, out.stdout)


def _ledger(demo: Demo) -> tuple[list[models.Version], list[models.Candidate], list[models.Run]]:
    with demo.store() as db:
        versions = list(db.scalars(select(models.Version).order_by(models.Version.index)))
        candidates = list(db.scalars(select(models.Candidate)))
        runs = list(db.scalars(select(models.Run)))
        db.expunge_all()
    return versions, candidates, runs


def test_main_line_has_one_commit_per_version_with_short_subjects(demo: Demo) -> None:
    versions, _, runs = _ledger(demo)
    main = f"evo/{demo.session_id}/main"
    log = demo.git("log", "--first-parent", "--reverse", "--format=%H\t%s", main)
    line = [row.split("\t", 1) for row in log.splitlines()]
    assert [sha for sha, _ in line] == [v.commit_sha for v in versions], "one main-line commit per version, in order"
    assert len(versions) == 3  # v0 and one version per iteration (merged or continued)
    assert [s.split(":", 1)[0] for _, s in line] == [f"v{v.index}" for v in versions]
    continued = [v for v in versions[1:] if next(r for r in runs if r.id == v.run_id).candidate_id is None]
    assert continued, "this budget ends at least one iteration with the control (a continuation commit)"
    for v in continued:
        assert demo.git("diff", "--stat", f"{v.commit_sha}^", v.commit_sha) == ""  # the harness did not change
        assert "harness trained on" in demo.git("log", "-1", "--format=%s", v.commit_sha)
    for v in versions:
        assert demo.git("rev-parse", f"evo/{demo.session_id}/v{v.index}^{{commit}}").strip() == v.commit_sha
    subjects = demo.git("log", "--all", "--format=%s").splitlines()
    assert subjects and max(len(s) for s in subjects) <= SUBJECT_MAX, max(subjects, key=len)
    bodies = demo.git("log", "--all", "--format=%B%x00").split("\x00")
    assert any("Hypothesis:" in b for b in bodies) and any("Evidence" in b or "Run:" in b for b in bodies)


def test_pruned_candidates_are_drawn_below_the_version_that_followed(demo: Demo) -> None:
    versions, candidates, _ = _ledger(demo)
    top = demo.git("log", "--graph", "--all", "--format=%H").splitlines()[0]
    assert top.endswith(versions[-1].commit_sha), "the final version is drawn on top of `git log --graph --all`"
    dated = {v.index: int(demo.git("log", "-1", "--format=%ct", v.commit_sha)) for v in versions}
    for cand in candidates:
        tip = demo.git("log", "-1", "--format=%ct%x09%s", cand.branch).strip().split("\t", 1)
        if cand.iteration in dated and tip[1].startswith("decision:"):
            assert int(tip[0]) <= dated[cand.iteration], f"{cand.branch}'s decision is dated after v{cand.iteration}"


def test_a_candidate_has_one_name_in_branch_run_folder_report_and_cli(demo: Demo) -> None:
    _, candidates, runs = _ledger(demo)
    status = _cli("status", demo.session_id, cwd=demo.cwd)
    assert status.returncode == 0, status.stderr
    trained = [c for c in candidates if any(r.candidate_id == c.id for r in runs)]
    assert trained
    for cand in candidates:
        name = cand.id.removeprefix(f"{demo.session_id}-")
        assert re.fullmatch(rf"v{cand.iteration}\.\d+-{cand.slug}", name)
        assert cand.branch == f"evo/{demo.session_id}/{name}"
        assert name in status.stdout
    for cand in trained:
        name = cand.id.removeprefix(f"{demo.session_id}-")
        assert (demo.cwd / ".evotrainer" / "sessions" / demo.session_id / "runs" / f"{demo.session_id}-{name}").is_dir()
    controls = [r.id for r in runs if r.kind == "pilot" and r.candidate_id is None]
    assert controls and all(re.fullmatch(rf"{demo.session_id}-v\d+\.0-control(-r\d+)?", r) for r in controls)


def test_end_of_run_summary_names_final_best_and_the_checkpoint(demo: Demo) -> None:
    versions, _, _ = _ledger(demo)
    final = versions[-1]
    best = max(versions, key=lambda v: (v.strict_score or 0.0, v.index))
    text = " ".join(demo.stdout.split())  # rich wraps long lines
    assert f"final v{final.index}: strict {final.strict_score:.3f}" in text
    assert f"best v{best.index}: strict {best.strict_score:.3f}" in text
    assert re.search(r"use v\d+: ", text)
    found = re.search(rf"final checkpoint \(v{final.index}\): (\S+last\.pt)", text)
    assert found and Path(found[1]).is_file()
    assert f"alerts of the final version v{final.index}:" in text and "remaining alerts" not in text
    with demo.store() as db:
        reports = {r.run_id for r in db.scalars(select(models.HealthReport))}
    assert final.run_id in reports, "finish diagnosed the final version"


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install -y chromium)")
def test_report_of_the_session_renders_its_curves_and_rollouts(demo: Demo) -> None:
    out = demo.cwd / "report.html"
    made = _cli("report", demo.session_id, "--out", str(out), cwd=demo.cwd)
    assert made.returncode == 0, made.stderr
    cmd = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={demo.cwd / 'profile'}",
        "--virtual-time-budget=20000", "--dump-dom", out.as_uri(),
    ]  # fmt: skip
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=240, check=True).stdout
    versions, _, _ = _ledger(demo)
    at = dom.find('id="optim-versions"')
    optim = dom[at:]
    assert at > 0 and "js-plotly-plot" in dom[dom.rfind("<div", 0, at) : at + 200], "plotly did not draw optim-versions"
    for title in ("entropy", "policy-gradient loss", "learning rate", "gradient norm"):
        assert title in optim[:200_000]
    assert optim[:200_000].count('class="js-line"') >= 5 * len(versions)  # every version has every panel's line
    assert re.search(r'id="rollout-select"[^>]*data-ready="1"', dom)
    assert len(re.findall(r'class="rollout-table"', dom)) >= len(versions)
    health = re.search(r'<table id="health-table">.*?</table>', dom, re.S)
    assert health is not None and health[0].count("<tr>") == len(versions) + 1  # one row per version


def test_a_resumed_session_finds_its_old_named_run_folder(demo: Demo, tmp_path: Path) -> None:
    """`train` re-run on a session started before the rename reuses `<session>-i<i>-k…` instead of training again."""
    from langgraph.runtime import Runtime

    from agent.context import Context
    from agent.nodes.train import train

    versions, candidates, runs = _ledger(demo)
    run = next(r for r in runs if r.candidate_id is not None and not r.id.endswith("-r1"))
    cand = next(c for c in candidates if c.id == run.candidate_id)
    sid, name = demo.session_id, cand.id.removeprefix(f"{demo.session_id}-")
    legacy = f"{sid}-i{cand.iteration}-k{name[1:]}"
    runs_dir = tmp_path / ".evotrainer" / "sessions" / sid / "runs"
    shutil.copytree(run.artefact_dir, runs_dir / legacy)
    # the train node acts only on the session's own folders: the candidate's worktree moves with the store
    worktree = runs_dir.parent / "worktrees" / Path(cand.worktree_path).name
    shutil.copytree(cand.worktree_path, worktree, symlinks=True)
    # SQLite's backup API, not a file copy: the store runs in WAL mode, so recent commits may live in `-wal` only.
    with (
        closing(sqlite3.connect(demo.cwd / ".evotrainer" / "evotrainer.db")) as src,
        closing(sqlite3.connect(tmp_path / ".evotrainer" / "evotrainer.db")) as dst,
    ):
        src.backup(dst)
    url = f"sqlite:///{tmp_path / '.evotrainer' / 'evotrainer.db'}"
    ctx = Context(workdir=str(tmp_path), db_url=url, sandbox="none")
    payload = {
        "candidate": {"id": cand.id, "worktree": str(worktree)},
        "version": {"checkpoint": "", "steps": 12, "commit": versions[0].commit_sha},
        "iteration": cand.iteration,
        "session_id": sid,
        "harness_dir": str(demo.repo),
    }
    [pilot] = train(payload, Runtime(context=ctx))["pilots"]
    assert pilot["run_id"] == legacy and pilot["outcome"] == "ok"
    assert (runs_dir / legacy / "train.log").read_text().count("step 0 |") == 1, "the finished run was not re-run"
    assert not (runs_dir / f"{sid}-{name}").exists()
