"""Whether a reward reads its reference answer, and the candidates that make it.

A verl reward is called as ``compute_score(data_source, solution_str, ground_truth, extra_info)``. A reward
that pays strict-wrong responses like right ones (`score.rewarded_wrong`, reward hacking) while its code
never reads ``ground_truth`` judges the response against something else: a field of the row the policy
can see (the examples its prompt shows), a cached answer, nothing at all. This module reads the reward's
source with `ast`, never running it:

- `reference_use` follows the reference parameter from the entry function into the module's own functions
  it is passed to (by position or keyword, a few calls deep). It is *read* when any use is something other
  than being passed on; it is *ignored* when every path ends in a parameter its function never uses.
- In each function that receives the reference and ignores it, every read of a constant key of the row's
  ``extra_info`` (``extra_info.get("K")``, ``extra_info["K"]``, through the name it is passed on as) is a
  place the reference may have been meant: `Substitution`. `substitute_reference` writes the candidate that
  reads the reference there instead. Which one (if any) makes the reward stop paying wrong responses is for
  the backtest to show on the cached rollouts (`diagnostics/backtest.py: MUST_FALL`).

Pure: no I/O.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

REFERENCE_INDEX, EXTRA_INDEX = 2, 3  # positions of ground_truth and extra_info in verl's signature
MAX_DEPTH = 3  # calls followed from the entry function


class CodeReferenceError(ValueError):
    """The source cannot be read, or names no such function or substitution; the message says which."""


@dataclass(frozen=True)
class Substitution:
    """A read of the row's ``extra_info`` in a function that receives the reference and ignores it."""

    function: str
    key: str  # the extra_info key read there
    line: int
    text: str  # the expression's source (``extra_info.get("public_tests")``)
    reference: str  # the function's name for the reference parameter
    extra: str  # the function's name for the row's extra_info


@dataclass(frozen=True)
class ReferenceUse:
    """How the reward's entry function treats its reference parameter."""

    read: bool  # some use does more than pass it on
    ignored_in: tuple[str, ...]  # the functions it is passed to that never use it
    substitutions: tuple[Substitution, ...]


def reference_use(source: str, function: str) -> ReferenceUse:
    """Trace the reference parameter of `function` through the module's functions.

    Raises:
        CodeReferenceError: the source does not parse or is nested too deeply to read, or `function` is no
            top-level function with a reference parameter.
    """
    try:
        return _trace(source, function)
    except RecursionError:  # a candidate's expression too deep for `ast.unparse`: hostile or broken, never a crash
        raise CodeReferenceError("the reward file is nested too deeply to trace its reference") from None


def _trace(source: str, function: str) -> ReferenceUse:
    funcs = _functions(source)
    entry = funcs.get(function)
    if entry is None:
        raise CodeReferenceError(f"the reward file defines no top-level function {function!r}")
    params = _params(entry)
    if len(params) <= REFERENCE_INDEX:
        raise CodeReferenceError(f"{function} takes no reference parameter (verl's third, ground_truth)")
    extra = params[EXTRA_INDEX] if len(params) > EXTRA_INDEX else None
    read, ignored, subs = False, [], []
    todo = [(entry, params[REFERENCE_INDEX], extra, 0)]
    seen: set[tuple[str, str]] = set()
    while todo:
        fn, ref, extra_name, depth = todo.pop(0)
        if (fn.name, ref) in seen:  # the same parameter reached twice (or a recursive call): traced once
            continue
        seen.add((fn.name, ref))
        uses = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == ref and isinstance(n.ctx, ast.Load)]
        if not uses:
            ignored.append(fn.name)
            subs += _extra_reads(fn, extra_name, ref)
            continue
        for use in uses:
            target = _passed_to(fn, use, funcs) if depth < MAX_DEPTH else None
            if target is None:
                read = True
                continue
            callee, index = target
            callee_params = _params(funcs[callee])
            passed_extra = _extra_param(fn, use, funcs[callee], extra_name)
            todo.append((funcs[callee], callee_params[index], passed_extra, depth + 1))
    return ReferenceUse(read, tuple(ignored), tuple(subs))


