"""A test that asserts nothing cannot fail: every test function of the suite checks something.

A test checks when its body (or a helper function of its own module that it calls, followed through further
helpers) has an `assert`, expects an exception or a failure (`pytest.raises`, `pytest.warns`, `pytest.fail`),
skips with a reason (`pytest.skip`, `importorskip`), or calls a helper named `assert_*` / `expect_*`. Calling
product code that raises on bad input is not enough: say what the call must return.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
CHECKING_CALLS = ("raises", "warns", "fail", "skip", "xfail", "importorskip")
CHECKING_PREFIXES = ("assert", "_assert", "expect", "_expect")


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _checks(fn: ast.AST, local: dict[str, ast.AST], seen: frozenset[str]) -> bool:
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Call):
            name = _call_name(node)
            if name in CHECKING_CALLS or name.startswith(CHECKING_PREFIXES):
                return True
            if name in local and name not in seen and _checks(local[name], local, seen | {name}):
                return True
    return False


def unchecked_tests(root: Path) -> list[str]:
    """`file:line name` of every test function under `root` that checks nothing."""
    found = []
    for path in sorted(root.rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        local: dict[str, ast.AST] = {
            n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        for name, fn in local.items():
            if name.startswith("test_") and not _checks(fn, local, frozenset({name})):
                found.append(f"{path.relative_to(root)}:{getattr(fn, 'lineno', 0)} {name}")
    return found


def test_every_test_function_checks_something() -> None:
    assert unchecked_tests(TESTS) == []


def test_the_scan_finds_a_test_that_only_calls_product_code(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(
        "def helper(x):\n    assert x\n\n"
        "def test_calls_only(h):\n    check_harness(h)\n\n"
        "def test_through_a_helper():\n    helper(1)\n\n"
        "def test_raises():\n    with pytest.raises(ValueError):\n        int('x')\n"
    )
    assert unchecked_tests(tmp_path) == ["test_sample.py:4 test_calls_only"]
