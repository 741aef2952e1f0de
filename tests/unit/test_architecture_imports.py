"""The CLI stays light and pure modules stay free of I/O libraries.

`import agent`, `import agent.cli` and `evotrainer --help` run in a fresh interpreter and must not load
heavy dependencies; pure modules (diagnostics except adapters, skill triggers and ranking) are scanned
for imports of I/O libraries. Files that do not exist yet are skipped, not failed.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Loaded lazily, inside the command that needs them (agent/cli.py docstring).
HEAVY = {
    "torch", "verl", "ray", "transformers", "docker", "langgraph", "langchain_core", "langchain_openai",
    "openai", "sqlalchemy", "alembic", "psycopg", "git", "pandas", "plotly", "scipy",
}  # fmt: skip
# Pure modules never import these (style.md §1): the adapters own Docker, git, SQL, subprocesses, LangGraph.
IO_LIBRARIES = {"subprocess", "docker", "sqlalchemy", "alembic", "psycopg", "sqlite3", "langgraph", "git", "store"}
PURE_GLOBS = ["diagnostics/**/*.py", "skills/triggers.py", "skills/retrieval.py"]
ADAPTER_MARK = "adapter"  # diagnostics/*adapter*.py or diagnostics/adapters/ may do I/O


def _loaded_after(code: str) -> set[str]:
    probe = f"import json, sys\n{code}\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "code",
    [
        "import agent",
        "import agent.cli",
        "from agent.cli import app\ntry:\n    app(['--help'])\nexcept SystemExit:\n    pass",
        "from agent.cli import app\ntry:\n    app(['db', '--help'])\nexcept SystemExit:\n    pass",
    ],
    ids=["import-agent", "import-agent-cli", "evotrainer-help", "evotrainer-db-help"],
)
def test_cli_import_loads_no_heavy_dependency(code: str) -> None:
    heavy = _loaded_after(code) & HEAVY
    assert not heavy, f"{heavy} imported at module level; import them inside the command function"


def test_the_probe_detects_a_heavy_import() -> None:
    assert "sqlalchemy" in _loaded_after("import store.engine")


def _imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def _pure_modules() -> list[Path]:
    found = {p for pattern in PURE_GLOBS for p in ROOT.glob(pattern)}
    return sorted(p for p in found if ADAPTER_MARK not in str(p.relative_to(ROOT)))


def test_pure_modules_import_no_io_library() -> None:
    modules = _pure_modules()
    assert any(p.name == "schema.py" for p in modules), "diagnostics/schema.py should be scanned"
    offenders = {
        str(p.relative_to(ROOT)): sorted(_imported_roots(p) & IO_LIBRARIES)
        for p in modules
        if _imported_roots(p) & IO_LIBRARIES
    }
    assert not offenders, f"pure modules import I/O libraries (move the I/O to an adapter): {offenders}"


def test_the_scanner_sees_nested_and_aliased_imports(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text(
        "import os\nif True:\n    import subprocess as sp\nfrom sqlalchemy.orm import Session\nfrom . import x\n"
    )
    assert _imported_roots(sample) == {"os", "subprocess", "sqlalchemy"}
