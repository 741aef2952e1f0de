"""Skill trigger predicates: a tiny, safe boolean language over a health report's metrics.

A trigger is a Python-syntax boolean expression parsed with ``ast`` and evaluated by this module's own
walker (never ``eval``). Allowed syntax, and nothing else:

- names: metric keys of ``HealthReport.metrics`` (``dead_group_ratio``, ``truncation_rate``, ...) and
  context variables the controller adds (``domain``, ``reward_discrete``, ``filter_present``,
  ``candidate_reward_length_term``); names starting with ``_`` are refused; a metric key containing
  ``/`` is read with ``__`` in its place (``vs_parent/strict_acc`` → ``vs_parent__strict_acc``);
- constants: numbers, ``True``/``False``, strings (strings only with ``==``, ``!=``, ``in``, ``not in``);
- comparisons ``< <= > >= == !=`` (chains allowed, ``0.1 < x <= 0.5``), ``in`` / ``not in`` a tuple or
  list of constants, ``and``, ``or``, ``not``, unary minus on a number, parentheses;
- ``known(name)``: True when the snapshot holds a value for ``name`` (not missing, not NaN), else False;
  never unknown. The one call the language has.

Anything else (other calls, attributes, subscripts, ``+ - * /`` operators, lambdas, ``__import__``) is a
``TriggerError`` at parse time, so a bad trigger fails when a skill is saved, not when it is matched.

What an unknown value does (no silent blind spots). A name absent from the snapshot, or whose
value is NaN (the health report had no data for it), makes every comparison reading it *unknown*, and
unknowns propagate with three-valued (Kleene) logic: ``unknown and False`` is False, ``unknown or True`` is
True, ``not unknown`` is unknown. Then:

- a trigger whose value is unknown is **not matched**: a skill never fires on evidence the health report did
  not collect, even under ``not``;
- it is **not silent** either: ``check`` returns the value with the names that were missing, and the
  controller records every skill trigger left unknown, with those names, in case memory
  (``agent/decisions/triggers.py``); the report's notes say why each metric has no data;
- a skill that should act on missing evidence says so explicitly: ``not known(x) or x > 0.3`` fires when ``x``
  is missing or above 0.3; ``known(x) and x > 0.3`` is never unknown (False when ``x`` is missing).

This module is pure: no I/O, no SQL, no git.
"""

from __future__ import annotations

import ast
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass

from diagnostics.agentic_docs import AGENTIC_METRICS

Value = float | int | bool | str
Metrics = Mapping[str, Value]

# Names the diagnostics and the controller provide today (documentation and `unknown_names`, not a whitelist:
# diagnostics evolve, so a trigger may read a metric added later).
KNOWN_NAMES: frozenset[str] = frozenset(
    {
        "dead_group_ratio",
        "dead_source_share",
        "ppo_kl_max",
        "train_score_collapse",
        "entropy_growth_ratio",
        "dead_sources",
        "num_sources",
        "truncation_rate",
        "strict_acc",
        "train_reward_mean",
        "train_reward_delta",
        "rewarded_wrong_rate",
        "unrewarded_correct_rate",
        "degenerate_rate",
        "strict_acc_delta",
        "reward_hacking",
        "length_reward_corr",
        "format_failure_rate",
        "rank_violations",
        "reward_spread",
        "entropy",
        "mean_logprob",
        "response_length_mean",
        "domain",
        "reward_discrete",
        "filter_present",
        "candidate_reward_length_term",
        "candidate_reward_action_count_term",
        "filter_drops_marked",
        *AGENTIC_METRICS,  # diagnostics/agentic.py, on runs with agentic episodes
        # reward vs the strict evaluator, filter, diversity, update size (report.METRIC_DOCS)
        "rank_violation_rate",
        "misranked_group_rate",
        "reward_rank_agreement",
        "mixed_groups",
        "kept_group_ratio",
        "kept_live_ratio",
        "reward_spread_after_filter",
        "reward_spread_dropped",
        "filter_spread_gap",
        "dead_group_ratio_after_filter",
        "train_strict_acc",
        "train_strict_acc_after_filter",
        "distinct_response_ratio",
        "identical_group_ratio",
        "dead_identical_share",
        "update_norm_mean",
        "update_norm_max",
        "no_update_share",
        "ref_distance",
        "kl_to_ref",
        "group_text_distance",
        "distinct_answer_ratio",
    }
)
KNOWN_CALL = "known"  # known(name): the metric has a value

