"""Build defect-scenario folders on demand: `scenario_dir(name, form)` is the one way to reach one.

A scenario is committed as its defect only: a `Recipe` in one of the generators beside this file
(`make_scenarios.py`, `make_explore_scenarios.py`, `make_agentic_scenarios.py`, `make_model_scenarios.py`)
names the fixed example under `examples/` both forms are copied from and the edit that makes the defective
form. `scenario_dir` builds the
full folder, `NAME/{defective,oracle}/` and `NAME/scenario.json`, the first time it is asked for, into a
cache that git ignores (`benchmarks/scenarios/.cache/`, or the folder `EVOTRAINER_SCENARIO_CACHE` names).

- A digest of every input (the generators' code and every file under `examples/`) is part of the cache path,
  so an edit to either builds afresh: a stale build is never reused.
- A build is written into a temporary folder beside its final place and renamed into place, so test processes
  that ask for the same scenario at the same time each see a complete folder: the first rename wins, the
  others drop their copy.
- The folders are shared: treat them as read-only and copy one before editing it.

The benchmark runner (`benchmarks/run_scenarios.py`) and every test that reads a scenario folder go through
this module; the folder holding it is their import root (pytest's `pythonpath`, the runner's `sys.path`).

Run: ``python benchmarks/scenarios/scenario_cache.py [NAME ...]`` builds the named scenarios (default: all)
and prints their folders; an old cache is removed with ``rm -rf benchmarks/scenarios/.cache``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

import make_agentic_scenarios
import make_explore_scenarios
import make_model_scenarios
import make_scenarios
from make_scenarios import Recipe

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
EXAMPLES = ROOT / "examples"
CACHE_ENV = "EVOTRAINER_SCENARIO_CACHE"
FORMS = ("defective", "oracle")
DIGEST_CHARS = 16  # of the sha256 hex digest in the cache path: 64 bits, plenty for the few builds a cache holds
_SKIPPED_DIRS = frozenset({"__pycache__", ".git"})  # never inputs (the generators do not copy them either)


def recipes() -> dict[str, Recipe]:
    """Every scenario's recipe by name, from the four generators (a name defined twice is an error)."""
    out: dict[str, Recipe] = {}
    for module in (make_scenarios, make_explore_scenarios, make_agentic_scenarios, make_model_scenarios):
        for recipe in module.recipes():
            name = recipe.scenario.name
            if name in out:
                raise ValueError(f"scenario {name!r} is defined twice ({module.__file__}); rename one")
            out[name] = recipe
    return out


def scenario_names() -> list[str]:
    """The names of every scenario, sorted."""
    return sorted(recipes())


def _files(root: Path) -> list[tuple[str, Path]]:
    """(relative POSIX path, path) of every file under `root`, sorted, without bytecode or `.git`."""
    out = []
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if path.is_file() and path.suffix != ".pyc" and not _SKIPPED_DIRS.intersection(rel.parts):
            out.append((rel.as_posix(), path))
    return sorted(out)


def _digest(files: list[tuple[str, Path]]) -> str:
    digest = hashlib.sha256()
    for label, path in files:
        digest.update(label.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def inputs_digest(generators: Path = HERE, examples: Path = EXAMPLES) -> str:
    """A digest of every input of a build: the generators' code (`*.py` in `generators`) and every file under
    `examples`, names and contents; part of the cache path."""
    files = [(f"generators/{p.name}", p) for p in sorted(generators.glob("*.py"))]
    files += [(f"examples/{rel}", p) for rel, p in _files(examples)]
    return _digest(files)[:DIGEST_CHARS]


def content_digest(folder: Path) -> str:
    """A digest of a built folder's files, names and contents (bytecode a run wrote there left out)."""
    return _digest(_files(folder))


def cache_root() -> Path:
    """The folder that holds the builds: `$EVOTRAINER_SCENARIO_CACHE`, else `benchmarks/scenarios/.cache`."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser().resolve() if configured else HERE / ".cache"


def scenario_dir(name: str, form: str | None = None) -> Path:
    """Return the folder of scenario `name`'s `form` (`defective` or `oracle`), building the scenario if needed.

    With `form` None, return the scenario folder (both forms and `scenario.json`). The folder is
    `<cache>/<inputs digest>/<name>/<form>`: the form's parent is named after the scenario, as before.

    Raises:
        ValueError: `name` is no scenario or `form` no form (the message lists the valid ones).
    """
    table = recipes()
    if name not in table:
        raise ValueError(f"unknown scenario {name!r}; scenarios: {', '.join(sorted(table))}")
    if form is not None and form not in FORMS:
        raise ValueError(f"unknown scenario form {form!r} of {name!r}; forms: {', '.join(FORMS)}")
    folder = cache_root() / inputs_digest() / name
    if not folder.is_dir():
        _build(table[name], folder)
    return folder if form is None else folder / form


def _build(recipe: Recipe, folder: Path) -> None:
    """Write `recipe` into a temporary sibling of `folder`, then rename it into place (atomic on one file system).

    When another process renamed its build into place first, this one's copy is dropped: both are built from
    the same inputs (the digest in the path), so either is the scenario.
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the scenario folder is read by whoever runs the benchmarks
        recipe.write(tmp)
        try:
            tmp.rename(folder)
        except OSError:
            if not folder.is_dir():  # not a lost race: a real failure (permissions, disk)
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone after a successful rename; a lost race's or failed copy


def main(argv: list[str]) -> int:
    """Build the scenarios named in `argv` (default: all) and print one folder per line."""
    for name in argv or scenario_names():
        print(scenario_dir(name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