def substitute_reference(source: str, entry: str, function: str, key: str) -> tuple[str, Substitution]:
    """Return `source` with the first read of ``extra_info[key]`` in `function` (a function `entry` passes its
    reference to, and that ignores it: `reference_use`) replaced by its reference parameter, and that substitution.

    Raises:
        CodeReferenceError: the source does not parse, or `function` offers no such substitution.
    """
    use = reference_use(source, entry)
    sub = next((s for s in use.substitutions if s.function == function and s.key == key), None)
    if sub is None:
        known = ", ".join(f"{s.function}: {s.text}" for s in use.substitutions) or "none"
        raise CodeReferenceError(
            f"no read of extra_info[{key!r}] in {function} stands where the ignored reference could (offered: {known})"
        )
    fn = _functions(source)[function]
    node = _sites(fn, sub.extra, sub.key)[0]
    lines = source.splitlines(keepends=True)
    start = _offset(lines, node.lineno, node.col_offset)
    stop = _offset(lines, node.end_lineno or node.lineno, node.end_col_offset or 0)
    return source[:start] + sub.reference + source[stop:], sub


def _offset(lines: list[str], line: int, byte_col: int) -> int:
    """The character offset in the whole source of (1-based `line`, UTF-8 `byte_col`)."""
    return sum(len(x) for x in lines[: line - 1]) + len(lines[line - 1].encode()[:byte_col].decode())


def _functions(source: str) -> dict[str, ast.FunctionDef]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise CodeReferenceError(f"the reward file cannot be parsed ({type(exc).__name__})") from None
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def _params(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]


def _passed_to(fn: ast.FunctionDef, use: ast.Name, funcs: dict[str, ast.FunctionDef]) -> tuple[str, int] | None:
    """(callee, parameter index) when `use` is passed as is to a module function, else None."""
    for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
        if not isinstance(call.func, ast.Name) or call.func.id not in funcs:
            continue
        params = _params(funcs[call.func.id])
        for i, arg in enumerate(call.args):
            if arg is use and i < len(params):
                return call.func.id, i
        for kw in call.keywords:
            if kw.value is use and kw.arg in params:
                return call.func.id, params.index(kw.arg)
    return None


def _extra_param(fn: ast.FunctionDef, use: ast.Name, callee: ast.FunctionDef, extra: str | None) -> str | None:
    """The callee's name for the row's extra_info, when the call that passes the reference also passes it."""
    if extra is None:
        return None
    params = _params(callee)
    for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call) and use in ast.walk(n)):
        for i, arg in enumerate(call.args):
            if i < len(params) and _mentions(arg, extra):
                return params[i]
        for kw in call.keywords:
            if kw.arg in params and _mentions(kw.value, extra):
                return kw.arg
    return None


def _mentions(node: ast.expr, name: str) -> bool:
    """`node` is `name`, or `name or <default>` (``extra_info or {}``)."""
    if isinstance(node, ast.Name):
        return node.id == name
    return isinstance(node, ast.BoolOp) and isinstance(node.values[0], ast.Name) and node.values[0].id == name


def _extra_reads(fn: ast.FunctionDef, extra: str | None, ref: str) -> list[Substitution]:
    """Every constant key `fn` reads from `extra` (``extra.get("K")``, ``extra["K"]``), first read of each."""
    found: dict[str, Substitution] = {}
    for node in _sites(fn, extra) if extra else []:
        key = _read_key(node, extra or "")
        if key is not None and key not in found:
            found[key] = Substitution(fn.name, key, node.lineno, ast.unparse(node), ref, extra or "")
    return list(found.values())


def _sites(fn: ast.FunctionDef, extra: str, key: str | None = None) -> list[ast.expr]:
    """The reads of a constant key of `extra` in `fn` (of `key` only, when given), in source order."""
    out = [
        node
        for node in ast.walk(fn)
        if isinstance(node, ast.expr) and (got := _read_key(node, extra)) is not None and key in (None, got)
    ]
    return sorted(out, key=lambda n: (n.lineno, n.col_offset))


def _read_key(node: ast.AST, extra: str) -> str | None:
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == extra
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return node.args[0].value
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id == extra
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, str)
    ):
        return node.slice.value
    return None
