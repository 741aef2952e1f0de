"""Git adapter: the session repository, candidate branches in worktrees, patches, commits and merges.

Git runs only through this module's command wrapper (`_git`; `sandboxes/worktree_files.py` holds the
surface-checked file writes, patches and diffs, `sandboxes/git_versions.py` the version commits and tags,
`sandboxes/git_recovery.py` the resets of a worktree and the clean-up after a killed git; all call the same
wrapper). Everything it does is
recorded in the repository itself, so `git log --graph --all` shows the lineage of a session:

- ``evo/<session>/main`` is the session's main line: one commit per version (``v0``, a merge of the
  winning candidate, or an empty commit when the incumbent harness trained on), each tagged
  ``evo/<session>/v<n>`` (the last two in ``sandboxes/git_versions.py``).
- ``evo/<session>/v<i>.<k>-<slug>`` is candidate k of iteration i (a proposal for version i, branched from
  the incumbent), checked out in its own worktree under ``worktrees_root/<session>/v<i>.<k>-<slug>``. Its
  base commit is remembered in the repository config (``branch.<branch>.evobase``) so that a crashed
  controller finds it again. ``v<i>.<k>-<slug>`` is the candidate's one name: branch, run folder, report
  and CLI all use it.
- Decisions are recorded as *empty commits* ``decision: ...`` on the candidate branch (not git notes:
  empty commits show in ``git log --graph`` and travel with ordinary clones and pushes).
- Removing a worktree keeps its branch: a pruned candidate stays as negative evidence.
- Every commit subject is at most ``SUBJECT_MAX`` characters (``commit_text`` in ``sandboxes/commit_messages.py``):
  a longer first line is cut at a word and kept whole in the body. Main-line commits are dated after every
  branch tip, so ``git log --graph --all`` draws the newest version on top, above the decision commits that led
  to it.

The harness root is the repository root (``init_session_repo`` copies a harness that is a folder inside
a larger repository into a fresh one), so surface paths from ``evotrainer.yaml`` are repository paths.

Commits are authored as ``EvoTrainer <evotrainer@localhost>``: the agent's edits are attributable in
the log. Git runs with ``LC_ALL=C`` so that the messages carried by ``PatchError`` are stable.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from git import Git, Repo
from git.exc import GitCommandError, InvalidGitRepositoryError, NoSuchPathError

from harness.files import COPY_SKIPPED, copy_folder

# Re-exported (`X as X`): callers reach the message text through this adapter.
from sandboxes.commit_messages import SUBJECT_MAX as SUBJECT_MAX
from sandboxes.commit_messages import InterventionMessage as InterventionMessage
from sandboxes.commit_messages import commit_text as commit_text
from sandboxes.commit_messages import one_line
from sandboxes.commit_messages import parse_trailers as parse_trailers

AGENT_NAME = "EvoTrainer"
AGENT_EMAIL = "evotrainer@localhost"
INITIAL_COMMIT_MESSAGE = "v0: starting harness"
BASE_CONFIG_KEY = "evobase"
_IDENTITY = {
    "GIT_AUTHOR_NAME": AGENT_NAME,
    "GIT_AUTHOR_EMAIL": AGENT_EMAIL,
    "GIT_COMMITTER_NAME": AGENT_NAME,
    "GIT_COMMITTER_EMAIL": AGENT_EMAIL,
}
GIT_CONTROL_FILES = frozenset({".gitignore", ".gitattributes", ".gitmodules"})  # they change what git sees
GIT_CONTROL_RULE = (
    "a candidate may not add or change .gitignore, .gitattributes or .gitmodules: they change what git "
    "commits and shows, so what runs would differ from what is reviewed"
)
_SESSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,47}$")


class GitWorktreeError(RuntimeError):
    """A git operation failed; the message carries git's own explanation (also in ``detail``)."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail or message


class BranchNameError(ValueError):
    """A session id or slug cannot form a valid candidate branch name."""


class PatchError(GitWorktreeError):
    """A patch does not apply to the worktree (``git apply --check`` failed)."""


class SurfaceError(GitWorktreeError):
    """A write or patch would touch a path outside the harness's editable surface."""


class LinkRefusedError(SurfaceError):
    """A write, read or patch would create or go through a symlink, hard link, gitlink or other non-regular file."""


class NothingToCommitError(GitWorktreeError):
    """``commit_candidate`` found no change against the worktree's HEAD."""


class MergeConflictError(GitWorktreeError):
    """A candidate does not merge cleanly into the session main line."""


class WorktreeDirtyError(GitWorktreeError):
    """A worktree holds uncommitted changes and removal was not forced."""


