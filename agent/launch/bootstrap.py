"""Creating a session, idempotently: repository, main-line branch, migrated store, seeded skills, session row.

Used by `evotrainer run` (before the graph starts) and by the graph's `setup` node (LangGraph Studio / SDK
sessions, and a `resume` after a kill before the first checkpoint). Every input is checked first
(`agent.launch.input_checks`, `agent.launch.repos`); nothing is created for bad input.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

from agent.adapters import ledger
from agent.context import Context
from agent.launch.session_guard import caller, may_use, missing_session
from sandboxes.git_worktree import is_repo_root

REPOSITORY_TRIES = 5  # how often a session chooses again when a session set up beside it takes its folder


def new_session_id() -> str:
    """A short, branch-safe session id."""
    return "s" + time.strftime("%m%d%H%M") + "-" + secrets.token_hex(2)


def ensure_session(ctx: Context, session_id: str, harness: Path | None, repo: Path | None) -> Path:
    """Make sure the session exists: repository, main-line branch, migrated store, seeded skills, session row.

    Idempotent and safe to repeat after a kill at any instant: a session row that exists means
    set-up finished; otherwise every step checks what is there first, and a repository copy is built in a
    staging folder named after the session and renamed into place only once committed. Every input is
    checked (`agent.launch.input_checks`, `agent.launch.repos.check_repo`) before anything is created.

    On a LangGraph server the session row records its caller (`agent.launch.session_guard.caller`), and a
    session id another caller created is refused with the message of a missing one.

    Returns:
        The root of the session's repository (the graph's `harness_dir`).

    Raises:
        SetupError: a bad harness, repository or store; the message names the file or field and the fix.
    """
    from git import Repo

    from agent.launch.input_checks import SetupError, check_harness, check_store
    from agent.launch.preflight import check_backend
    from sandboxes import git_worktree as gw
    from store.engine import upgrade
    from store.repository import create_session, find_session, session_access

    url = ledger.store_url(ctx)
    try:
        gw.session_main_branch(session_id)
    except gw.BranchNameError as exc:
        raise SetupError(f"{exc}; pass another session id") from None
    check_store(url)
    who = caller(ctx)
    if who is None:
        recorded = recorded_repo(url, session_id)
    else:  # a server's caller: the session must be theirs, and another's is refused like a missing one
        upgrade(url)
        with ledger.db(url) as db:
            found = session_access(db, session_id)
        if found is not None and not may_use(who, found[1]):
            raise SetupError(missing_session(session_id))
        recorded = None if found is None else Path(found[0])
    if recorded is not None:
        return recorded
    if harness is None:
        raise SetupError(missing_session(session_id))
    workdir = Path(ctx.workdir).resolve()
    harness = (workdir / harness).resolve()
    manifest = check_harness(harness).manifest
    try:  # the backend's settings and every data row, as `run` checks them (Studio / SDK sessions start here)
        check_backend(ctx.backend, harness)
    except ValueError as exc:
        raise SetupError(str(exc)) from None
    root = _repository(harness, repo, manifest.name, workdir, session_id)
    git_repo = Repo(root)
    branch = gw.create_session_branch(git_repo, session_id)
    gw.check_out_session_main(git_repo, session_id)
    upgrade(url)
    with ledger.db(url) as db:
        _seed_skills(db)
        if find_session(db, session_id) is None:
            create_session(
                db,
                session_id=session_id,
                harness_path=str(harness),
                repo_path=str(root),
                max_iterations=ctx.max_iterations,
                max_train_steps=ctx.max_train_steps,
                main_branch=branch,
                mode=ctx.mode,
                policy=ctx.policy,
                llm_model=ctx.llm_model or None,
                owner=who or None,
            )
    return root


class RepositoryTaken(Exception):
    """Another session, set up at the same instant, created the repository folder this one had chosen."""


def _repository(harness: Path, repo: Path | None, name: str, workdir: Path, session_id: str) -> Path:
    """Choose, check and (when new) build the session's repository.

    Two sessions set up side by side (a LangGraph server's callers) may choose the same free folder; the one
    that renames its copy into place second chooses again: the folder now holds a repository, which is this
    harness (then shared, each session on its own branches) or another one (then the next free name).
    """
    from agent.launch.input_checks import SetupError
    from agent.launch.repos import check_repo, choose_repo

    for _ in range(REPOSITORY_TRIES):
        root = choose_repo(harness, repo, name, workdir)
        check_repo(harness, root, workdir)
        if is_repo_root(root):
            return root
        try:
            _build_repo(harness, root, session_id)
        except RepositoryTaken:
            continue
        return root
    raise SetupError(f"other sessions kept taking the repository folder for {harness}; pass --repo DIR")


def recorded_repo(url: str, session_id: str) -> Path | None:
    """The repository of a session already in the store, or None (no such session, or no store yet)."""
    from store.engine import current_revision
    from store.repository import session_repo_path

    if current_revision(ledger.engine_for(url)) is None:
        return None
    with ledger.db(url) as db:  # two columns only: also readable on a store that still needs a migration
        found = session_repo_path(db, session_id)
    return None if found is None else Path(found)


def _build_repo(harness: Path, root: Path, session_id: str) -> None:
    """Copy and commit the harness in a staging folder, then rename it to `root` (a kill leaves no half repo).

    A harness that is itself a git repository is copied as its folder is (without `.git`): the user chose a
    separate `--repo`, so the session starts from the files as they are, uncommitted changes included.
    """
    import shutil

    from harness.files import COPY_SKIPPED, copy_folder
    from sandboxes import git_worktree as gw

    staging = root.with_name(f".{root.name}.{session_id}.partial")
    source = staging.with_name(staging.name + "-src")
    for leftover in (staging, source):  # a kill during an earlier try of this very session
        if leftover.exists():
            shutil.rmtree(leftover)
    if is_repo_root(harness):
        copy_folder(harness, source, COPY_SKIPPED)  # no links or special files
    gw.init_session_repo(source if source.exists() else harness, staging)
    if source.exists():
        shutil.rmtree(source)
    try:
        if root.is_dir():  # an empty folder the user named (check_repo allowed it)
            root.rmdir()
        staging.rename(root)
    except OSError:
        if not root.exists():
            raise
        shutil.rmtree(staging)  # another session set up at this instant took the name first
        raise RepositoryTaken(root) from None


def _seed_skills(db: Any) -> None:
    """Insert missing seed skills and refresh stored seed rows whose definition changed (counts kept)."""
    from skills.repository import seed_skills

    seed_skills(db)
