"""What a git killed with SIGKILL leaves (lock files, a half-made worktree) is removed on resume (real git, real kills).

CI stop 37: a `kill -9` of the controller while git moved a candidate's ref left
`refs/heads/evo/<session>/….lock`, and the resume failed with "cannot lock ref … File exists".
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.context import Context
from agent.session import recover_repo
from sandboxes import git_recovery as gr
from sandboxes import git_worktree as gw

DEMO = Path(__file__).resolve().parents[2] / "examples" / "arithmetic"
pytestmark = pytest.mark.usefixtures("git_available")
SID = "s1"


def _wait(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _kill9(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)  # the whole group, as `kill -9` of a controller and its git child
    proc.wait(timeout=30)


def _hold_ref_lock(root: Path, ref: str) -> subprocess.Popen[bytes]:
    """A real git holding `ref`'s lock: an `update-ref --stdin` transaction prepared and not yet committed."""
    proc = subprocess.Popen(
        ["git", "update-ref", "--stdin"],
        cwd=root,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert proc.stdin is not None
    proc.stdin.write(f"start\nupdate {ref} HEAD\nprepare\n".encode())
    proc.stdin.flush()
    _wait(lambda: (root / ".git" / f"{ref}.lock").exists(), f"git to lock {ref}")
    return proc


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


@pytest.fixture
def repo(tmp_path: Path):  # type: ignore[no-untyped-def]
    repo = gw.init_session_repo(DEMO, tmp_path / "repo")
    gw.create_session_branch(repo, SID)
    return repo


def test_a_ref_lock_left_by_a_killed_git_is_removed_and_the_branch_moves_again(repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root, wt = Path(repo.working_tree_dir), tmp_path / "wt"
    cand = gw.create_candidate(repo, SID, 1, 1, "dense", f"evo/{SID}/main", wt)
    ref = f"refs/heads/{cand.branch}"
    git = _hold_ref_lock(root, ref)
    lock = root / ".git" / f"{ref}.lock"

    # While the git that holds it lives, a fresh lock is its, not stale: nothing is removed.
    assert gr.recover_after_kill(root, SID, wt).locks == []
    assert lock.exists()

    _kill9(git)
    assert lock.exists(), "SIGKILL gives git no chance to remove its lock"
    with pytest.raises(gw.GitWorktreeError, match="File exists"):
        gw.amend_decision_note(repo, cand.branch, "kept: pilot beat control")

    done = gr.recover_after_kill(root, SID, wt)
    assert done.locks == [lock] and not lock.exists()
    assert gw.amend_decision_note(repo, cand.branch, "kept: pilot beat control")
    assert gr.recover_after_kill(root, SID, wt).locks == []  # nothing left: a second call is a no-op


def test_locks_outside_the_session_go_only_when_no_git_runs_in_the_repository(repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root, wt = Path(repo.working_tree_dir), tmp_path / "wt"
    other = _hold_ref_lock(root, "refs/heads/user-branch")  # the user's, or another session's
    own = root / ".git" / "refs" / "heads" / "evo" / SID / "v1.1-dense.lock"
    own.write_text("")
    _age(own, 2 * gr.STALE_AFTER_S)
    try:
        done = gr.recover_after_kill(root, SID, wt)
        # A git works in the repository: its lock stays; the session's own old lock is stale all the same.
        assert done.locks == [own]
        assert (root / ".git" / "refs/heads/user-branch.lock").exists()
    finally:
        _kill9(other)
    config_lock = root / ".git" / "config.lock"  # what a killed `git config` leaves
    config_lock.write_text("")
    done = gr.recover_after_kill(root, SID, wt)
    assert sorted(done.locks) == sorted([config_lock, root / ".git" / "refs/heads/user-branch.lock"])
    gw.create_candidate(repo, SID, 1, 2, "after", f"evo/{SID}/main", wt)  # writes the config: it works again


def test_a_worktree_whose_add_was_killed_is_removed_and_made_again_whole(repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root, wt = Path(repo.working_tree_dir), tmp_path / "wt"
    # A slow checkout (a smudge filter that sleeps on one file) holds `git worktree add` mid-checkout.
    (root / ".gitattributes").write_text("harness/reward.py filter=slow\n")
    subprocess.run(["git", "add", ".gitattributes"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-qm", "slow checkout"], cwd=root, check=True, env={**os.environ, **gw._IDENTITY})
    subprocess.run(["git", "branch", "-f", f"evo/{SID}/main", "HEAD"], cwd=root, check=True)
    subprocess.run(["git", "config", "filter.slow.smudge", "sleep 120; cat"], cwd=root, check=True)
    make = (
        "from pathlib import Path; from git import Repo; from sandboxes import git_worktree as gw; "
        f"gw.create_candidate(Repo({str(root)!r}), {SID!r}, 1, 1, 'dense', 'evo/{SID}/main', Path({str(wt)!r}))"
    )
    controller = subprocess.Popen(
        [sys.executable, "-c", make], cwd=Path(__file__).resolve().parents[2], start_new_session=True
    )
    gitdir = root / ".git" / "worktrees" / "v1.1-dense"
    _wait(lambda: (gitdir / "locked").exists() and (gitdir / "index.lock").exists(), "the checkout to start")
    _kill9(controller)
    path = (wt / SID / "v1.1-dense").resolve()
    assert (gitdir / "locked").read_text().strip() == gr.INITIALIZING
    assert not (path / "harness" / "reward.py").exists(), "the kill should come before the slow file"
    reused = gw.create_candidate(repo, SID, 1, 1, "dense", f"evo/{SID}/main", wt)
    assert reused.path == path  # without recovery the half-made worktree is handed out as the candidate

    subprocess.run(["git", "config", "--unset", "filter.slow.smudge"], cwd=root, check=True)
    done = gr.recover_after_kill(root, SID, wt)
    assert done.worktrees == [path] and not path.exists()
    again = gw.create_candidate(repo, SID, 1, 1, "dense", f"evo/{SID}/main", wt)
    assert (again.path / "harness" / "reward.py").is_file()
    assert subprocess.run(["git", "status", "--porcelain"], cwd=again.path, capture_output=True, text=True).stdout == ""


def test_a_resume_clears_what_the_killed_controller_left(repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`agent.session.run_graph` calls `recover_repo` before the graph runs: the session's own stale locks go."""
    ctx = Context(workdir=str(tmp_path))
    root = Path(repo.working_tree_dir)
    cand = gw.create_candidate(repo, SID, 1, 1, "dense", f"evo/{SID}/main", ctx.worktrees_root(SID))
    _kill9(_hold_ref_lock(root, f"refs/heads/{cand.branch}"))
    recover_repo(ctx, SID, str(root))
    assert gw.amend_decision_note(repo, cand.branch, "kept: pilot beat control")
    recover_repo(ctx, SID, str(tmp_path / "no-repo-yet"))  # before `setup` built the repository: nothing to do


def test_a_candidate_reopened_after_a_kill_mid_edit_is_edited_again_from_its_base(tmp_path: Path) -> None:
    """Killed between editing a candidate and committing it, the re-run must not apply its edit twice."""
    from llm_session import fake_session

    from agent.decisions.candidates import open_candidate

    ctx, state = fake_session(tmp_path, max_candidates=1)

    def reopen() -> Path:
        cand = open_candidate(ctx, state, 1, "dense", hypothesis="h", factors=("reward",), success_criterion="c")
        assert not cand.committed
        return Path(cand.info["worktree"])

    wt = reopen()
    reward = wt / "harness" / "reward.py"
    before = reward.read_text()
    reward.write_text(before + "SCALE = 4 * SCALE\n")  # half an edit, then kill -9: nothing committed
    (wt / "harness" / "extra.py").write_text("x = 1\n")
    assert reopen() == wt
    assert reward.read_text() == before and not (wt / "harness" / "extra.py").exists()