_ORDER_OPS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
_EQ_OPS = (ast.Eq, ast.NotEq)
_IN_OPS = (ast.In, ast.NotIn)
_OP_TEXT: dict[type[ast.cmpop], str] = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.In: "in",
    ast.NotIn: "not in",
}
MAX_TRIGGER_CHARS = 2000


class TriggerError(ValueError):
    """A trigger uses syntax outside the predicate language, or compares values of incompatible types."""


@dataclass(frozen=True)
class Trigger:
    """A parsed trigger: its source, its AST and the names it reads."""

    source: str
    tree: ast.expr
    names: frozenset[str]
    n_comparisons: int

    @property
    def specificity(self) -> int:
        """Return how many comparisons must hold for the trigger to fire (``and`` adds, ``or`` takes the minimum).

        More = a narrower, more specific skill: ``a > 1 and b > 2`` is 2, ``a > 1 or b > 2`` is 1.
        """
        return _min_conditions(self.tree)


@functools.lru_cache(maxsize=512)
def parse(source: str) -> Trigger:
    """Parse and validate a trigger.

    Raises:
        TriggerError: empty, too long, not an expression, or any syntax outside the language;
            the message names the offending construct.
    """
    if not source.strip():
        raise TriggerError("empty trigger; write a predicate such as 'dead_group_ratio > 0.5'")
    if len(source) > MAX_TRIGGER_CHARS:
        raise TriggerError(f"trigger longer than {MAX_TRIGGER_CHARS} characters")
    try:
        module = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise TriggerError(f"trigger {source!r} is not a valid expression: {exc.msg}") from None
    names: set[str] = set()
    n_cmp = _validate(module.body, names, source)
    if n_cmp == 0:
        raise TriggerError(f"trigger {source!r} makes no comparison; compare a metric, e.g. 'x > 0.5'")
    return Trigger(source=source, tree=module.body, names=frozenset(names), n_comparisons=n_cmp)


def _validate(node: ast.expr, names: set[str], source: str) -> int:
    """Check `node` is a predicate in the language; return its number of comparisons."""
    if isinstance(node, ast.BoolOp):
        return sum(_validate(v, names, source) for v in node.values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return _validate(node.operand, names, source)
    if isinstance(node, ast.Call):
        name = _known_argument(node)
        if name is None:
            raise TriggerError(
                f"trigger {source!r}: call {ast.unparse(node)!r} is not allowed; the only call is known(metric)"
            )
        if name.startswith("_"):
            raise TriggerError(f"trigger {source!r}: name {name!r} is not allowed (leading underscore)")
        names.add(name)
        return 1
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        for i, op in enumerate(node.ops):
            left, right = operands[i], operands[i + 1]
            if isinstance(op, _IN_OPS):
                _check_operand(left, names, source, allow_str=True)
                _check_sequence(right, source)
            elif isinstance(op, _ORDER_OPS):
                _check_operand(left, names, source, allow_str=False)
                _check_operand(right, names, source, allow_str=False)
            elif isinstance(op, _EQ_OPS):
                _check_operand(left, names, source, allow_str=True)
                _check_operand(right, names, source, allow_str=True)
            else:
                raise TriggerError(f"trigger {source!r}: operator {type(op).__name__} is not allowed")
        if all(not isinstance(o, ast.Name) for o in operands):
            raise TriggerError(f"trigger {source!r}: comparison {ast.unparse(node)!r} reads no metric")
        return 1
    if isinstance(node, ast.Name):
        raise TriggerError(
            f"trigger {source!r}: bare name {node.id!r} is not a predicate; write '{node.id} >= 1' or '{node.id} == 1'"
        )
    raise TriggerError(f"trigger {source!r}: {type(node).__name__} ({ast.unparse(node)!r}) is not allowed")


def _known_argument(node: ast.Call) -> str | None:
    """The metric name of a ``known(name)`` call, or None when the call is anything else."""
    plain = isinstance(node.func, ast.Name) and node.func.id == KNOWN_CALL and not node.keywords
    if plain and len(node.args) == 1 and isinstance(node.args[0], ast.Name):
        return node.args[0].id
    return None


def _check_operand(node: ast.expr, names: set[str], source: str, *, allow_str: bool) -> None:
    if isinstance(node, ast.Name):
        if node.id.startswith("_"):
            raise TriggerError(f"trigger {source!r}: name {node.id!r} is not allowed (leading underscore)")
        names.add(node.id)
        return
    if _constant(node, allow_str=allow_str, source=source) is None:
        raise TriggerError(f"trigger {source!r}: {type(node).__name__} ({ast.unparse(node)!r}) is not allowed")


def _check_sequence(node: ast.expr, source: str) -> None:
    if not isinstance(node, ast.Tuple | ast.List) or not node.elts:
        raise TriggerError(f"trigger {source!r}: 'in' needs a literal tuple of constants, e.g. ('math', 'code')")
    for elt in node.elts:
        if _constant(elt, allow_str=True, source=source) is None:
            raise TriggerError(f"trigger {source!r}: 'in' accepts only constants, not {ast.unparse(elt)!r}")


def _constant(node: ast.expr, *, allow_str: bool, source: str) -> Value | None:
    """Return the constant a node denotes (numbers, bools, negated numbers, strings if allowed), else None."""
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool | int | float):
            return value
        if isinstance(value, str):
            if not allow_str:
                raise TriggerError(f"trigger {source!r}: string {value!r} cannot be ordered with < <= > >=")
            return value
        return None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        inner = node.operand.value
        if isinstance(inner, int | float) and not isinstance(inner, bool):
            return -inner
    return None


