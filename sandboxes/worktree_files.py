"""Files of a candidate worktree: surface-checked writes and reads, patches, and the diff against its base.

Split from `sandboxes/git_worktree.py` (branches, worktrees, commits, merges); both go through its one
git wrapper, so git still runs only from there. Every write is checked against the harness's editable
surface (`evotrainer.yaml`), and a patch is refused whole when any path it touches is off the surface.

Links and other non-regular files: nothing here creates or follows a symlink, a hard link,
a gitlink (mode 160000), a FIFO or a device. Paths go through the one path rule (`harness.paths`), then
every component is opened relative to its parent's descriptor with ``O_NOFOLLOW`` (a link anywhere on the
way is refused, naming the path), the file must be a regular file with one link, and a patch is first
applied to a scratch index so that a symlink or gitlink entry is refused before the worktree is touched.
`non_regular_changes` finds what any other route (candidate code in the weaker process sandbox) left,
for the submit check.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.manifest import Harness
from harness.paths import PathRuleError, components, normalise
from sandboxes.git_worktree import (
    GIT_CONTROL_RULE,
    GitWorktreeError,
    LinkRefusedError,
    PatchError,
    SurfaceError,
    _git,
    git_control_files,
)

REGULAR_MODES = ("100644", "100755")
LINK_RULE = "no symlinks, hard links, gitlinks or other non-regular files: only regular files may be read or written"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def canonical(rel: str) -> str:
    """Return the canonical form of a harness-relative path, or raise `SurfaceError` naming the rule broken."""
    try:
        return normalise(rel)
    except PathRuleError as exc:
        raise SurfaceError(str(exc)) from None


def surface_path(rel: str, harness: Harness) -> str:
    """Return canonical `rel` when it is on the editable surface; raise `SurfaceError` saying why not."""
    surface = harness.manifest.surface
    where = f"(editable: {surface.editable}, protected: {surface.protected})"
    try:
        path = normalise(rel)
    except PathRuleError as exc:
        raise SurfaceError(f"{exc} {where}") from None
    if harness.is_protected(path):
        raise SurfaceError(f"{path} is on the protected surface and may never be edited {where}")
    if not harness.is_editable(path):
        raise SurfaceError(f"{path} is outside the editable surface {where}")
    if git_control_files([path]):
        raise SurfaceError(f"{path}: {GIT_CONTROL_RULE}")
    return path


def check_surface(worktree: Path, rel: str, harness: Harness) -> Path:
    """Return the absolute path ``rel`` names in the worktree, or raise ``SurfaceError`` (see ``write_file``).

    Also refuses a path reached through a symlink, or naming one (``LinkRefusedError``).
    """
    path = surface_path(rel, harness)
    parts = components(path)
    with _open_parent(worktree, parts, create=False) as dir_fd:
        if dir_fd is not None:
            _lstat_regular(dir_fd, parts[-1], path, missing_ok=True)
    return worktree / path


# --- no-follow file access ----------------------------------------------------------------------------


@contextlib.contextmanager
def _open_parent(worktree: Path, parts: tuple[str, ...], *, create: bool) -> Iterator[int | None]:
    """Yield a descriptor of the folder holding `parts[-1]`, opened one component at a time without links.

    Yields None when a folder on the way does not exist and `create` is False.

    Raises:
        LinkRefusedError: a component on the way is a symlink or not a folder.
    """
    fds = [os.open(worktree, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]  # the worktree itself is ours
    try:
        for i, name in enumerate(parts[:-1]):
            shown = "/".join(parts[: i + 1])
            try:
                fds.append(os.open(name, _DIR_FLAGS, dir_fd=fds[-1]))
            except FileNotFoundError:
                if not create:
                    yield None
                    return
                os.mkdir(name, 0o755, dir_fd=fds[-1])
                fds.append(os.open(name, _DIR_FLAGS, dir_fd=fds[-1]))
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise LinkRefusedError(f"{shown} is a symlink or not a folder; {LINK_RULE}") from None
                raise
        yield fds[-1]
    finally:
        for fd in fds:
            os.close(fd)


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _lstat_regular(dir_fd: int, name: str, shown: str, *, missing_ok: bool) -> os.stat_result | None:
    """Return the lstat of `name` when it is a regular file with one link (None when missing and allowed)."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise
    if not stat.S_ISREG(st.st_mode):
        raise LinkRefusedError(f"{shown} is {_kind(st.st_mode)}; {LINK_RULE}")
    if st.st_nlink > 1:
        raise LinkRefusedError(f"{shown} is a hard link ({st.st_nlink} names for one file); {LINK_RULE}")
    return st


