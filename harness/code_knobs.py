"""Knobs declared in a harness's own code: tunable constants of its reward, group filter and env.

A reward's decisive parts (a step or time limit, how many tests run, a gate's threshold, partial credit) are
constants in its code. A harness makes one a knob by declaring it in the same file, next to the constants,
as one module-level literal named `KNOBS_NAME`:

    STEP_LIMIT = 2000  # interpreter steps per test case

    EVOTRAINER_KNOBS = {
        "STEP_LIMIT": {
            "default": 2000,
            "safe": [200, 20000],
            "up": {"factors": [4, 16], "effects": ["pay_more_right"], "why": "slow correct programs pass"},
        },
    }

- each key names a module-level constant assigned exactly once, to an int or float literal (its type is the
  knob's kind; True/False are not numbers here);
- `default` and `safe` (`[min, max]`) as for trainer settings: a value outside the safe range is a symptom
  of its own, and a probe moves it back to the default;
- `up` / `down`: the multiplicative factors a probe tries in order, the effects of the move (`harness.knobs.
  Effect`: e.g. `pay_more_right`, `pay_fewer_wrong`) and why it helps; `from_zero` as for trainer settings.

The file is read with `ast`, never imported or run, so a declaration costs nothing at training time and no
candidate code runs on the host. `set_constant` rewrites one constant's literal in place (comments and
formatting kept): the edit a probe's `set_constant` op makes (`skills/patches.py`). Pure: no I/O.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from harness.knobs import KnobSpec

if TYPE_CHECKING:
    from harness.manifest import Harness

KNOBS_NAME = "EVOTRAINER_KNOBS"
ENTRY_KEYS = frozenset({"default", "safe", "up", "down", "from_zero"})
MOVE_KEYS = frozenset({"factors", "effects", "why"})
FIX = "see docs/harness.md, 'Knobs in harness code'"


def knob_files(harness: Harness) -> tuple[tuple[str, str], ...]:
    """The harness code files that may declare knobs, as (role, harness-relative path), each path once: the
    reward (``@reward``), the group filter (``@group_filter``) and an agentic harness's environment (``@env``).
    The one list every reader of code knobs uses (probes, preflight, patches, learned skills)."""
    out: list[tuple[str, str]] = []
    for role, entry in (("@reward", harness.reward), ("@group_filter", harness.group_filter), ("@env", harness.env)):
        if entry is not None and entry.path not in {path for _, path in out}:
            out.append((role, entry.path))
    return tuple(out)


class CodeKnobError(ValueError):
    """A knob declaration in harness code is malformed; the message names the file, the entry and the fix."""


@dataclass(frozen=True)
class CodeKnob:
    """One constant of a harness code file a probe may move."""

    spec: KnobSpec
    role: str  # the file's manifest reference: "@reward", "@group_filter" or "@env"
    path: str  # the harness-relative file
    current: float

    @property
    def in_range(self) -> bool:
        """Return True when the constant's value lies in its declared safe range."""
        return self.spec.in_range(self.current)


def read_code_knobs(source: str, path: str, role: str) -> tuple[CodeKnob, ...]:
    """The knobs `source` (the text of harness file `path`, referenced as `role`) declares, in declaration order.

    Raises:
        CodeKnobError: the file does not parse, or its declaration or a declared constant is malformed.
    """
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        raise CodeKnobError(
            f"{path}: not valid Python (line {exc.lineno}: {exc.msg}); its knobs cannot be read"
        ) from None
    except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes, nesting beyond the parser's limits
        raise CodeKnobError(f"{path}: cannot be parsed ({type(exc).__name__}); its knobs cannot be read") from None
    declared = _declaration(tree, path)
    if declared is None:
        return ()
    out = []
    for name, entry in declared.items():
        where = f"{path}: {KNOBS_NAME}[{name!r}]"
        if not isinstance(name, str) or not isinstance(entry, dict):
            raise CodeKnobError(f"{path}: {KNOBS_NAME} must map constant names to mappings ({FIX})")
        unknown = sorted(set(entry) - ENTRY_KEYS)
        if unknown:
            raise CodeKnobError(f"{where}: unknown field(s) {unknown}; allowed: {sorted(ENTRY_KEYS)} ({FIX})")
        node = _constant(tree, name, path)
        current = _number(node.value)
        if current is None:
            raise CodeKnobError(f"{where}: the constant {name} must be assigned an int or float literal ({FIX})")
        out.append(CodeKnob(_spec(name, entry, current, where), role, path, float(current)))
    return tuple(out)


