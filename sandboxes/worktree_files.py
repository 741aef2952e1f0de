"""Files of a candidate worktree: surface-checked writes and reads, patches, and the diff against its base.

Split from `sandboxes/git_worktree.py` (branches, worktrees, commits, merges); both go through its one
git wrapper, so git still runs only from there. Every write is checked against the harness's editable
surface (`evotrainer.yaml`), and a patch is refused whole when any path it touches is off the surface.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from harness.manifest import Harness
from sandboxes.git_worktree import GitWorktreeError, PatchError, SurfaceError, _git


def write_file(worktree: Path, rel: str, content: str, harness: Harness) -> Path:
    """Write ``content`` to ``rel`` inside the worktree, refusing anything off the editable surface.

    Raises:
        SurfaceError: ``rel`` is absolute, escapes the worktree, is protected or is not editable.
    """
    target = _surface_path(worktree, rel, harness)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)
    return target


def read_file(worktree: Path, rel: str) -> str:
    """Read ``rel`` inside the worktree (no surface restriction on reading editable or other harness files)."""
    target = (worktree / rel).resolve()
    if not target.is_relative_to(worktree.resolve()):
        raise SurfaceError(f"{rel!r} resolves outside the worktree {worktree}")
    return target.read_text()


def check_surface(worktree: Path, rel: str, harness: Harness) -> Path:
    """Return the absolute path ``rel`` names in the worktree, or raise ``SurfaceError`` (see ``write_file``)."""
    return _surface_path(worktree, rel, harness)


def _surface_path(worktree: Path, rel: str, harness: Harness) -> Path:
    surface = harness.manifest.surface
    where = f"(editable: {surface.editable}, protected: {surface.protected})"
    p = Path(rel)
    if p.is_absolute() or ".." in p.parts or not rel.strip():
        raise SurfaceError(f"{rel!r} is not a relative path inside the harness {where}")
    if harness.is_protected(rel):
        raise SurfaceError(f"{rel} is on the protected surface and may never be edited {where}")
    if not harness.is_editable(rel):
        raise SurfaceError(f"{rel} is outside the editable surface {where}")
    target = (worktree / p).resolve()
    if not target.is_relative_to(worktree.resolve()):
        raise SurfaceError(f"{rel} resolves outside the worktree through a symlink {where}")
    return target


def patch_paths(worktree: Path, diff_text: str) -> list[str]:
    """Return every path a patch touches (both sides of renames), as git reads it."""
    with _patch_file(diff_text) as patch:
        try:
            out = _git(worktree, "apply", "--numstat", "-z", patch, strip=False)
        except GitWorktreeError as exc:
            raise PatchError(f"unreadable patch: {exc.detail}", exc.detail) from None
    fields = out.split("\0")
    paths: list[str] = []
    i = 0
    while i < len(fields):
        entry = fields[i]
        if not entry:
            i += 1
            continue
        name = entry.split("\t", 2)[2] if entry.count("\t") >= 2 else ""
        if name:
            paths.append(name)
            i += 1
        else:  # rename/copy: the two names follow as separate NUL-terminated fields
            paths += [fields[i + 1], fields[i + 2]]
            i += 3
    return paths


def apply_patch(worktree: Path, diff_text: str, harness: Harness | None = None) -> list[str]:
    """Apply a unified diff to the worktree (``git apply --check`` first, then ``git apply``).

    With ``harness``, every path the patch touches must be on the editable surface. Returns the paths.

    Raises:
        PatchError: the patch is empty or does not apply; the message carries git's explanation.
        SurfaceError: the patch touches a protected or non-editable path.
    """
    if not diff_text.strip():
        raise PatchError("empty patch: nothing to apply")
    if not diff_text.endswith("\n"):
        diff_text += "\n"
    paths = patch_paths(worktree, diff_text)
    if harness is not None:
        for rel in paths:
            _surface_path(worktree, rel, harness)
    with _patch_file(diff_text) as patch:
        for check in (True, False):
            args = ["apply", "--whitespace=nowarn"] + (["--check"] if check else []) + [patch]
            try:
                _git(worktree, *args)
            except GitWorktreeError as exc:
                raise PatchError(f"patch does not apply in {worktree}: {exc.detail}", exc.detail) from None
    return paths


@contextlib.contextmanager
def _patch_file(text: str) -> Iterator[str]:
    """Yield the path of a temporary file holding a patch; delete it afterwards."""
    fd, path = tempfile.mkstemp(suffix=".diff", prefix="evotrainer-")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        yield path
    finally:
        os.unlink(path)


def diff(worktree: Path, base_sha: str) -> str:
    """Return the candidate's full diff against ``base_sha``: commits, staged, unstaged and new files.

    Stages every change in the worktree (``git add --all``) so that new files appear; the candidate's
    worktree is ours, so this has no effect a later ``commit_candidate`` would not have.
    Renames are shown as delete + add so that both paths meet the surface check.
    """
    _git(worktree, "add", "--all")
    return _git(worktree, "diff", "--cached", "--no-renames", "--no-color", "--no-ext-diff", base_sha, strip=False)


def changed_files(worktree: Path, base_sha: str) -> list[str]:
    """Return the paths changed in the worktree against ``base_sha`` (same scope as ``diff``)."""
    _git(worktree, "add", "--all")
    out = _git(worktree, "diff", "--cached", "--no-renames", "--name-only", "-z", base_sha, strip=False)
    return [p for p in out.split("\0") if p]
