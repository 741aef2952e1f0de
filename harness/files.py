"""The path rule on disk: what a harness-relative path may name under the harness root.

`harness.paths` says how a path is written (pure); this module adds what it may reach on disk: no symlink
anywhere along the path, and a file that exists is a regular, singly linked file (or a folder), never a
FIFO, a device or a hard link to somebody else's file. Every path a harness file names — the manifest's
fields, every backend's trainer settings, data selection, the environment's entry — goes through `inside`
before anything opens it, so a settings file edited by a candidate cannot make the trainer (outside the
sandbox) read a host file. `HarnessPath` is the type config models give such a field: the written rule
always, the on-disk rule when the loader passes the harness root as validation context (`ROOT_CONTEXT`).

The check is done with `lstat` on each component, before the caller opens the path; a harness folder is
not written by anyone else while it is being loaded (the candidate's code runs later, in a sandbox).
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import stat
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, ValidationInfo

from harness.paths import PathRuleError, components, normalise

ROOT_CONTEXT = "harness_root"  # validation context key: the harness root `HarnessPath` fields are checked under
# Names a copy of a user's harness leaves out (with all below them): git metadata, caches, bytecode.
COPY_SKIPPED = (".git", "__pycache__", "*.pyc", ".pytest_cache", ".mypy_cache", ".ruff_cache")
LINK_RULE = "no symlink anywhere along the path, and only regular files or folders (no FIFO, device or hard link)"


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file or folder"


def inside(root: Path, relative: str) -> Path:
    """Return `root / relative` after checking the path rule, written and on disk; nothing is opened.

    A path that does not exist (yet) passes: whoever needs the file says it is missing.

    Raises:
        PathRuleError: the path breaks the rule; the message names the path and the rule.
    """
    parts = components(relative, allow_root=True)
    here = root
    for i, part in enumerate(parts):
        here = here / part
        try:
            st = os.lstat(here)
        except (FileNotFoundError, NotADirectoryError):
            break
        if stat.S_ISDIR(st.st_mode):
            continue
        if stat.S_ISREG(st.st_mode):
            if i < len(parts) - 1 or st.st_nlink == 1:
                break  # a file where a folder should be: opening it fails on its own
            what = "a hard link"
        else:
            what = _kind(st.st_mode)
        shown = "/".join(parts[: i + 1])
        raise PathRuleError(f"{relative!r} is not a file inside the harness: {shown} is {what}; {LINK_RULE}")
    return root.joinpath(*parts)


def _check(value: str, info: ValidationInfo) -> str:
    canonical = normalise(value)
    root = (info.context or {}).get(ROOT_CONTEXT) if isinstance(info.context, dict) else None
    if root is not None:
        inside(Path(root), canonical)
    return canonical


# A config field naming a file inside the harness: the one path rule, checked at validation (see above).
HarnessPath = Annotated[str, AfterValidator(_check)]


def root_context(root: Path | None) -> dict[str, Any] | None:
    """The validation context that makes `HarnessPath` fields check the disk under `root` (None: written rule only)."""
    return None if root is None else {ROOT_CONTEXT: root}


def copy_folder(src: Path, dst: Path, skip: tuple[str, ...] = ()) -> None:
    """Copy a user's harness or task folder `src` to `dst` (new, or an empty folder), never following a link.

    The one copy every place uses that copies a user's folder (session set-up, skill plans). The
    whole tree is checked first and nothing is written when any entry is a symlink, a FIFO, a socket, a
    device or a hard link (a `data/train.jsonl` linked to a 0600 host file was committed into a
    session repository). `skip` holds glob patterns of names left out, with everything below them
    (``.git``, ``__pycache__``, ``*.pyc``); skipped entries are not looked at.

    Raises:
        PathRuleError: the first entry that is not a regular file or folder, named by its path.
    """
    plan = check_tree(src, skip)
    dst.mkdir(parents=True, exist_ok=True)
    for rel, is_dir, mode in plan:
        target = dst / rel
        if is_dir:
            target.mkdir(exist_ok=True)
            continue
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        with os.fdopen(os.open(src / rel, flags), "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):  # swapped since the check: refuse, never read
                raise PathRuleError(f"{src / rel} changed into {_kind(os.fstat(fh.fileno()).st_mode)} while copying")
            with open(target, "xb") as out:
                shutil.copyfileobj(fh, out)
        os.chmod(target, stat.S_IMODE(mode))


def check_tree(src: Path, skip: tuple[str, ...] = ()) -> list[tuple[str, bool, int]]:
    """Check that the folder `src` holds only regular files and folders (see `copy_folder`); nothing is opened.

    Returns:
        `(relative path, is a folder, mode)` of every entry not skipped, parents first.

    Raises:
        PathRuleError: the first entry that is not a regular file or folder, named by its path.
    """
    plan: list[tuple[str, bool, int]] = []
    _walk(src, "", skip, plan)
    return plan


def _walk(folder: Path, rel: str, skip: tuple[str, ...], plan: list[tuple[str, bool, int]]) -> None:
    with os.scandir(folder) as entries:
        names = sorted((entry.name, entry) for entry in entries)
    for name, entry in names:
        if any(fnmatch.fnmatch(name, pattern) for pattern in skip):
            continue
        path = f"{rel}{name}"
        st = entry.stat(follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            plan.append((path, True, st.st_mode))
            _walk(Path(entry.path), f"{path}/", skip, plan)
        elif stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            plan.append((path, False, st.st_mode))
        else:
            what = "a hard link" if stat.S_ISREG(st.st_mode) else _kind(st.st_mode)
            raise PathRuleError(
                f"{folder / name} is {what}: a harness folder is copied without links or special files "
                f"({LINK_RULE}); replace it with a regular file, or remove it"
            )
