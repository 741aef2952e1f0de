"""The drawn graph is the real one: every node a router can return is an edge Studio and `evotrainer graph` draw."""

from __future__ import annotations

import ast
import inspect
import textwrap
import typing
from collections.abc import Callable
from typing import Any

from agent import routing
from agent.graph import builder, graph


def _returned_nodes(router: Callable[..., Any]) -> set[str]:
    """The node names a router's own code can route to: string constants it returns, and `Send("node", ...)`."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(router)))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and node.value is not None:
            found |= _outcomes(node.value)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Send":
            first = node.args[0]
            assert isinstance(first, ast.Constant), f"{router.__name__}: a Send whose node is not a literal"
            found.add(first.value)
    return found


def _outcomes(expr: ast.expr) -> set[str]:
    """The string values an expression can evaluate to: a literal, either branch of `a if c else b`, `a or b`."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return {expr.value}
    if isinstance(expr, ast.IfExp):
        return _outcomes(expr.body) | _outcomes(expr.orelse)
    if isinstance(expr, ast.BoolOp):
        return set().union(*(_outcomes(v) for v in expr.values))
    return set()


def _literal_names(router: Callable[..., Any]) -> set[str]:
    """The names in the `Literal[...]` of a router's declared return type."""
    names: set[str] = set()

    def walk(tp: Any) -> None:
        if typing.get_origin(tp) is typing.Literal:
            names.update(a for a in typing.get_args(tp) if isinstance(a, str))
        for arg in typing.get_args(tp):
            walk(arg)

    walk(typing.get_type_hints(router, vars(routing))["return"])
    return names


def test_each_router_returns_only_the_nodes_its_table_row_declares() -> None:
    for source, (router, targets) in routing.ROUTES.items():
        assert _returned_nodes(router) == set(targets), f"{source}: {router.__name__} routes beyond ROUTES"
        assert _literal_names(router) <= set(targets), f"{source}: its return type names an undeclared node"


def test_every_declared_route_is_an_edge_of_the_compiled_and_drawn_graph() -> None:
    drawn = {(e.source, e.target) for e in graph.get_graph().edges}
    for source, (_router, targets) in routing.ROUTES.items():
        assert source in builder.nodes
        for target in targets:
            assert target == "__end__" or target in builder.nodes, f"{source} -> {target}: no such node"
            assert (source, target) in drawn, f"{source} -> {target} is a route Studio would not draw"


def test_the_control_only_iteration_path_propose_to_train_is_drawn() -> None:
    drawn = {(e.source, e.target) for e in graph.get_graph().edges}
    assert ("propose", "train") in drawn


def test_every_router_in_the_module_has_a_row() -> None:
    routers = {
        obj
        for name, obj in vars(routing).items()
        if inspect.isfunction(obj)
        and obj.__module__ == routing.__name__
        and (name.startswith("route_") or name.startswith("fan_out_"))
    }
    assert routers == {router for router, _ in routing.ROUTES.values()}
