"""Trigger context: the variables skill triggers read besides health metrics, computed from harness code.

- ``candidate_reward_length_term`` (``length_terms``): does a candidate reward pay for length or brevity
  directly? (paper §9, "toxic rewards");
- ``filter_present`` (``filter_is_noop``): does the harness run a group filter that can drop anything?
  The demo harness declares a keep-everything filter, which counts as *no* filter;
- ``reward_discrete`` (``reward_is_discrete``): does the reward take only a few distinct values? The health
  report computes the same from the run's rewards (``diagnostics/signal.py``), so triggers read it there.

Code is parsed with ``ast``, never imported or run. Pure.

A *length term* (read by the guard skill "never reward brevity directly") is, inside a numeric operation
(``+ - * /``, augmented assignment), any ``len(...)`` call (the demo's defective ``0.1 * len(numbers)``
pays for writing more) or a name/attribute that says length, brevity, tokens or turns; inside a
comparison, ``len(...)`` of the response or such a name. It is a heuristic biased to warn
(``len(solution_str) == 0`` matches too); the guard only warns.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

from diagnostics.signal import DISCRETE_MAX_LEVELS

_LENGTHY = re.compile(r"(^|_)(len|length|lengths|brevity|brief|short|shortness|num_tokens|n_tokens|token_count|"
                      r"tokens|turns|num_turns|verbosity|concise|conciseness)($|_)", re.I)  # fmt: skip
_RESPONSE = re.compile(r"solution|response|completion|output|answer|text|str", re.I)


def length_terms(reward_source: str) -> list[str]:
    """Return the expressions in ``reward_source`` that reward length or brevity (empty when none).

    Raises:
        SyntaxError: the source does not parse (the caller reports the candidate as broken).
    """
    tree = ast.parse(reward_source)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp | ast.Compare | ast.AugAssign):
            in_operation = not isinstance(node, ast.Compare)
            for sub in ast.walk(node):
                if _is_length_term(sub, in_operation):
                    text = ast.unparse(node)
                    if text not in found:
                        found.append(text)
                    break
    return found


def _is_length_term(node: ast.AST, in_operation: bool) -> bool:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len":
        return in_operation or any(_RESPONSE.search(ast.unparse(a)) for a in node.args)
    if isinstance(node, ast.Name):
        return _LENGTHY.search(node.id) is not None and node.id != "len"
    if isinstance(node, ast.Attribute):
        return _LENGTHY.search(node.attr) is not None
    return False


def filter_is_noop(filter_source: str | None, function: str = "filter_groups") -> bool:
    """Return True when there is no filter, or ``function``'s body only returns all-True flags.

    Recognised no-op bodies (after an optional docstring): ``return [True] * len(x)``,
    ``return [True for _ in x]``. Anything else counts as a real filter.

    Raises:
        SyntaxError: the source does not parse.
    """
    if filter_source is None:
        return True
    tree = ast.parse(filter_source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            body = list(node.body)
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                body = body[1:]
            if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
                return False
            value = body[0].value
            if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mult):
                return _all_true_list(value.left) or _all_true_list(value.right)
            if isinstance(value, ast.ListComp):
                return isinstance(value.elt, ast.Constant) and value.elt.value is True
            return False
    return True  # the named function does not exist: nothing filters


def _all_true_list(node: ast.expr) -> bool:
    return isinstance(node, ast.List) and all(isinstance(e, ast.Constant) and e.value is True for e in node.elts)


def reward_is_discrete(rewards: Iterable[float], max_levels: int = DISCRETE_MAX_LEVELS) -> bool:
    """Return True when the observed rewards take at most ``max_levels`` distinct values (rounded to 1e-6)."""
    levels = {round(r, 6) for r in rewards}
    return 0 < len(levels) <= max_levels


def trigger_context(
    domain: str,
    reward_source: str,
    filter_source: str | None,
    rewards: Iterable[float] = (),
    *,
    filter_function: str = "filter_groups",
) -> dict[str, str | int]:
    """Return the context variables to merge into ``HealthReport.metrics`` before matching skills.

    ``reward_source`` is the (candidate or current) reward file; ``filter_source`` the group-filter file
    (None when the manifest declares none); ``rewards`` the training rewards observed in the run
    (``reward_discrete`` is left out when none are given: the health report's own ``reward_discrete`` stands).
    """
    ctx: dict[str, str | int] = {
        "domain": domain,
        "candidate_reward_length_term": int(bool(length_terms(reward_source))),
        "filter_present": int(not filter_is_noop(filter_source, filter_function)),
    }
    observed = list(rewards)
    if observed:
        ctx["reward_discrete"] = int(reward_is_discrete(observed))
    return ctx
