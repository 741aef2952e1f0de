"""The packages form floors, and no module imports itself back through others.

Every import is read with `ast`, including imports inside functions and under `TYPE_CHECKING`, because a
lazy import is still a dependency. Two rules:

- a package imports only packages on a lower floor (`LAYERS`); `harness/` is the ground floor and imports
  none of the others;
- the module graph has no circle (two modules that reach each other through imports).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Lower number = lower floor. Packages on the same floor do not import each other.
LAYERS = {
    "harness": 0,
    "diagnostics": 1,
    "sandboxes": 2,
    "store": 2,
    "trainer_backend": 3,
    "migrations": 3,
    "skills": 4,
    "agent": 5,
}


def module_files(root: Path) -> dict[str, Path]:
    """Map dotted module names of the project packages to their files."""
    out: dict[str, Path] = {}
    for package in LAYERS:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Return the project modules `name` imports anywhere in its file (a package for `from pkg import x`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        candidates: list[str] = []
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                if path.name != "__init__.py":
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            subs = [f"{module}.{alias.name}" for alias in node.names if f"{module}.{alias.name}" in modules]
            candidates = subs if len(subs) == len(node.names) else [module, *subs]
        for target in candidates:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """The module-level import graph of the project packages under `root`."""
    modules = module_files(root)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports from a package to one on the same or a higher floor."""
    bad = []
    for src, targets in graph.items():
        a = src.split(".")[0]
        for dst in targets:
            b = dst.split(".")[0]
            if a != b and LAYERS[b] >= LAYERS[a]:
                bad.append(f"{src} -> {dst} ({a} is floor {LAYERS[a]}, {b} is floor {LAYERS[b]})")
    return sorted(bad)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    edges = defaultdict(set, graph)
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_package_imports_only_lower_floors() -> None:
    graph = import_graph(ROOT)
    assert "harness.manifest" in graph and "agent.graph" in graph, "the scanner must see the project"
    bad = upward_imports(graph)
    assert not bad, "imports that go up (move the shared code down a floor):\n" + "\n".join(bad)


def test_no_import_circle() -> None:
    found = circles(import_graph(ROOT))
    assert not found, f"import circles (move the shared helper to a module both can import): {found}"


# Inside agent/: its sub-packages (and top-level modules) on floors of their own, by the same rule. Lower floors
# know nothing of the campaign above them: the graph's state and settings, then the I/O adapters (store, runs,
# the held-out rule), the decision rules, the meta LLM's tools, the policies, the graph's nodes and the
# reporting, the graph, the session runner, the CLI.
AGENT_FLOORS = {
    "state": 0,
    "prices": 0,
    "context": 1,
    "routing": 1,
    "adapters": 2,
    "decisions": 3,
    "launch": 3,
    "llm": 4,
    "policies": 5,
    "nodes": 6,
    "reporting": 6,
    "graph": 7,
    "session": 8,
    "commands": 9,
    "cli": 10,
}


def agent_upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports between agent's parts that go to the same or a higher floor (`AGENT_FLOORS`)."""
    bad = []
    for src, targets in graph.items():
        if not src.startswith("agent."):
            continue
        a = src.split(".")[1]
        for dst in targets:
            if not dst.startswith("agent.") or dst.split(".")[1] == a:
                continue
            b = dst.split(".")[1]
            if a in AGENT_FLOORS and b in AGENT_FLOORS and AGENT_FLOORS[b] >= AGENT_FLOORS[a]:
                bad.append(f"{src} -> {dst} ({a} is floor {AGENT_FLOORS[a]}, {b} is floor {AGENT_FLOORS[b]})")
    return sorted(bad)


def test_agent_has_few_top_level_modules_and_its_parts_import_only_lower_floors() -> None:
    top = {p.stem for p in (ROOT / "agent").glob("*.py") if p.stem != "__init__"}
    parts = {p.name for p in (ROOT / "agent").iterdir() if (p / "__init__.py").is_file()}
    assert len(top) <= 8, f"agent/ has {len(top)} top-level modules: give them a sub-package ({sorted(top)})"
    assert top | parts == set(AGENT_FLOORS), "every part of agent/ has a floor in AGENT_FLOORS"
    for part in parts:
        doc = ast.get_docstring(ast.parse((ROOT / "agent" / part / "__init__.py").read_text()))
        assert doc, f"agent/{part}/__init__.py says what the sub-package owns"
    bad = agent_upward_imports(import_graph(ROOT))
    assert not bad, "agent/ imports that go up (move the shared code down a floor):\n" + "\n".join(bad)


