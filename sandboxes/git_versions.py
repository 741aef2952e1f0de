"""Git adapter, main line: a version that keeps the incumbent harness as its own commit, and version tags.

Every version of a session is one commit on ``evo/<session>/main``: ``v0``, the merge of a
winning candidate (``git_worktree.merge_candidate``), or an empty commit written here when the incumbent
harness trained on (a control continuation changes no file but is a new policy). Each is tagged
``evo/<session>/v<n>``. Git runs through ``git_worktree``'s command wrapper; commits are dated after every
branch tip like merges are, so ``git log --graph --all`` draws the newest version on top.
"""

from __future__ import annotations

from git import Repo

from sandboxes.git_worktree import (
    GitWorktreeError,
    _after_every_tip,
    _branch_exists,
    _check_session,
    _git,
    _rev,
    _root,
    commit_text,
)


def continue_main(repo: Repo, session_main_branch: str, message: str) -> str:
    """Record a version that keeps the incumbent harness as an empty commit on the main line; return its sha.

    A control continuation changes no file but is a new version (the policy trained on), so it gets its own
    main-line commit carrying the evidence, like a merge does. Built with ``commit-tree`` (the main line need
    not be checked out) and dated after every branch tip. Idempotent: when the main line's tip already is
    this exact commit message, its sha is returned.

    Raises:
        GitWorktreeError: the main line does not exist.
    """
    root = _root(repo)
    if not _branch_exists(root, session_main_branch):
        raise GitWorktreeError(f"branch {session_main_branch!r} does not exist in {root}")
    tip, text = _rev(root, f"refs/heads/{session_main_branch}"), commit_text(message)
    if _git(root, "log", "-1", "--format=%B", tip).strip() == text.strip():
        return tip
    new = _git(root, "commit-tree", f"{tip}^{{tree}}", "-p", tip, "-m", text, env=_after_every_tip(root))
    _git(root, "update-ref", f"refs/heads/{session_main_branch}", new, tip)
    return new


def version_tag(session_id: str, index: int) -> str:
    """Return the tag name of a session's version, ``evo/<session>/v<index>``."""
    _check_session(session_id)
    return f"evo/{session_id}/v{index}"


def tag_version(repo: Repo, session_id: str, index: int, rev: str) -> str:
    """Tag commit ``rev`` as version ``index`` of the session (lightweight tag); return the tag name.

    Idempotent: a tag already on that commit is left as it is.

    Raises:
        GitWorktreeError: the tag exists on another commit (the version was recorded differently before).
    """
    root, name = _root(repo), version_tag(session_id, index)
    sha = _rev(root, rev)
    try:
        tagged = _rev(root, f"refs/tags/{name}")
    except GitWorktreeError:
        _git(root, "tag", name, sha)
        return name
    if tagged != sha:
        raise GitWorktreeError(f"tag {name} already marks {tagged[:12]}, not {sha[:12]}; it was recorded before")
    return name