def _min_conditions(node: ast.expr) -> int:
    if isinstance(node, ast.BoolOp):
        counts = [_min_conditions(v) for v in node.values]
        return sum(counts) if isinstance(node.op, ast.And) else min(counts)
    if isinstance(node, ast.UnaryOp):
        return _min_conditions(node.operand)
    return 1


# --- evaluation -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TriggerCheck:
    """A trigger's three-valued result on a snapshot: True, False, or None (unknown), and the names it read that
    had no value (missing or NaN). ``missing`` is listed whatever the value; it made the value unknown only
    when ``value is None``."""

    value: bool | None
    missing: tuple[str, ...]

    @property
    def unknown(self) -> bool:
        """Return True when missing metrics left the trigger undecided (it is then not matched)."""
        return self.value is None


def check(trigger: str | Trigger, metrics: Metrics) -> TriggerCheck:
    """Evaluate a trigger three-valued and say which of its names had no value (see the module docstring).

    Raises:
        TriggerError: invalid trigger, or a runtime type clash (e.g. ordering a string metric).
    """
    parsed = parse(trigger) if isinstance(trigger, str) else trigger
    missing = tuple(sorted(n for n in parsed.names if _value(metrics, n) is None))
    return TriggerCheck(_eval(parsed.tree, metrics, parsed.source), missing)


def evaluate(trigger: str | Trigger, metrics: Metrics) -> bool:
    """Return True when the trigger holds on ``metrics``; unknown (a metric is missing) counts as False.

    Use ``check`` to tell False from unknown (and which metrics were missing).

    Raises:
        TriggerError: invalid trigger, or a runtime type clash (e.g. ordering a string metric).
    """
    return check(trigger, metrics).value is True


def matched_terms(trigger: str | Trigger, metrics: Metrics) -> list[str]:
    """Return the comparisons that hold on ``metrics``, with the values read, e.g. ``dead_group_ratio > 0.3 (0.62)``.

    Returned only for a matching trigger (empty list otherwise): the evidence recorded with a skill use.
    """
    parsed = parse(trigger) if isinstance(trigger, str) else trigger
    if _eval(parsed.tree, metrics, parsed.source) is not True:
        return []
    out: list[str] = []
    for node in ast.walk(parsed.tree):
        if isinstance(node, ast.Compare | ast.Call) and _eval(node, metrics, parsed.source) is True:
            values = ", ".join(f"{n}={_fmt(lookup(metrics, n))}" for n in _names_in(node))
            out.append(f"{ast.unparse(node)} ({values})")
    return out


