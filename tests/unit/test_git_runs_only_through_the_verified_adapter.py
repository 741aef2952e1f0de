"""Git runs only in the git adapter (`sandboxes/git_*.py`), and the adapter verifies every revision it is given.

Graph state on a LangGraph server is client input, so a revision from it may be ``--output=FILE`` or another
repository's commit. Two scans over the source (with `ast`):
- no product module outside `sandboxes/` runs git: no ``<repo>.git.<command>(...)`` (GitPython), no
  ``Git(...)``, no process started with ``git`` as its program;
- every public function of the git adapter that takes a revision, branch or commit passes it through a
  verifier (`_rev`: ``rev-parse --verify --end-of-options <rev>^{commit}``, or `git_revisions`' checks).
Each scanner is first shown the code it must catch.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("agent", "skills", "store", "harness", "diagnostics", "trainer_backend")
VERIFIERS = {"_rev", "verified_commit", "session_branch_commit", "_sha"}
REVISION_WORDS = ("rev", "branch", "commit", "sha", "base", "head")
PROCESS_CALLS = {"run", "Popen", "check_output", "check_call", "call", "create_subprocess_exec"}


def git_calls(tree: ast.AST) -> Iterator[int]:
    """Line numbers of calls that run git directly."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute) and func.value.attr == "git":
            yield node.lineno  # repo.git.diff(...)
        elif isinstance(func, ast.Name) and func.id == "Git":
            yield node.lineno  # git.Git(cwd).execute(...)
        elif (isinstance(func, ast.Attribute) and func.attr in PROCESS_CALLS) or (
            isinstance(func, ast.Name) and func.id in PROCESS_CALLS
        ):
            argv = node.args[0] if node.args else None
            first = argv.elts[0] if isinstance(argv, ast.List | ast.Tuple) and argv.elts else argv
            if isinstance(first, ast.Constant) and first.value == "git":
                yield node.lineno


def unverified_functions(tree: ast.Module) -> Iterator[str]:
    """Public functions that take a revision-like parameter and never call a verifier."""
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef) or fn.name.startswith("_"):
            continue
        params = [a.arg for a in (*fn.args.args, *fn.args.kwonlyargs) if any(w in a.arg for w in REVISION_WORDS)]
        called = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
        called |= {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute)}
        if params and not called & VERIFIERS:
            yield f"{fn.name}({', '.join(params)})"


def test_the_scanners_catch_what_they_are_for() -> None:
    bad = ast.parse(
        "def _diff(state, cand):\n"
        "    return Repo(state['harness_dir']).git.diff(state['version']['commit'], cand['branch'])\n"
        "def show(repo, rev):\n"
        "    return subprocess.run(['git', '-C', repo, 'show', rev])\n"
        "def log(repo, rev):\n"
        "    return Git(repo).execute(['git', 'log', rev])\n"
    )
    assert list(git_calls(bad)) == [2, 4, 6]
    assert list(unverified_functions(bad)) == ["show(rev)", "log(rev)"]
    good = ast.parse("def show(root, rev):\n    return _git(root, 'show', _rev(root, rev))\n")
    assert list(git_calls(good)) == [] and list(unverified_functions(good)) == []


def test_no_product_module_outside_sandboxes_runs_git() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
        for line in git_calls(ast.parse(path.read_text()))
    ]
    assert found == [], f"git runs outside sandboxes/git_*.py (add a function to the git adapter): {found}"


def test_every_git_adapter_function_verifies_its_revisions() -> None:
    adapter = sorted((ROOT / "sandboxes").glob("git_*.py"))
    assert {p.name for p in adapter} >= {"git_worktree.py", "git_revisions.py", "git_versions.py"}
    found = [f"{p.name}: {name}" for p in adapter for name in unverified_functions(ast.parse(p.read_text()))]
    assert found == [], f"revisions passed to git without `rev-parse --verify --end-of-options`: {found}"
