"""Git adapter, recovery: worktrees put back at a known state, and what a git killed with SIGKILL leaves behind.

`restore_to_base` puts a refused candidate's worktree back at its base commit; `discard_uncommitted` drops
the half-made edit a killed controller left in a candidate it had not committed yet (the re-run edits again
from the committed tree). Both reset with ``reset --hard`` + ``clean -ffdx`` and remove what git does not
see (FIFOs, sockets, devices).

A controller killed with ``kill -9`` takes its git child with it (one process group). Git then cannot
remove what it holds while it works, and the next ``resume`` fails on it (CI, stop 37: ``cannot lock ref
'refs/heads/evo/<session>/v1.1-…': Unable to create '….lock': File exists``):

- *lock files* (``<ref>.lock``, ``index.lock``, ``config.lock``, ``packed-refs.lock``…): git creates them
  with ``O_EXCL`` and renames or removes them when it is done; every later writer of that file refuses to
  run while one exists.
- *a half-made worktree*: ``git worktree add`` marks the new worktree ``locked`` ("initializing") until its
  checkout is complete. Killed during the checkout, it leaves the worktree registered on the candidate's
  branch with part of the files missing; reused as it is, the candidate would commit those files' deletion.

`recover_after_kill` runs on every session start and resume (``agent.session.run_graph``) and removes them,
as far as they are provably stale:

- what belongs to the session (its refs and tags under ``evo/<session>/``, the private git folders of its
  worktrees, its half-made worktrees) is written by the session's controller alone, so it is removed, unless
  a live git process works in the repository and the file is younger than ``STALE_AFTER_S`` (git holds its
  locks for milliseconds);
- repository-wide locks (another session or the user may share the repository) only when no git process
  runs in the repository or any of its worktrees, which needs ``/proc`` (Linux); elsewhere they stay and
  git's own message names the file to remove.

Git runs through ``git_worktree``'s command wrapper.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from sandboxes.git_worktree import BASE_CONFIG_KEY, GitWorktreeError, _check_session, _git, _rev

STALE_AFTER_S = 10.0
INITIALIZING = "initializing"  # what `git worktree add` writes into `locked` until its checkout is done


@dataclass
class Recovered:
    """What `recover_after_kill` removed."""

    locks: list[Path] = field(default_factory=list)
    worktrees: list[Path] = field(default_factory=list)


def recover_after_kill(root: Path, session_id: str, worktrees_root: Path) -> Recovered:
    """Remove the stale lock files and half-made worktrees a killed git left in the repository at `root`.

    `worktrees_root` is the folder the session's candidate worktrees live under (``<root>/<session>/…``, as
    `git_worktree.create_candidate` makes them).

    Raises:
        BranchNameError: invalid session id.
        GitWorktreeError: `root` is not a git repository.
    """
    _check_session(session_id)
    common = Path(_git(root, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    ours = (worktrees_root / session_id).resolve()
    gitdirs = _worktree_gitdirs(common)
    own_gitdirs = [gd for gd, wt in gitdirs.items() if wt.is_relative_to(ours)]
    own = [lock for ns in ("heads", "tags") for lock in _locks(common / "refs" / ns / "evo" / session_id)]
    own += [lock for gd in own_gitdirs for lock in gd.glob("*.lock")]
    shared = [*common.glob("*.lock"), *_locks(common / "refs"), *common.glob("worktrees/*/*.lock")]
    # Looked for after listing: a git that starts later cannot take a listed lock (the file exists), so a
    # listed lock with no git alive in the repository is one a dead git left.
    live = _git_running_in([Path(root).resolve(), *gitdirs.values()])

    def stale(path: Path) -> bool:
        return live is not True or _age(path) >= STALE_AFTER_S

    done = Recovered()
    for gd in own_gitdirs:
        if _initializing(gd) and stale(gd / "locked"):
            done.worktrees.append(_remove_half_made(root, gd, gitdirs[gd], ours))
    for lock in dict.fromkeys([*own, *(shared if live is False else [])]):
        if lock.parent.exists() and stale(lock):
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()
                done.locks.append(lock)
    return done


def _locks(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.lock") if p.is_file()) if folder.is_dir() else []


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return float("inf")


def _worktree_gitdirs(common: Path) -> dict[Path, Path]:
    """Map each linked worktree's private git folder (``<common>/worktrees/<id>``) to its worktree folder."""
    found: dict[Path, Path] = {}
    for gitdir_file in sorted(common.glob("worktrees/*/gitdir")):
        with contextlib.suppress(OSError):
            found[gitdir_file.parent] = Path(gitdir_file.read_text().strip()).resolve().parent
    return found


def _initializing(gitdir: Path) -> bool:
    try:
        return (gitdir / "locked").read_text().strip() == INITIALIZING
    except OSError:
        return False


def _remove_half_made(root: Path, gitdir: Path, worktree: Path, ours: Path) -> Path:
    """Unregister and delete a worktree whose `git worktree add` was killed; its branch stays."""
    try:
        _git(root, "worktree", "remove", "--force", "--force", str(worktree))
    except GitWorktreeError:
        if worktree.is_relative_to(ours):  # never delete anything outside the session's own folder
            shutil.rmtree(worktree, ignore_errors=True)
        shutil.rmtree(gitdir, ignore_errors=True)
        _git(root, "worktree", "prune")
    return worktree


def _git_running_in(folders: list[Path]) -> bool | None:
    """Whether a live git process (not this one) has its working folder in one of `folders`; None without /proc."""
    proc = Path("/proc")
    if not (proc / "self" / "cwd").exists():
        return None
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if not (entry / "comm").read_text().startswith("git"):
                continue
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:  # it exited while we looked, or it is another user's: git refuses to work in a
            continue  # repository that user does not own (safe.directory), so it cannot be working in this one
        if any(cwd == f or cwd.is_relative_to(f) for f in folders):
            return True
    return False


# --- worktrees back to a known state ---------------------------------------------------------------


def restore_to_base(worktree: Path, branch: str) -> str:
    """Put a refused candidate's worktree (and branch) back at its base commit; return the base sha.

    Whatever the candidate left — edits, new files, links, a commit made by an earlier run — is gone from
    the worktree (``reset --hard`` + ``clean -ffdx``): a refused candidate must not leave a changed
    evaluator behind. A worktree that no longer exists is left alone.
    """
    if not worktree.is_dir():
        return ""
    base = _rev(worktree, _git(worktree, "config", "--get", f"branch.{branch}.{BASE_CONFIG_KEY}"))
    _reset_hard(worktree, base)
    return base


def discard_uncommitted(worktree: Path) -> None:
    """Drop every uncommitted edit and untracked file of a candidate worktree (its commits stay).

    A controller killed while it edited a candidate leaves part of the edit on disk; the re-run edits again
    from the committed tree, so a relative edit (scale a constant by 4) is never applied twice.
    """
    _reset_hard(worktree, "HEAD")


def _reset_hard(worktree: Path, rev: str) -> None:
    _git(worktree, "reset", "--quiet", "--hard", _rev(worktree, rev), "--")
    _git(worktree, "clean", "-q", "-ffdx")
    for folder, dirs, files in os.walk(worktree):  # git sees no FIFO, socket or device: remove them too
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            path = os.path.join(folder, name)
            if not stat.S_ISREG(os.lstat(path).st_mode) and not stat.S_ISLNK(os.lstat(path).st_mode):
                os.unlink(path)
