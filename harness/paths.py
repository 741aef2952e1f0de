"""The one path rule: how a harness-relative path is written, normalised and checked (pure, no I/O).

Every place that takes a path inside a harness from untrusted hands — the LLM tools (`agent/llm/tools.py`),
the patch applier (`sandboxes/worktree_files.py`), the surface (`harness.manifest.Harness.is_editable` /
`is_protected`) and the single-factor classifier (`agent/decisions/factors.py`) — goes through `normalise`, so they
cannot disagree about what a path names; so does every path a harness file names (manifest
fields, trainer settings of every backend), through `harness.files` (`HarnessPath`, `inside`), which adds
the on-disk half: no link anywhere along the path. The rule, on the path as given (no stripping):

- a non-empty string of ``/``-separated components, relative (no leading ``/``);
- no NUL, no backslash, no control character (they mean different things to git, the shell and the OS);
- no leading or trailing whitespace (``" harness/x"`` is not ``harness/x``);
- no empty component (``a//b``); one trailing ``/`` is allowed and dropped (``harness/`` is a folder);
- ``.`` components are dropped (``./harness/x.py`` is ``harness/x.py``); ``..`` is refused, and so is any
  component made only of dots (``...``), which some tools read as a parent reference;
- no ``.git`` component anywhere, in any case and with trailing dots or spaces (``.GIT``, ``.git.``):
  git's own metadata is never a harness file.

A component that merely starts with dots (``..harness``, ``.harness``) is a different name: it is accepted
here and simply is not under ``harness/`` for the surface, which compares whole components, never string
prefixes. The result is the canonical form, and equal paths have equal canonical forms.
"""

from __future__ import annotations

from typing import NoReturn

from harness.failures import BadInput

MAX_PATH_CHARS = 4096


class PathRuleError(BadInput):
    """A path breaks the path rule; the message names the path and the rule it breaks."""


def normalise(path: str, *, allow_root: bool = False) -> str:
    """Return the canonical form of the harness-relative `path` (components joined by ``/``).

    Args:
        path: the path as given (by a tool call, a patch header, a manifest field).
        allow_root: accept the harness root itself (``""`` or ``"."``), returned as ``""``.

    Raises:
        PathRuleError: the path breaks the rule (see the module docstring); the message says which part.
    """
    return "/".join(components(path, allow_root=allow_root))


def components(path: str, *, allow_root: bool = False) -> tuple[str, ...]:
    """Return the canonical components of `path` (see `normalise`)."""
    if not isinstance(path, str):
        raise PathRuleError(f"path {path!r} is not a string")
    if len(path) > MAX_PATH_CHARS:
        _refuse(path, f"longer than {MAX_PATH_CHARS} characters")
    if "\0" in path or "\\" in path or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in path):
        _refuse(path, "it holds a NUL, a backslash or a control character")
    if path != path.strip():
        _refuse(path, "it starts or ends with whitespace")
    if path.startswith("/"):
        _refuse(path, "it is absolute")
    body = path[:-1] if path.endswith("/") else path
    parts = body.split("/") if body else []
    if "" in parts:
        _refuse(path, "it has an empty component ('//')")
    out: list[str] = []
    for part in parts:
        if part == ".":
            continue
        if set(part) == {"."}:
            _refuse(path, f"component {part!r} is made of dots (no '..' or other parent tricks)")
        if part.rstrip(" .").lower() == ".git":
            _refuse(path, f"component {part!r}: git metadata is never a harness file")
        out.append(part)
    if not out and not allow_root:
        _refuse(path, "it names the harness root, not a file")
    return tuple(out)


def _refuse(path: str, why: str) -> NoReturn:
    shown = repr(path[:200]) + ("..." if len(path) > 200 else "")
    raise PathRuleError(f"{shown} is not a relative path inside the harness: {why}")


def is_under(path: str, prefix: str) -> bool:
    """Say whether canonical `path` is `prefix` or lies below it (whole components; ``""`` is the root)."""
    return not prefix or path == prefix or path.startswith(prefix + "/")


def check_or_none(path: str) -> str | None:
    """Return `normalise(path)`, or None when the path breaks the rule (for yes/no questions)."""
    try:
        return normalise(path)
    except PathRuleError:
        return None
