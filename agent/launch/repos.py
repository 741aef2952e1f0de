"""Which git repository a session works in, and whether it holds the harness the user gave.

A session must train the harness it was given. Rules (`choose_repo`):

- no `--harness`: the demo, in `./evotrainer-demo` (the CLI moves an older one aside first);
- a harness that is the top level of a git repository and no `--repo`: that repository, in place
  (its history is the session's history; the session starts from its HEAD);
- otherwise, without `--repo`: `./evotrainer-<name>` (the manifest's name), or the first of
  `./evotrainer-<name>-2`, `-3`, ... that is free or already holds exactly this harness;
- an explicit `--repo` that exists must hold exactly this harness at its HEAD (`check_repo`), else the
  session is refused with both paths and the fix.

"Holds exactly this harness" compares file contents (git blob hashes) of the harness folder with the
repository's HEAD tree, skipping what the copy skips (`.git`, caches) and what the repository ignores.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from agent.launch.input_checks import SetupError
from sandboxes.git_worktree import is_repo_root  # the git adapter answers git questions

DEMO_REPO = Path("evotrainer-demo")
SKIPPED = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}  # as the session copy skips
MAX_LISTED = 8


def choose_repo(harness: Path, repo: Path | None, name: str, workdir: Path) -> Path:
    """The repository a session on `harness` works in (rules in the module docstring); never creates it."""
    if repo is not None:
        return (workdir / repo).resolve()
    harness = harness.resolve()
    if is_repo_root(harness):
        return harness
    base = workdir.resolve() / f"evotrainer-{name}"
    for k in range(1, 1000):
        candidate = base if k == 1 else base.with_name(f"{base.name}-{k}")
        if not candidate.exists() or (is_repo_root(candidate) and not differences(harness, candidate)):
            return candidate
    raise SetupError(f"no free repository name next to {base}; pass --repo DIR")


def check_repo(harness: Path, repo: Path, workdir: Path) -> None:
    """Refuse a repository the session cannot use for `harness`, with both paths and the fix.

    Raises:
        SetupError: `repo` lies inside the harness, is a non-empty folder that is not a repository,
            has no commits, or holds a different harness at its HEAD (the differing files are listed).
    """
    from git import Repo

    harness, repo = harness.resolve(), repo.resolve()
    state_dir = workdir.resolve() / ".evotrainer"
    if repo != harness and repo.is_relative_to(harness):
        raise SetupError(f"repository {repo} lies inside the harness folder {harness}; choose a --repo outside it")
    if state_dir.is_relative_to(harness):
        raise SetupError(
            f"the session folder {state_dir} would lie inside the harness folder {harness} (and end up in the "
            "session's repository); run evotrainer from a folder outside the harness"
        )
    if not repo.exists() or (repo.is_dir() and not any(repo.iterdir()) and repo != harness):
        return  # created fresh from the harness
    if not is_repo_root(repo):
        what = "the harness folder" if repo == harness else "a non-empty folder"
        raise SetupError(
            f"--repo {repo} is {what} but not a git repository; pass an empty or new --repo folder "
            "(the harness is copied into it)"
        )
    if not Repo(repo).head.is_valid():
        raise SetupError(f"repository {repo} has no commits; commit the harness first, or pass a new --repo folder")
    changed = differences(harness, repo)
    if not changed:
        return
    listed = ", ".join(changed[:MAX_LISTED])
    if len(changed) > MAX_LISTED:
        listed += f" and {len(changed) - MAX_LISTED} more"
    if repo == harness:
        raise SetupError(
            f"harness repository {repo} has uncommitted changes ({listed}); a session starts from HEAD: "
            "commit them, or pass --repo DIR to work on a copy of the folder as it is"
        )
    raise SetupError(
        f"repository {repo} holds a different harness than --harness {harness} (differs in: {listed}); "
        f"pass a new --repo folder to start from {harness}, or --harness {repo} to continue from what the "
        "repository holds"
    )


def differences(harness: Path, repo: Path) -> list[str]:
    """Files that differ between the harness folder and the repository's HEAD tree ('+' new, '-' missing)."""
    from git import Blob, Repo

    git_repo = Repo(repo)
    tree = {str(b.path): b.hexsha for b in git_repo.head.commit.tree.traverse() if isinstance(b, Blob)}
    files = dict(_blob_hashes(harness))
    new = sorted(files.keys() - tree.keys())
    ignored = set(git_repo.ignored(*new)) if new else set()
    out = [f"+{p}" for p in new if p not in ignored]
    out += [f"-{p}" for p in sorted(tree.keys() - files.keys())]
    out += [p for p in sorted(files.keys() & tree.keys()) if files[p] != tree[p]]
    return out


def _blob_hashes(root: Path) -> Iterator[tuple[str, str]]:
    """(relative posix path, git blob sha1) of every file under `root`, skipping `SKIPPED` folders and *.pyc."""
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIPPED]
        for name in names:
            path = Path(folder) / name
            if name.endswith(".pyc"):
                continue
            data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
            digest = hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
            yield path.relative_to(root).as_posix(), digest
