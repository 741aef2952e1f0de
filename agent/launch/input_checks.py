"""Checks a session's inputs before anything is created: the harness, its trainer config and the store.

Every mistake a user makes when starting a session (an empty folder, no manifest, malformed
YAML, an unknown key, a function the manifest names but the file does not define, an unreachable
database) becomes one `SetupError` whose message names the file or field and the fix. The CLI prints it
without a traceback; under `langgraph dev` it reaches the client as a readable run error (the server
passes `ValueError` messages through). Nothing here writes: the caller creates the repository, branch
and session rows only after every check passed.

Candidate code is never imported here: functions are looked up in the file's syntax tree.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TYPE_CHECKING

from harness.failures import BadInput
from harness.keys import closest as closest
from harness.keys import unknown_keys

if TYPE_CHECKING:
    from harness.manifest import Harness


class SetupError(BadInput):
    """A session cannot start: the message names the file or field and how to fix it."""


def check_harness(folder: Path) -> Harness:
    """Load and check the harness at `folder`: manifest, keys, named files, functions, trainer config.

    Raises:
        SetupError: the first problem found, naming the file or field and the fix.
    """
    from harness.files import COPY_SKIPPED, check_tree
    from harness.manifest import MANIFEST_NAME, HarnessError, load_harness
    from harness.paths import PathRuleError
    from trainer_backend import plugin_of

    folder = folder.expanduser()
    if not folder.exists():
        raise SetupError(
            f"harness folder {folder} does not exist; name a folder holding {MANIFEST_NAME} "
            "(--harness DIR, or 'harness' in a Studio/SDK input)"
        )
    if not folder.is_dir():
        raise SetupError(f"harness {folder} is a file; pass the folder that holds {MANIFEST_NAME}")
    manifest = folder / MANIFEST_NAME
    if not manifest.is_file():
        state = "is empty" if not any(folder.iterdir()) else f"has no {MANIFEST_NAME}"
        raise SetupError(
            f"harness folder {folder} {state}: a harness needs an {MANIFEST_NAME} manifest; {_skeleton_hint()}"
        )
    _check_manifest_keys(manifest)
    try:
        harness = load_harness(folder)
    except HarnessError as exc:
        raise SetupError(str(exc)) from None
    entries = [("reward", harness.reward), ("eval.strict", harness.strict_eval)]
    if harness.group_filter is not None:
        entries.append(("group_filter", harness.group_filter))
    for field, entry in entries:
        _check_function(harness.path(entry.path), entry.function, field, manifest)
    check = plugin_of(harness.manifest.trainer.backend).check_settings
    if check is not None:  # the default backend's settings: keys, values, the policy it names
        try:
            check(harness.path(harness.manifest.trainer.config), harness)
        except ValueError as exc:
            raise SetupError(str(exc)) from None
    try:  # last: a link a field names is refused above, naming the field
        check_tree(folder, COPY_SKIPPED)  # what a session copies: no links or special files
    except PathRuleError as exc:
        raise SetupError(str(exc)) from None
    return harness


def _skeleton_hint() -> str:
    return "`evotrainer init DIR` writes a commented, working skeleton (docs/harness.md)"


def _check_manifest_keys(manifest: Path) -> None:
    """Refuse unknown manifest keys with the closest valid one (pydantic alone only says 'extra input')."""
    import yaml

    from harness.manifest import Manifest

    try:
        raw = yaml.safe_load(manifest.read_text())
    except yaml.YAMLError as exc:
        raise SetupError(f"{manifest}: not valid YAML ({' '.join(str(exc).split())}); fix the syntax") from None
    if not isinstance(raw, dict):
        raise SetupError(f"{manifest}: expected a mapping of fields (name: ..., reward: ...) at the top level")
    for where, key, valid in unknown_keys(raw, Manifest):
        field = f"{where}.{key}" if where else key
        raise SetupError(f"{manifest}: unknown field '{field}'; {closest(str(key), valid)}")


def _check_function(path: Path, function: str, field: str, manifest: Path) -> None:
    """The file parses and defines `function` at module level (read from its syntax tree, never imported)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as exc:
        where = f"{path}: line {exc.lineno}: {exc.msg}"
        raise SetupError(f"{where}; fix the syntax (the file is named by '{field}' in {manifest})") from None
    except UnicodeDecodeError:
        raise SetupError(f"{path}: not UTF-8 text (named by '{field}' in {manifest})") from None
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(alias.name == "*" for alias in node.names):
                return  # names come from elsewhere: the trainer's import will tell
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    if function in names or "__getattr__" in names:
        return
    functions = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    hint = closest(function, functions) if functions else "the file defines no function"
    raise SetupError(
        f"{path} defines no function '{function}' (field '{field}' in {manifest}); {hint}; "
        "define it or correct the field"
    )


def check_store(url: str) -> None:
    """Connect to the store once, so an unreachable database fails before any repository or branch exists.

    Raises:
        SetupError: the URL is unusable or the server cannot be reached; the message says how to fix it.
    """
    from store.engine import DatabaseURLError, make_engine, verify_connection

    try:
        engine = make_engine(url)
        try:
            verify_connection(engine)
        finally:
            engine.dispose()
    except DatabaseURLError as exc:
        raise SetupError(str(exc)) from None
