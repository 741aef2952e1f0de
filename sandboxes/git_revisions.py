"""Git adapter, reading: verified revisions, diffs, file texts and commit messages of a session repository.

A revision or branch handed to git comes from graph state or the store, and graph state on a LangGraph server
is whatever a client wrote (`POST /threads/{id}/state`). So every revision is verified first
(`git rev-parse --verify --end-of-options <rev>^{commit}`: one commit, never an option such as
``--output=FILE``) and git is then given the full commit id; a branch must be one of the session's own
``evo/<session>/...`` branches; every path list follows ``--``. A value that fails raises `RevisionError`
naming the field, before git runs anything else. Git runs through `git_worktree`'s command wrapper.
"""

from __future__ import annotations

import re
from pathlib import Path

from sandboxes.git_worktree import GitWorktreeError, _check_session, _git, _rev

_SHA_RE = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")
_MAX_REV_CHARS = 255


class RevisionError(ValueError):
    """A revision or branch that is not a commit of the session repository (the message names the field)."""


def verified_commit(repo_dir: Path | str, rev: object, field: str) -> str:
    """The full commit id `rev` names in `repo_dir`.

    Raises:
        RevisionError: `rev` is not a string, is empty, starts with '-', holds whitespace or control
            characters, or does not name a commit; the message names `field`.
    """
    if not isinstance(rev, str) or not rev or len(rev) > _MAX_REV_CHARS:
        raise RevisionError(f"{field} must be a commit id or branch of the session repository, got {rev!r:.80}")
    if rev.startswith("-") or any(ch.isspace() or ord(ch) < 32 or ch == "\x7f" for ch in rev):
        raise RevisionError(f"{field} {rev!r:.80} is not a revision: it may not start with '-' or hold whitespace")
    try:
        sha = _rev(repo_dir, rev)
    except GitWorktreeError:
        sha = ""
    if not _SHA_RE.fullmatch(sha):
        raise RevisionError(f"{field} {rev!r:.80} is not a commit of the session repository {repo_dir}")
    return sha


def session_branch_commit(repo_dir: Path | str, session_id: str, branch: object, field: str) -> str:
    """The tip of `branch`, which must be one of the session's own ``evo/<session>/...`` branches.

    Raises:
        RevisionError: another session's branch, any other ref, or a branch that does not exist.
    """
    _check_session(session_id)
    prefix = f"evo/{session_id}/"
    if not isinstance(branch, str) or not branch.startswith(prefix) or ".." in branch or branch == prefix:
        raise RevisionError(f"{field} {branch!r:.80} is not a branch of session {session_id} ({prefix}...)")
    return verified_commit(repo_dir, f"refs/heads/{branch}", field)


def diff_text(repo_dir: Path | str, base: str, head: str) -> str:
    """`git diff <base> <head>` of two verified commits (`verified_commit` / `session_branch_commit` ids)."""
    return _git(repo_dir, "diff", _sha(base), _sha(head), "--", strip=False)


def diff_numstat(repo_dir: Path | str, base: str, head: str) -> tuple[int, int, int]:
    """(files, insertions, deletions) between two verified commits; binary files count as changed files."""
    files = insertions = deletions = 0
    for line in _git(repo_dir, "diff", "--numstat", _sha(base), _sha(head), "--").splitlines():
        added, removed, _ = line.split("\t", 2)
        files += 1
        insertions += int(added) if added.isdigit() else 0
        deletions += int(removed) if removed.isdigit() else 0
    return files, insertions, deletions


def changed_files(repo_dir: Path | str, base: str, head: str) -> list[tuple[str, str | None, str | None]]:
    """The files `head` changed against `base` (verified commits): (path, text at base, text at head)."""
    out = _git(repo_dir, "diff", "--name-only", "--no-renames", "-z", _sha(base), _sha(head), "--", strip=False)
    names = [n for n in out.split("\0") if n]
    return [(n, file_text(repo_dir, base, n), file_text(repo_dir, head, n)) for n in names]


def file_text(repo_dir: Path | str, commit: str, path: str) -> str | None:
    """The text of `path` at a verified commit, or None where the commit has no such file."""
    try:
        return _git(repo_dir, "show", f"{_sha(commit)}:{path}", strip=False)
    except GitWorktreeError:
        return None


def tip_message(repo_dir: Path | str, commit: str) -> str:
    """The full message of a verified commit."""
    return _git(repo_dir, "log", "-1", "--format=%B", _sha(commit), "--")


def show_patch(repo_dir: Path | str, commit: str) -> str:
    """The patch of a verified commit against its parent (`git show`), without its message."""
    return _git(repo_dir, "show", "--format=", _sha(commit), "--", strip=False)


def _sha(commit: str) -> str:
    assert _SHA_RE.fullmatch(commit), f"git adapter: {commit!r:.80} is not a verified commit id"
    return commit