@dataclass(frozen=True)
class CandidateWorktree:
    """One candidate branch checked out in its own worktree."""

    branch: str
    path: Path
    base_sha: str


# --- low-level runner -------------------------------------------------------------------------------


def _git(cwd: Path | str, *args: str, strip: bool = True, env: Mapping[str, str] | None = None) -> str:
    """Run ``git <args>`` in ``cwd`` (``env`` added); raise ``GitWorktreeError`` with git's stderr on failure."""
    try:
        out = Git(str(cwd)).execute(
            ["git", *args],
            env={**_IDENTITY, "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", **(env or {})},
            strip_newline_in_stdout=strip,
        )
    except GitCommandError as exc:
        detail = _stderr(exc)
        raise GitWorktreeError(f"git {args[0]} failed in {cwd}: {detail}", detail) from None
    assert isinstance(out, str)
    return out


def _stderr(exc: GitCommandError) -> str:
    text = exc.stderr if isinstance(exc.stderr, str) else str(exc.stderr)
    text = text.strip()
    if text.startswith("stderr: "):
        text = text[len("stderr: ") :]
    return text.strip().strip("'").strip() or str(exc)


def _root(repo: Repo) -> Path:
    assert repo.working_tree_dir is not None, "bare repositories are not supported"
    return Path(repo.working_tree_dir)


