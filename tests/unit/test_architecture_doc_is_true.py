"""docs/architecture.md describes the code as it is: the claims a test can read are read here.

The floors, the git adapter, the vocabularies and the run-folder layout have their own tests (named in the doc);
this one keeps the doc's list of functions with more than eight parameters exact, and checks that every module
the doc names in backticks exists.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PRODUCT = ("agent", "diagnostics", "harness", "sandboxes", "skills", "store", "trainer_backend")
MAX_PARAMETERS = 8


def wide_functions() -> dict[str, int]:
    """`path:function` -> parameter count (without self/cls) of every product function over the limit."""
    found = {}
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    args = node.args
                    count = len(args.posonlyargs) + len(args.args) + len(args.kwonlyargs)
                    count -= bool(args.args and args.args[0].arg in ("self", "cls"))
                    if count > MAX_PARAMETERS:
                        found[f"{path.relative_to(ROOT)}:{node.name}"] = count
    return found


def test_the_doc_lists_exactly_the_functions_over_eight_parameters() -> None:
    listed = {name: int(count) for name, count in re.findall(r"`([\w/.]+\.py:\w+)` \((\d+)\)", DOC.read_text())}
    assert listed == wide_functions(), "docs/architecture.md 'Not yet': update the list (or narrow the function)"


def test_every_module_the_doc_names_exists() -> None:
    named = set(
        re.findall(
            r"`((?:agent|diagnostics|harness|sandboxes|skills|store|trainer_backend)/[\w/]+\.py)", DOC.read_text()
        )
    )
    assert named and [n for n in sorted(named) if not (ROOT / n).is_file()] == []