def matched_values(trigger: str | Trigger, metrics: Metrics) -> dict[str, Value]:
    """Return the metric values a trigger read (those present in ``metrics``): the stored evidence."""
    parsed = parse(trigger) if isinstance(trigger, str) else trigger
    out: dict[str, Value] = {}
    for name in sorted(parsed.names):
        value = lookup(metrics, name)
        if value is not None:
            out[name] = value
    return out


def unknown_names(trigger: str | Trigger) -> frozenset[str]:
    """Return the names a trigger reads that no diagnostic or context provides today (likely typos)."""
    parsed = parse(trigger) if isinstance(trigger, str) else trigger
    return parsed.names - KNOWN_NAMES


def lookup(metrics: Metrics, name: str) -> Value | None:
    """Return the value a trigger name reads: ``metrics[name]``, else the ``/`` key it spells with ``__``."""
    if name in metrics:
        return metrics[name]
    return metrics.get(name.replace("__", "/"))


def _names_in(node: ast.Compare | ast.Call) -> list[str]:
    operands = node.args if isinstance(node, ast.Call) else [node.left, *node.comparators]
    return [o.id for o in operands if isinstance(o, ast.Name)]


def _fmt(value: Value | None) -> str:
    return f"{value:.4g}" if isinstance(value, float) else repr(value) if isinstance(value, str) else str(value)


def _eval(node: ast.expr, metrics: Metrics, source: str) -> bool | None:
    """Kleene evaluation: True, False, or None (unknown because a metric is missing)."""
    if isinstance(node, ast.BoolOp):
        results = [_eval(v, metrics, source) for v in node.values]
        if isinstance(node.op, ast.And):
            return False if False in results else (None if None in results else True)
        return True if True in results else (None if None in results else False)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _eval(node.operand, metrics, source)
        return None if inner is None else not inner
    if isinstance(node, ast.Call):
        name = _known_argument(node)
        assert name is not None, f"unvalidated call {ast.unparse(node)}"
        return _value(metrics, name) is not None
    assert isinstance(node, ast.Compare), f"unvalidated node {type(node).__name__}"
    operands = [node.left, *node.comparators]
    for i, op in enumerate(node.ops):
        left = _operand(operands[i], metrics)
        if left is None:
            return None
        if isinstance(op, _IN_OPS):
            seq = node.comparators[i]
            assert isinstance(seq, ast.Tuple | ast.List)
            members = [_constant(e, allow_str=True, source=source) for e in seq.elts]
            ok = any(_equal(left, m) for m in members if m is not None)
            holds = ok if isinstance(op, ast.In) else not ok
        else:
            right = _operand(operands[i + 1], metrics)
            if right is None:
                return None
            holds = _compare(left, op, right, source)
        if not holds:
            return False
    return True


def _value(metrics: Metrics, name: str) -> Value | None:
    """A name's value, None when it is missing or NaN (unknown)."""
    value = lookup(metrics, name)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def _operand(node: ast.expr, metrics: Metrics) -> Value | None:
    if isinstance(node, ast.Name):
        return _value(metrics, node.id)
    return _constant(node, allow_str=True, source="")


def _equal(a: Value, b: Value) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    return float(a) == float(b)


def _compare(a: Value, op: ast.cmpop, b: Value, source: str) -> bool:
    if isinstance(op, ast.Eq):
        return _equal(a, b)
    if isinstance(op, ast.NotEq):
        return not _equal(a, b)
    if isinstance(a, str) or isinstance(b, str):
        raise TriggerError(f"trigger {source!r}: cannot order {a!r} {_OP_TEXT[type(op)]} {b!r}")
    x, y = float(a), float(b)
    if isinstance(op, ast.Lt):
        return x < y
    if isinstance(op, ast.LtE):
        return x <= y
    if isinstance(op, ast.Gt):
        return x > y
    assert isinstance(op, ast.GtE)
    return x >= y