def _rev(cwd: Path | str, rev: str) -> str:
    """The commit id `rev` names (verified: never read as an option); raises `GitWorktreeError` otherwise."""
    if not rev or rev.startswith("-"):
        raise GitWorktreeError(f"{rev!r:.80} is not a revision of {cwd}", "")
    return _git(cwd, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")


def _branch_exists(cwd: Path | str, branch: str) -> bool:
    try:
        _git(cwd, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}")
    except GitWorktreeError:
        return False
    return True


# --- session repository -----------------------------------------------------------------------------


def init_session_repo(harness_src: Path, dest: Path) -> Repo:
    """Return the git repository a session works in.

    - ``dest`` already a git repository top level: open it (idempotent re-run).
    - ``harness_src`` the top level of a git repository: use it in place (``dest`` is not created); its
      history is the session's history and the starting version is its current HEAD.
    - otherwise copy ``harness_src`` (without ``.git`` and caches) into ``dest``, ``git init`` it and commit
      everything as ``v0: starting harness``.

    Raises:
        GitWorktreeError: ``harness_src`` is missing, or ``dest`` exists, is not a repository and is not empty.
    """
    if is_repo_root(dest):
        return Repo(dest)
    if is_repo_root(harness_src):
        repo = Repo(harness_src)
        if not repo.head.is_valid():
            raise GitWorktreeError(f"{harness_src} is a git repository without commits; commit the harness first")
        return repo
    if not harness_src.is_dir():
        raise GitWorktreeError(f"harness folder {harness_src} does not exist")
    if dest.exists() and any(dest.iterdir()):
        raise GitWorktreeError(f"{dest} exists, is not a git repository and is not empty; choose an empty folder")
    copy_folder(harness_src, dest, COPY_SKIPPED)  # no links or special files
    _git(dest, "init", "--quiet")
    _git(dest, "add", "--all")
    _git(dest, "commit", "--quiet", "--no-verify", "-m", INITIAL_COMMIT_MESSAGE)
    return Repo(dest)


def is_repo_root(path: Path) -> bool:
    """True when `path` is the top level of a git repository (not a folder inside one)."""
    if not path.is_dir():
        return False
    try:
        repo = Repo(path)
    except (InvalidGitRepositoryError, NoSuchPathError):
        return False
    return repo.working_tree_dir is not None and Path(repo.working_tree_dir).resolve() == path.resolve()


def session_main_branch(session_id: str) -> str:
    """Return the name of the session's main line, ``evo/<session>/main``."""
    _check_session(session_id)
    return f"evo/{session_id}/main"


def candidate_branch(session_id: str, version_index: int, k: int, slug: str) -> str:
    """Return ``evo/<session>/v<i>.<k>-<slug>`` after validating its parts."""
    _check_session(session_id)
    if version_index < 0 or k < 1:
        raise BranchNameError(f"version index must be >= 0 and candidate number >= 1 (got v{version_index}.{k})")
    if not _SLUG_RE.fullmatch(slug):
        raise BranchNameError(f"slug {slug!r} must be lowercase letters, digits and '-', at most 48 characters")
    return f"evo/{session_id}/v{version_index}.{k}-{slug}"


def _check_session(session_id: str) -> None:
    if not _SESSION_RE.fullmatch(session_id) or ".." in session_id or session_id.endswith((".", ".lock")):
        raise BranchNameError(f"session id {session_id!r} must match {_SESSION_RE.pattern} (no '..', no '.lock')")


def create_session_branch(repo: Repo, session_id: str) -> str:
    """Create ``evo/<session>/main`` at the current HEAD (idempotent: an existing branch is left as it is)."""
    branch = session_main_branch(session_id)
    root = _root(repo)
    if not _branch_exists(root, branch):
        _git(root, "branch", branch, "HEAD")
    return branch


def check_out_session_main(repo: Repo, session_id: str) -> None:
    """Check out the session's main line in the repository's own work tree."""
    _git(_root(repo), "checkout", "--quiet", session_main_branch(session_id), "--")


# --- candidates -------------------------------------------------------------------------------------


def create_candidate(
    repo: Repo,
    session_id: str,
    version_index: int,
    k: int,
    slug: str,
    base_branch: str,
    worktrees_root: Path,
) -> CandidateWorktree:
    """Create the candidate branch from ``base_branch`` and check it out in its own worktree.

    Idempotent: when the branch and/or its worktree already exist (a re-run after a crash), they are
    returned as they are, with the base commit recorded at first creation.

    Raises:
        BranchNameError: invalid session id or slug.
        GitWorktreeError: the base branch does not exist, or the worktree path is taken by something else.
    """
    branch = candidate_branch(session_id, version_index, k, slug)
    root = _root(repo)
    path = (worktrees_root / session_id / f"v{version_index}.{k}-{slug}").resolve()
    existing = _worktrees(root)
    if _branch_exists(root, branch):
        base_sha = _recorded_base(root, branch, base_branch)
        for wt_path, wt_branch in existing.items():
            if wt_branch == branch:
                return CandidateWorktree(branch=branch, path=wt_path, base_sha=base_sha)
        _check_free(path, existing)
        path.parent.mkdir(parents=True, exist_ok=True)
        _git(root, "worktree", "add", "--quiet", str(path), branch)
        return CandidateWorktree(branch=branch, path=path, base_sha=base_sha)
    try:
        base_sha = _rev(root, base_branch)
    except GitWorktreeError:
        raise GitWorktreeError(f"base branch {base_branch!r} does not exist in {root}") from None
    _check_free(path, existing)
    path.parent.mkdir(parents=True, exist_ok=True)
    _git(root, "worktree", "add", "--quiet", "-b", branch, str(path), base_sha)
    _git(root, "config", f"branch.{branch}.{BASE_CONFIG_KEY}", base_sha)
    return CandidateWorktree(branch=branch, path=path, base_sha=base_sha)


def _check_free(path: Path, existing: Mapping[Path, str | None]) -> None:
    if path in existing:
        raise GitWorktreeError(f"worktree path {path} already holds branch {existing[path]!r}")
    if path.exists() and any(path.iterdir()):
        raise GitWorktreeError(f"worktree path {path} exists and is not empty; remove it or pick another slug")


def _recorded_base(root: Path, branch: str, base_branch: str) -> str:
    try:
        return _git(root, "config", "--get", f"branch.{branch}.{BASE_CONFIG_KEY}")
    except GitWorktreeError:
        return _git(root, "merge-base", branch, base_branch)


def _worktrees(root: Path) -> dict[Path, str | None]:
    """Map each registered worktree path to the branch it has checked out (None when detached)."""
    out: dict[Path, str | None] = {}
    current: Path | None = None
    for line in _git(root, "worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            current = Path(line[len("worktree ") :]).resolve()
            out[current] = None
        elif line.startswith("branch ") and current is not None:
            out[current] = line[len("branch ") :].removeprefix("refs/heads/")
    return out


def commit_candidate(worktree: Path, message: InterventionMessage | str) -> str:
    """Commit every change in the worktree on its candidate branch and return the new commit sha.

    Raises:
        NothingToCommitError: the worktree has no change against its HEAD.
    """
    text = message.render() if isinstance(message, InterventionMessage) else commit_text(message)
    _git(worktree, "add", "--all")
    if not _git(worktree, "diff", "--cached", "--name-only", "HEAD"):
        raise NothingToCommitError(f"no change to commit in {worktree}")
    _git(worktree, "commit", "--quiet", "--no-verify", "-m", text)
    return _rev(worktree, "HEAD")


def change_key(worktree: Path, base_sha: str, rev: str = "HEAD") -> str:
    """The content key of `rev`'s change against `base_sha`: a hash over each changed path, its mode and new blob.

    Two candidates on the same base that make the same edit, by whatever route and commit message, get the
    same key; a deleted file counts as its path with no blob. "" when nothing changed.
    """
    import hashlib

    base, tip = _rev(worktree, base_sha), _rev(worktree, rev)
    raw = _git(worktree, "diff", "--raw", "--no-renames", "--full-index", "-z", base, tip, "--", strip=False)
    fields = raw.split("\0")
    entries = sorted(
        f"{path}\0{meta.split()[1]}\0{meta.split()[3]}"  # ":old_mode new_mode old_blob new_blob status", path
        for meta, path in zip(fields[0::2], fields[1::2], strict=False)
        if meta.startswith(":")
    )
    return hashlib.sha256("\0\0".join(entries).encode()).hexdigest() if entries else ""


def unreviewed_files(worktree: Path) -> list[str]:
    """Return the worktree's files a commit would leave out: untracked or ignored ones (sorted).

    What runs must be exactly what is committed and reviewed: a file git ignores (through
    a ``.gitignore`` anywhere, ``info/exclude`` or a global exclude) is still copied into the sandbox and
    run, yet it never shows in the diff or the commit. Git's own reading decides
    (``git status --ignored --untracked-files=all``), so no ignore rule is parsed here.
    """
    return sorted(path for code, path in _status(worktree) if code in ("??", "!!"))


def uncommitted_files(worktree: Path) -> list[str]:
    """Return every path where the worktree differs from its HEAD commit: changed, new, untracked or ignored."""
    return sorted({path for _, path in _status(worktree)})


def _status(worktree: Path) -> list[tuple[str, str]]:
    flags = ("--porcelain=v1", "-z", "--no-renames", "--ignored=traditional", "--untracked-files=all")
    out = _git(worktree, "status", *flags, strip=False)
    return [(entry[:2], entry[3:]) for entry in out.split("\0") if len(entry) > 3]


def git_control_files(paths: Sequence[str]) -> list[str]:
    """Return the paths of `paths` that name a git control file (``GIT_CONTROL_FILES``) in any folder."""
    return [p for p in paths if p.rsplit("/", 1)[-1] in GIT_CONTROL_FILES]


def commit_message(repo: Repo, rev: str) -> str:
    """Return the full message of commit ``rev``."""
    root = _root(repo)
    return _git(root, "log", "-1", "--format=%B", _rev(root, rev), "--")


# --- decisions and merges -----------------------------------------------------------------------------


def amend_decision_note(repo: Repo, branch: str, evidence_text: str, *, decision: str = "") -> str:
    """Record a decision and its evidence as an empty commit ``decision: ...`` on ``branch``.

    The commit is built with ``commit-tree`` and moves the branch ref, so it works whether or not the
    branch is checked out in a worktree (the tree is unchanged, so a checkout stays clean). Idempotent:
    when the branch tip already is this exact decision commit, its sha is returned.
    """
    if not evidence_text.strip():
        raise ValueError("decision evidence is empty; say what was decided and why")
    root = _root(repo)
    tip = _rev(root, f"refs/heads/{branch}") if _branch_exists(root, branch) else ""
    if not tip:
        raise GitWorktreeError(f"branch {branch!r} does not exist in {root}")
    first, _, rest = evidence_text.strip().partition("\n")
    lines = [f"decision: {one_line(first)}", ""]
    if rest.strip():
        lines += [rest.strip(), ""]
    if decision:
        lines.append(f"Decision: {one_line(decision)}")
    text = commit_text("\n".join(lines))
    if _git(root, "log", "-1", "--format=%B", tip).strip() == text.strip():
        return tip
    new = _git(root, "commit-tree", f"{tip}^{{tree}}", "-p", tip, "-m", text)
    _git(root, "update-ref", f"refs/heads/{branch}", new, tip)
    return new


def merge_candidate(
    repo: Repo, session_main_branch: str, candidate_branch: str, message: str, *, no_ff: bool = True
) -> str:
    """Merge a candidate into the session main line and return the new main-line sha.

    ``no_ff=True`` (default) always writes a merge commit carrying ``message`` (the new version's
    commit); ``no_ff=False`` fast-forwards when possible. Idempotent: a candidate already contained
    in the main line returns the main line's sha. Works on refs (``git merge-tree --write-tree``), so
    the main line need not be checked out; when it is checked out in a worktree, ``git merge`` runs there.

    Raises:
        MergeConflictError: the candidate conflicts with the main line; names the conflicting paths.
    """
    root = _root(repo)
    for name in (session_main_branch, candidate_branch):
        if not _branch_exists(root, name):
            raise GitWorktreeError(f"branch {name!r} does not exist in {root}")
    main_sha = _rev(root, f"refs/heads/{session_main_branch}")
    cand_sha = _rev(root, f"refs/heads/{candidate_branch}")
    if _is_ancestor(root, cand_sha, main_sha):
        return main_sha
    message, dated = commit_text(message), _after_every_tip(root)
    checked_out = [p for p, b in _worktrees(root).items() if b == session_main_branch]
    if checked_out:
        args = ["merge", "--quiet", "--no-verify", "-m", message, "--no-ff" if no_ff else "--ff", cand_sha]
        try:
            _git(checked_out[0], *args, env=dated)
        except GitWorktreeError as exc:
            _abort_merge(checked_out[0])
            raise MergeConflictError(f"{candidate_branch} does not merge into {session_main_branch}: {exc}") from None
        return _rev(root, f"refs/heads/{session_main_branch}")
    if not no_ff and _is_ancestor(root, main_sha, cand_sha):
        _git(root, "update-ref", f"refs/heads/{session_main_branch}", cand_sha, main_sha)
        return cand_sha
    try:
        tree = Git(str(root)).execute(
            ["git", "merge-tree", "--write-tree", "--name-only", "--no-messages", main_sha, cand_sha],
            env={"LC_ALL": "C"},
        )
    except GitCommandError as exc:
        out = exc.stdout if isinstance(exc.stdout, str) else ""
        conflicts = sorted({line.strip() for line in out.removeprefix("stdout: ").strip("'").splitlines()[1:]} - {""})
        raise MergeConflictError(
            f"{candidate_branch} does not merge into {session_main_branch}: conflicts in {conflicts or _stderr(exc)}"
        ) from None
    assert isinstance(tree, str)
    new = _git(root, "commit-tree", tree.splitlines()[0], "-p", main_sha, "-p", cand_sha, "-m", message, env=dated)
    _git(root, "update-ref", f"refs/heads/{session_main_branch}", new, main_sha)
    return new


def _after_every_tip(root: Path) -> dict[str, str]:
    """Commit dates for a main-line commit: now, or one second after the newest branch tip if that is not older.

    Git dates have one-second resolution and ``git log --graph`` orders tips by date: without this a
    version committed in the same second as its candidates' decision commits may be drawn below them.
    """
    out = _git(root, "for-each-ref", "--format=%(committerdate:unix)", "refs/heads/")
    newest = max((int(x) for x in out.split() if x.isdigit()), default=0)
    if time.time() >= newest + 1:
        return {}
    stamp = f"{newest + 1} +0000"
    return {"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}


def _abort_merge(cwd: Path) -> None:
    with contextlib.suppress(GitWorktreeError):  # nothing to abort: the merge failed before touching the tree
        _git(cwd, "merge", "--abort")


def _is_ancestor(root: Path, ancestor: str, descendant: str) -> bool:
    try:
        _git(root, "merge-base", "--is-ancestor", ancestor, descendant)
    except GitWorktreeError:
        return False
    return True


def remove_worktree(repo: Repo, worktree_path: Path, *, force: bool = False) -> None:
    """Remove a candidate's worktree and keep its branch (negative evidence stays in the repository).

    Idempotent: a worktree that is already gone is pruned from git's records.

    Raises:
        WorktreeDirtyError: the worktree holds uncommitted changes and ``force`` is False.
    """
    root = _root(repo)
    path = worktree_path.resolve()
    if path == root.resolve():
        raise GitWorktreeError(f"{path} is the repository's main working tree, not a candidate worktree")
    if path in _worktrees(root) and path.exists():
        if not force and _git(path, "status", "--porcelain"):
            raise WorktreeDirtyError(f"{path} has uncommitted changes; commit them or pass force=True")
        _git(root, "worktree", "remove", *(["--force"] if force else []), str(path))
    _git(root, "worktree", "prune")


def branches(repo: Repo, session_id: str) -> list[str]:
    """Return the session's branches (main line and candidates), sorted."""
    _check_session(session_id)
    out = _git(_root(repo), "for-each-ref", "--format=%(refname:short)", f"refs/heads/evo/{session_id}/")
    return sorted(line for line in out.splitlines() if line)


def log_graph(repo: Repo, revs: Sequence[str] = ("--all",)) -> str:
    """Return ``git log --graph --oneline`` over ``revs`` (for reports and the CLI)."""
    root = _root(repo)
    return _git(
        root, "log", "--graph", "--oneline", "--decorate", *(r if r == "--all" else _rev(root, r) for r in revs)
    )