def read_bytes(worktree: Path, rel: str) -> bytes:
    """Read the regular file ``rel`` of the worktree without following any link (no surface restriction).

    Raises:
        SurfaceError: ``rel`` breaks the path rule.
        LinkRefusedError: ``rel`` or a folder on its way is a symlink, or it is not a regular file.
        FileNotFoundError: no such file.
    """
    path = canonical(rel)
    parts = components(path)
    with _open_parent(worktree, parts, create=False) as dir_fd:
        if dir_fd is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", path)
        before = _lstat_regular(dir_fd, parts[-1], path, missing_ok=False)
        assert before is not None
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if (st.st_ino, st.st_dev) != (before.st_ino, before.st_dev) or not stat.S_ISREG(st.st_mode):
            raise LinkRefusedError(f"{path} changed while it was opened; {LINK_RULE}")
        return fh.read()


def read_file(worktree: Path, rel: str) -> str:
    """Read ``rel`` as text (see `read_bytes`; undecodable bytes are replaced)."""
    return read_bytes(worktree, rel).decode("utf-8", errors="replace")


def write_file(worktree: Path, rel: str, content: str, harness: Harness) -> Path:
    """Write ``content`` to ``rel`` inside the worktree, refusing anything off the editable surface.

    The folders on the way are created (never through a link); an existing file keeps its mode.

    Raises:
        SurfaceError: ``rel`` breaks the path rule, is protected or is not editable.
        LinkRefusedError: ``rel`` or a folder on its way is a symlink, a hard link or not a regular file.
    """
    path = surface_path(rel, harness)
    parts = components(path)
    data = content.encode("utf-8", errors="surrogateescape")
    with _open_parent(worktree, parts, create=True) as dir_fd:
        assert dir_fd is not None
        before = _lstat_regular(dir_fd, parts[-1], path, missing_ok=True)
        flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | (0 if before else os.O_CREAT | os.O_EXCL)
        try:
            fd = os.open(parts[-1], flags, 0o644, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EEXIST, errno.ENXIO):
                raise LinkRefusedError(f"{path} changed while it was opened; {LINK_RULE}") from None
            raise
    with os.fdopen(fd, "wb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1 or (before and st.st_ino != before.st_ino):
            raise LinkRefusedError(f"{path} changed while it was opened; {LINK_RULE}")
        fh.truncate(0)
        fh.write(data)
    return worktree / path


@dataclass(frozen=True)
class Entry:
    """One entry of a worktree listing: its canonical path, kind ("file" or why it is not) and size."""

    path: str
    kind: str
    size: int


def list_tree(worktree: Path, rel: str = "", skip: frozenset[str] = frozenset()) -> list[Entry]:
    """List everything under ``rel`` (a folder or a file) without following links, sorted by path.

    Regular files come back with ``kind == "file"``; links and other non-regular entries with their kind
    (``"a symlink"``...), so a caller can show that they exist without reading them. Folders named in
    `skip` (e.g. ``__pycache__``) are not entered.

    Raises:
        SurfaceError: ``rel`` breaks the path rule.
        LinkRefusedError: ``rel`` or a folder on its way is a symlink.
        FileNotFoundError: ``rel`` does not exist.
    """
    try:
        parts = components(rel, allow_root=True)
    except PathRuleError as exc:
        raise SurfaceError(str(exc)) from None
    if not parts:
        return _walk(os.open(worktree, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), "", skip)
    path = "/".join(parts)
    with _open_parent(worktree, parts, create=False) as dir_fd:
        if dir_fd is None:
            raise FileNotFoundError(errno.ENOENT, "no such file or folder", path)
        st = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            return _walk(os.open(parts[-1], _DIR_FLAGS, dir_fd=dir_fd), path, skip)
    kind = "file" if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 else _entry_kind(st)
    return [Entry(path, kind, st.st_size)]


def _entry_kind(st: os.stat_result) -> str:
    return "a hard link" if stat.S_ISREG(st.st_mode) else _kind(st.st_mode)


def _walk(top_fd: int, prefix: str, skip: frozenset[str]) -> list[Entry]:
    out: list[Entry] = []
    try:
        for dirpath, dirnames, filenames, dir_fd in os.fwalk(".", dir_fd=top_fd, follow_symlinks=False):
            base = os.path.normpath(os.path.join(prefix, dirpath)) if prefix or dirpath != "." else ""
            base = "" if base == "." else base
            linked = [d for d in dirnames if stat.S_ISLNK(os.stat(d, dir_fd=dir_fd, follow_symlinks=False).st_mode)]
            dirnames[:] = [
                d for d in dirnames if d not in linked and d not in skip and d.rstrip(" .").lower() != ".git"
            ]  # fwalk lists a link to a folder among the folders (and never enters it): show it as a link
            for name in [*filenames, *linked]:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                kind = "file" if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 else _entry_kind(st)
                out.append(Entry(f"{base}/{name}" if base else name, kind, st.st_size))
    finally:
        os.close(top_fd)
    return sorted(out, key=lambda e: e.path)


# --- patches ------------------------------------------------------------------------------------------


_HEADER_PATH = re.compile(r"^(?:(?:copy|rename) (?:from|to|old|new) |--- a/|\+\+\+ b/)(?P<path>.+?)\t?$")
_GIT_HEADER = re.compile(r"^diff --git a/(?P<a>.+?) b/(?P<b>.+)$")


def patch_paths(worktree: Path, diff_text: str) -> list[str]:
    """Return every path a patch touches, as git reads it, plus every path its headers name.

    ``git apply --numstat`` lists only the destination of a pure copy (``copy from eval/strict.py`` /
    ``copy to harness/x.py`` would copy the evaluator onto the editable surface unseen), so the sources
    and targets named by ``diff --git``, ``---``/``+++``, ``copy``/``rename`` header lines are added
    (quotes stripped; a C-quoted name with escapes then breaks the path rule and the patch is refused).
    """
    return list(dict.fromkeys([*_numstat_paths(worktree, diff_text), *_named_paths(diff_text)]))


def _named_paths(diff_text: str) -> list[str]:
    names: list[str] = []
    for line in diff_text.splitlines():
        header = _GIT_HEADER.match(line)
        found = [header["a"], header["b"]] if header else []
        match = _HEADER_PATH.match(line)
        if match and match["path"] != "/dev/null":
            found.append(match["path"])
        names += [name[1:-1] if len(name) > 1 and name[0] == name[-1] == '"' else name for name in found]
    return names


def _numstat_paths(worktree: Path, diff_text: str) -> list[str]:
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

    With ``harness``, every path the patch touches must be on the editable surface. Whatever the harness,
    a patch that would leave a symlink, gitlink or any other non-regular entry is refused before the
    worktree is touched, and so is one that reaches a path through a symlink. Returns the paths.

    Raises:
        PatchError: the patch is empty or does not apply; the message carries git's explanation.
        SurfaceError: the patch touches a protected or non-editable path, or breaks the path rule.
        LinkRefusedError: the patch would create or change a non-regular file (names the path and mode).
    """
    if not diff_text.strip():
        raise PatchError("empty patch: nothing to apply")
    if not diff_text.endswith("\n"):
        diff_text += "\n"
    paths = [canonical(p) for p in patch_paths(worktree, diff_text)]
    for rel in paths:
        if harness is not None:
            check_surface(worktree, rel, harness)
        else:
            _check_reachable(worktree, rel)
    with _patch_file(diff_text) as patch:
        _refuse_non_regular_entries(worktree, patch)
        for check in (True, False):
            args = ["apply", "--whitespace=nowarn"] + (["--check"] if check else []) + [patch]
            try:
                _git(worktree, *args)
            except GitWorktreeError as exc:
                raise PatchError(f"patch does not apply in {worktree}: {exc.detail}", exc.detail) from None
    for rel in paths:  # defence in depth: what git wrote must be regular files (or gone)
        _check_reachable(worktree, rel)
    return paths


def _check_reachable(worktree: Path, rel: str) -> None:
    """Refuse `rel` when a link lies on its way or it is not a regular file (a missing file is fine)."""
    parts = components(canonical(rel))
    with _open_parent(worktree, parts, create=False) as dir_fd:
        if dir_fd is not None:
            _lstat_regular(dir_fd, parts[-1], rel, missing_ok=True)


def _refuse_non_regular_entries(worktree: Path, patch: str) -> None:
    """Apply `patch` to a scratch index holding the worktree's files and refuse any non-regular entry it makes.

    Git's own reading of the patch decides (``new file mode 120000``, ``new mode 160000``, binary or
    text, renames and copies alike): nothing here parses the patch text.
    """
    with tempfile.TemporaryDirectory(prefix="evotrainer-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git(worktree, "read-tree", "HEAD", env=env)
        _git(worktree, "add", "--all", env=env)
        before = _index_entries(worktree, env)
        try:
            _git(worktree, "apply", "--cached", "--whitespace=nowarn", patch, env=env)
        except GitWorktreeError as exc:
            raise PatchError(f"patch does not apply in {worktree}: {exc.detail}", exc.detail) from None
        for path, mode in sorted(_index_entries(worktree, env).items()):
            if before.get(path) != mode and mode not in REGULAR_MODES:
                raise LinkRefusedError(f"refused: the patch makes {path} {_mode_kind(mode)} (mode {mode}); {LINK_RULE}")


def _index_entries(worktree: Path, env: dict[str, str]) -> dict[str, str]:
    out = _git(worktree, "ls-files", "--stage", "-z", env=env, strip=False)
    entries = {}
    for record in out.split("\0"):
        if record:
            meta, _, path = record.partition("\t")
            entries[path] = meta.split(" ", 1)[0]
    return entries


def _mode_kind(mode: str) -> str:
    return {"120000": "a symlink", "160000": "a gitlink (submodule)"}.get(mode, "a non-regular entry")


def non_regular_changes(worktree: Path, base_sha: str) -> list[str]:
    """Return why each new non-regular entry of the worktree is one (symlink, gitlink, hard link, FIFO...); [].

    Covers what no tool would make but candidate code in the weaker process sandbox could: git's modes of
    every change against ``base_sha`` (same scope as ``diff``), and every entry on disk that is not a
    regular single-link file — git does not even see a FIFO, which could still hang whoever opens it.
    Symlinks the base commit itself holds are the incumbent's, not the candidate's.
    """
    _git(worktree, "add", "--all")
    out = _git(worktree, "diff", "--cached", "--no-renames", "--raw", "-z", base_sha, strip=False)
    fields = out.split("\0")
    problems: dict[str, str] = {}
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        new_mode = meta[1:].split(" ")[1] if meta.startswith(":") else "000000"
        if new_mode != "000000" and new_mode not in REGULAR_MODES:
            problems[path] = f"{path} is {_mode_kind(new_mode)} (mode {new_mode})"
    base_links = {
        record.partition("\t")[2]
        for record in _git(worktree, "ls-tree", "-r", "-z", base_sha, strip=False).split("\0")
        if record.startswith("120000 ")
    }
    for entry in list_tree(worktree):
        inherited = entry.kind == "a symlink" and entry.path in base_links
        if entry.kind != "file" and entry.path not in problems and not inherited:
            problems[entry.path] = f"{entry.path} is {entry.kind}"
    return [problems[p] for p in sorted(problems)]


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
    return _git(
        worktree,
        *("-c", "core.quotePath=false"),  # non-ASCII names verbatim; names git still quotes break the path rule
        *("diff", "--cached", "--no-renames", "--no-color", "--no-ext-diff", base_sha),
        strip=False,
    )


def drop_bytecode_caches(worktree: Path) -> list[str]:
    """Remove every ``__pycache__`` folder of the worktree (never through a link); return their paths.

    Bytecode is derived, yet Python runs a cached ``.pyc`` in place of its source when the stamps match: a
    cache left in a candidate (by an in-process run, or planted) would run unreviewed. The
    sandboxes never write one (``PYTHONDONTWRITEBYTECODE``) and never copy one in.
    """
    import shutil

    dropped = []
    for folder, dirs, _ in os.walk(worktree):  # os.walk does not enter links to folders
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in [d for d in dirs if d == "__pycache__" and not os.path.islink(os.path.join(folder, d))]:
            shutil.rmtree(os.path.join(folder, name))
            dirs.remove(name)
            dropped.append(os.path.relpath(os.path.join(folder, name), worktree))
    return sorted(dropped)


def changed_files(worktree: Path, base_sha: str) -> list[str]:
    """Return the paths changed in the worktree against ``base_sha`` (same scope as ``diff``)."""
    _git(worktree, "add", "--all")
    out = _git(worktree, "diff", "--cached", "--no-renames", "--name-only", "-z", base_sha, strip=False)
    return [p for p in out.split("\0") if p]
