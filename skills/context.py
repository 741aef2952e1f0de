"""Trigger context: the variables skill triggers read besides health metrics, computed from harness code.

- ``candidate_reward_length_term`` (``length_terms``): does a candidate reward pay for length or brevity
  directly? (paper §9, "toxic rewards");
- ``filter_present`` (``filter_is_noop``): does the harness run a group filter that can drop anything?
  The demo harness declares a keep-everything filter, which counts as *no* filter;
- ``reward_discrete`` (``reward_is_discrete``): does the reward take only a few distinct values? The health
  report computes the same from the run's rewards (``diagnostics/signal.py``), so triggers read it there.
- ``candidate_reward_action_count_term`` (``count_terms``): does a candidate reward pay a count of tool
  calls or actions (paper §9: behaviour rewards get hacked; credit a check after an action instead)?
- ``filter_drops_marked`` (``filter_drops_marked``): does the group filter recognise the level-1 trajectory
  mark (``diagnostics.agentic_docs.TRAJECTORY_MARK``), so a reward may mark episodes for it to drop?

Code is parsed with ``ast``, never imported or run. Pure.

A *length term* (read by the guard skill "never reward brevity directly") is, inside a numeric operation
(``+ - * /``, augmented assignment), any ``len(...)`` call (the demo's defective ``0.1 * len(numbers)``
pays for writing more) or a name/attribute that says length, brevity, tokens or turns, or a read of such
a field (``extra_info["num_turns"]``, ``extra_info.get("num_turns")``: the paper's multiplicative efficiency
factor ``1 - 0.3 * turns / max_turns`` drove turns 36.7 -> 1.0); inside a comparison, ``len(...)`` of the
response or such a name. It is a heuristic biased to warn (``len(solution_str) == 0`` matches too); the
guard only warns. A *count term* is the same for names and fields that count tool calls or actions
(``tool_calls``, ``num_calls``, ``n_edits``, ...) inside a numeric operation.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

from diagnostics.signal import DISCRETE_MAX_LEVELS

_LENGTHY = re.compile(r"(^|_)(len|length|lengths|brevity|brief|short|shortness|num_tokens|n_tokens|token_count|"
                      r"tokens|turns|num_turns|verbosity|concise|conciseness)($|_)", re.I)  # fmt: skip
_RESPONSE = re.compile(r"solution|response|completion|output|answer|text|str", re.I)
_COUNTS = re.compile(r"(^|_)(tool_calls|num_calls|n_calls|call_count|calls|num_actions|n_actions|actions|"
                     r"action_count|num_edits|n_edits|edit_count|num_searches|n_searches|num_tests|n_tests|"
                     r"tool_count|num_tools|n_tools)($|_)", re.I)  # fmt: skip
MARK_NAME = "TRAJECTORY_MARK"  # the constant a mark-aware group filter defines (skills/seeds.py STD_GROUP_FILTER)


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
    return _reads_field(node, _LENGTHY)


def _reads_field(node: ast.AST, names: re.Pattern[str]) -> bool:
    """``x["num_turns"]`` or ``x.get("num_turns", ...)``: a read of a field whose name matches ``names``."""
    key: ast.expr | None = None
    if isinstance(node, ast.Subscript):
        key = node.slice
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        key = node.args[0]
    return isinstance(key, ast.Constant) and isinstance(key.value, str) and names.search(key.value) is not None


def count_terms(reward_source: str) -> list[str]:
    """Return the numeric expressions in ``reward_source`` that pay a count of tool calls or actions.

    Raises:
        SyntaxError: the source does not parse.
    """
    found: list[str] = []
    for node in ast.walk(ast.parse(reward_source)):
        if isinstance(node, ast.BinOp | ast.AugAssign):
            for sub in ast.walk(node):
                named = (isinstance(sub, ast.Name) and _COUNTS.search(sub.id) is not None) or (
                    isinstance(sub, ast.Attribute) and _COUNTS.search(sub.attr) is not None
                )
                if named or _reads_field(sub, _COUNTS):
                    text = ast.unparse(node)
                    if text not in found:
                        found.append(text)
                    break
    return found


# The context variables above that only mean something on agentic episodes (tools, trajectory marks): a
# trigger reading nothing but these and agentic metrics is an agentic skill (skills/patches.py, skill_fits).
AGENTIC_CONTEXT: frozenset[str] = frozenset({"candidate_reward_action_count_term", "filter_drops_marked"})


def filter_drops_marked(filter_source: str | None, function: str = "filter_groups") -> bool:
    """Return True when the filter module defines ``TRAJECTORY_MARK`` and ``function`` reads it.

    Such a filter (the seed StdGroupFilter) leaves episodes a reward marked out of a group's spread, so a
    group with nothing but marks and one unanimous outcome is dropped: the level-1 trajectory filter.

    Raises:
        SyntaxError: the source does not parse.
    """
    if filter_source is None:
        return False
    tree = ast.parse(filter_source)
    defined = any(
        isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == MARK_NAME for t in node.targets)
        for node in tree.body
    )
    func = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function), None)
    reads = func is not None and any(isinstance(n, ast.Name) and n.id == MARK_NAME for n in ast.walk(func))
    return defined and reads


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
        "candidate_reward_action_count_term": int(bool(count_terms(reward_source))),
        "filter_present": int(not filter_is_noop(filter_source, filter_function)),
        "filter_drops_marked": int(filter_drops_marked(filter_source, filter_function)),
    }
    observed = list(rewards)
    if observed:
        ctx["reward_discrete"] = int(reward_is_discrete(observed))
    return ctx
