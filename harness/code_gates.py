"""Gates in a reward's code: early exits that pay nothing before the reward's own checks run.

A reward often refuses some responses before it judges them: a character or format check, a length cap, a
forbidden word. When the strict evaluator passes many of the responses such a gate stops, the gate is the
reward's defect (`score.unrewarded_correct`), whatever it checks. This module finds the gates of the reward's
entry function from its source, without importing or running it, and writes the candidate that drops one:

- a *gate* is a statement ``if COND: return VALUE`` directly in the entry function's body, with no ``else``,
  whose ``VALUE`` is a constant payout of at most 0: a number, or a dict literal of constants whose
  ``"score"`` is one (the dict form of a verl reward);
- a condition that binds a name (``:=``) is no gate: the code after it may need the name;
- a gate is named by `Gate.id`, a hash of its condition's and payout's normalised text (``ast.unparse``), so
  the same gate keeps its name when lines move, and a learned skill finds it again in another harness.

`drop_gate` deletes the statement's lines, nothing else. Whether the reward pays right responses more
without paying wrong ones is then for the backtest to show on the cached rollouts (`diagnostics/backtest.py:
MUST_FALL`, the hack corpus) before any training. Pure: no I/O.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass

MAX_SHOWN = 80  # characters of a gate's condition shown in a hypothesis


class GateError(ValueError):
    """The source cannot be read for gates, or names no such gate; the message says which."""


@dataclass(frozen=True)
class Gate:
    """One early exit of the reward's entry function."""

    id: str  # 8 hex characters of the condition's hash
    function: str
    line: int  # 1-based, of the ``if``
    condition: str  # ``ast.unparse`` of the condition
    payout: str  # ``ast.unparse`` of the returned value
    values: tuple[tuple[str, float], ...]  # what it pays: ("score", v) for a number, every key of a dict

    @property
    def shown(self) -> str:
        """``if COND: return VALUE``, the condition cut to `MAX_SHOWN` characters."""
        cond = self.condition if len(self.condition) <= MAX_SHOWN else self.condition[: MAX_SHOWN - 1] + "…"
        return f"if {cond}: return {self.payout}"


def reward_gates(source: str, function: str) -> tuple[Gate, ...]:
    """The gates of `function` (a top-level function of `source`), in source order.

    Raises:
        GateError: the source does not parse, is nested too deeply to read, or defines no top-level `function`.
    """
    try:
        return _gates(source, function)
    except RecursionError:  # a candidate's expression too deep for `ast.unparse`: hostile or broken, never a crash
        raise GateError("the reward file is nested too deeply to read its gates") from None


def _gates(source: str, function: str) -> tuple[Gate, ...]:
    found: list[Gate] = []
    for node in _body(source, function):
        if not isinstance(node, ast.If) or node.orelse or len(node.body) != 1:
            continue
        ret = node.body[0]
        if not isinstance(ret, ast.Return) or ret.value is None or not _pays_nothing(ret.value):
            continue
        if any(isinstance(n, ast.NamedExpr) for n in ast.walk(node.test)):
            continue
        cond, payout = ast.unparse(node.test), ast.unparse(ret.value)
        digest = hashlib.sha256(f"{cond}\0{payout}".encode()).hexdigest()[:8]
        if all(g.id != digest for g in found):  # the same gate twice: dropping the first alone changes nothing
            found.append(Gate(digest, function, node.lineno, cond, payout, _values(ret.value)))
    return tuple(found)


def drop_gate(source: str, function: str, gate_id: str) -> tuple[str, Gate]:
    """Return `source` without the gate `gate_id` of `function` (its lines deleted), and the gate.

    Raises:
        GateError: the source does not parse, defines no top-level `function`, or that has no such gate.
    """
    gates = {g.id: g for g in reward_gates(source, function)}
    if gate_id not in gates:
        known = ", ".join(f"{g.id} ({g.shown})" for g in gates.values()) or "none"
        raise GateError(f"{function} has no gate {gate_id!r} (its gates: {known})")
    node = next(n for n in _body(source, function) if isinstance(n, ast.If) and n.lineno == gates[gate_id].line)
    lines = source.splitlines(keepends=True)
    return "".join(lines[: node.lineno - 1] + lines[node.end_lineno or node.lineno :]), gates[gate_id]


def _body(source: str, function: str) -> list[ast.stmt]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise GateError(f"the reward file cannot be parsed ({type(exc).__name__})") from None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function:
            return node.body
    raise GateError(f"the reward file defines no top-level function {function!r}")


def _values(value: ast.expr) -> tuple[tuple[str, float], ...]:
    """The payout of a gate `_pays_nothing` accepted, as (key, number) pairs (a number pays ("score", it))."""
    if isinstance(value, ast.Dict):
        return tuple(
            (str(ast.literal_eval(k)), float(_number(v) or 0.0))
            for k, v in zip(value.keys, value.values, strict=True)
            if k is not None
        )
    return (("score", float(_number(value) or 0.0)),)


def _number(node: ast.expr | None) -> float | None:
    """The value of a number literal (``-`` allowed; ``True``/``False`` are not numbers here), else None."""
    sign = -1.0 if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) else 1.0
    inner = node.operand if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) else node
    if not isinstance(inner, ast.Constant) or isinstance(inner.value, bool) or not isinstance(inner.value, int | float):
        return None
    return sign * inner.value


def _pays_nothing(value: ast.expr | None) -> bool:
    """A constant payout of at most 0: a number, or a dict of constant keys and numbers whose "score" is one."""
    if isinstance(value, ast.Dict):
        keys = [k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else None for k in value.keys]
        if None in keys or any(_number(v) is None for v in value.values):
            return False
        pays = dict(zip(keys, value.values, strict=True)).get("score")
        return pays is not None and _pays_nothing(pays)
    number = _number(value)
    return number is not None and number <= 0