def set_constant(source: str, name: str, value: float) -> tuple[str, float, float]:
    """Return `source` with constant `name` assigned `value` (an int constant stays an int), the old and the new
    value; everything else, comments included, is kept.

    Raises:
        CodeKnobError: `name` is not a module-level constant assigned once to a number literal.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise CodeKnobError(f"the file cannot be parsed ({type(exc).__name__}); {name} cannot be set") from None
    literal = _constant(tree, name, "the file").value
    old = _number(literal)
    if literal is None or old is None:
        raise CodeKnobError(f"the constant {name} is not assigned an int or float literal")
    new: float = round(value) if isinstance(old, int) else float(value)
    lines = source.splitlines(keepends=True)
    start = sum(len(line) for line in lines[: literal.lineno - 1]) + _byte_col(lines, literal, start=True)
    last = literal.end_lineno or literal.lineno
    end = sum(len(line) for line in lines[: last - 1]) + _byte_col(lines, literal, start=False)
    return source[:start] + repr(new) + source[end:], float(old), float(new)


def _byte_col(lines: list[str], node: ast.expr, *, start: bool) -> int:
    """A node's column as a character offset (ast reports UTF-8 byte offsets)."""
    line = lines[(node.lineno if start else (node.end_lineno or node.lineno)) - 1]
    col = node.col_offset if start else (node.end_col_offset or 0)
    return len(line.encode()[:col].decode(errors="ignore"))


def _declaration(tree: ast.Module, path: str) -> dict[Any, Any] | None:
    found = [n for n in tree.body if _assigns(n, KNOBS_NAME)]
    if not found:
        return None
    if len(found) > 1:
        raise CodeKnobError(f"{path}: {KNOBS_NAME} is assigned {len(found)} times; declare it once ({FIX})")
    value = _constant(tree, KNOBS_NAME, path).value
    try:
        declared = ast.literal_eval(value) if value is not None else None
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
        declared = None
    if not isinstance(declared, dict):
        raise CodeKnobError(f"{path}: {KNOBS_NAME} must be a literal dict (no names or calls in it) ({FIX})")
    return declared


def _constant(tree: ast.Module, name: str, path: str) -> ast.Assign | ast.AnnAssign:
    found = [n for n in tree.body if _assigns(n, name)]
    if len(found) != 1:
        what = "is not assigned at module level" if not found else f"is assigned {len(found)} times"
        raise CodeKnobError(f"{path}: the knob {name} {what}; a knob is one module-level constant ({FIX})")
    node = found[0]
    assert isinstance(node, ast.Assign | ast.AnnAssign)
    return node


def _assigns(node: ast.stmt, name: str) -> bool:
    if isinstance(node, ast.Assign):
        return len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name
    return isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name


def _number(node: ast.expr | None) -> int | float | None:
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        sign, node = -1, node.operand
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        value: int | float = node.value  # type: ignore[assignment]
        return sign * value
    return None


def _spec(name: str, entry: dict[str, Any], current: float, where: str) -> KnobSpec:
    safe = entry.get("safe")
    if not (isinstance(safe, list | tuple) and len(safe) == 2):
        raise CodeKnobError(f"{where}: 'safe' must be [min, max] ({FIX})")
    moves = []
    for direction in ("up", "down"):
        move = entry.get(direction)
        if move is None:
            continue
        if not isinstance(move, dict) or set(move) - MOVE_KEYS:
            raise CodeKnobError(f"{where}: '{direction}' must be a mapping of {sorted(MOVE_KEYS)} ({FIX})")
        moves.append({"direction": direction, **move})
    raw = {
        "key": name,
        "kind": "int" if isinstance(current, int) else "float",
        "default": entry.get("default"),
        "safe_min": safe[0],
        "safe_max": safe[1],
        "moves": moves,
        "from_zero": entry.get("from_zero"),
    }
    try:
        return KnobSpec.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "entry"
        raise CodeKnobError(f"{where}: {field}: {first['msg']} ({FIX})") from None