def test_the_checks_see_lazy_upward_imports_and_circles(tmp_path: Path) -> None:
    for package in LAYERS:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "harness" / "m.py").write_text("def f():\n    from agent import x\n")
    (tmp_path / "agent" / "x.py").write_text("from agent.y import g\n")
    (tmp_path / "agent" / "y.py").write_text("def g():\n    from agent import x  # noqa\n")
    graph = import_graph(tmp_path)
    assert upward_imports(graph) == ["harness.m -> agent.x (harness is floor 0, agent is floor 5)"]
    assert circles(graph) == [["agent.x", "agent.y"]]
    (tmp_path / "agent" / "nodes").mkdir()
    (tmp_path / "agent" / "nodes" / "__init__.py").write_text("")
    (tmp_path / "agent" / "nodes" / "n.py").write_text("")
    (tmp_path / "agent" / "state.py").write_text("def f():\n    from agent.nodes import n\n")
    assert agent_upward_imports(import_graph(tmp_path)) == [
        "agent.state -> agent.nodes.n (state is floor 0, nodes is floor 6)"
    ]


# --- the store rule --------------------------------------------------------------------------
# SQL is written in store/ (and the skill library's queries in skills/repository.py); agent/ reaches the store
# only through those repository functions. ORM row classes appear in agent/ only as type annotations, and only
# the modules that open, create or migrate the store import `store.engine`.
STORE_OPENERS = {
    "agent/adapters/ledger.py",
    "agent/commands/db.py",
    "agent/launch/bootstrap.py",
    "agent/launch/input_checks.py",
    "agent/session.py",
}
SQLALCHEMY_TYPE_NAMES = {"Session", "Engine", "make_url"}  # annotations and URL display, never a statement
SQL_METHODS = {"scalars", "scalar", "execute", "query"}
ROW_METHODS = {"get", "add", "delete", "merge"}  # with an ORM class as first argument: session access


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes inside `if TYPE_CHECKING:` blocks."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                inside.update(id(n) for n in ast.walk(stmt))
    return inside


def store_rule_breaches(root: Path) -> list[str]:
    """Places in agent/ that build SQL, touch a session directly, or use ORM rows or the engine where they may not."""
    bad: list[str] = []
    for path in sorted((root / "agent").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(), filename=rel)
        typing_only = _type_checking_nodes(tree)
        row_names = {"models"}
        for node in ast.walk(tree):
            where = f"{rel}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = [a.name for a in node.names]
                module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
                targets = [module] if module else names
                if any(t.split(".")[0] == "sqlalchemy" for t in targets) and not (
                    module and set(names) <= SQLALCHEMY_TYPE_NAMES
                ):
                    bad.append(f"{where} imports {module or names} from SQLAlchemy: write the query in store/")
                orm = module == "store.models" or (module == "store" and "models" in names) or "store.models" in names
                if orm:
                    row_names.update(names if module == "store.models" else ["models"])
                    if id(node) not in typing_only:
                        bad.append(f"{where} imports ORM rows at run time: call a store.repository function")
                if module == "store.engine" and rel not in STORE_OPENERS:
                    bad.append(f"{where} imports store.engine: only {sorted(STORE_OPENERS)} open the store")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in SQL_METHODS:
                    bad.append(f"{where} runs SQL (.{node.func.attr}): write the query in store/")
                elif node.func.attr in ROW_METHODS and node.args:
                    first = ast.unparse(node.args[0])
                    if first.split(".")[0] in row_names:
                        bad.append(f"{where} reads {first} from the session: call a store.repository function")
    return sorted(bad)


def test_agent_reaches_the_store_only_through_repository_functions() -> None:
    bad = store_rule_breaches(ROOT)
    assert not bad, "agent/ bypasses the store's repository functions:\n" + "\n".join(bad)


def test_the_store_rule_sees_queries_rows_and_engines(tmp_path: Path) -> None:
    (tmp_path / "agent" / "nodes").mkdir(parents=True)
    (tmp_path / "agent" / "nodes" / "n.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from store.models import Run\n"
        "def f(db):\n    from sqlalchemy import select\n    from store import models\n"
        "    from store.engine import session_scope\n"
        "    db.scalars(select(models.Run)).first()\n    return db.get(models.Run, 'r'), db.get(Run, 'r')\n"
    )
    (tmp_path / "agent" / "nodes" / "ok.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sqlalchemy.orm import Session\n"
        "    from store import models\n"
        "def f(db: 'Session') -> 'models.Run | None':\n    from store.repository import find_run\n"
        "    return find_run(db, 'r') or {}.get('x')\n"
    )
    bad = sorted(line.split(" ", 1)[0] + " " + line.split(" ", 2)[1] for line in store_rule_breaches(tmp_path))
    assert bad == [
        "agent/nodes/n.py:5 imports",
        "agent/nodes/n.py:6 imports",
        "agent/nodes/n.py:7 imports",
        "agent/nodes/n.py:8 runs",
        "agent/nodes/n.py:9 reads",
        "agent/nodes/n.py:9 reads",
    ], store_rule_breaches(tmp_path)
