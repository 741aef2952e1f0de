"""Nothing EvoTrainer loads from a file can run code: a scan of every Python file in the repository.

A checkpoint path can come from state a client wrote, and a pickle runs whatever its `__reduce__` names the
moment it is read. So every `torch.load` passes `weights_only=True` (tensors and plain values only, the
checkpoint writer stores nothing else: `trainer_backend.local.artifacts.plain`), and no code deserialises
with `pickle`, `dill`, `cloudpickle`, `joblib`, `marshal`, `shelve`, `pandas.read_pickle`, `numpy.load(...,
allow_pickle=True)` or `yaml.load` without a safe loader. The scan resolves import aliases
(`import torch as T`, `from pickle import loads`), and its own detector is tested on planted code.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIPPED = {".venv", ".git", "node_modules", "shared", "runs"}

# Calls that run code named by the bytes they read, whatever their arguments.
UNSAFE_CALLS = {
    "pickle.load", "pickle.loads", "pickle.Unpickler", "_pickle.load", "_pickle.loads", "cPickle.load",
    "cPickle.loads", "dill.load", "dill.loads", "cloudpickle.load", "cloudpickle.loads", "joblib.load",
    "marshal.load", "marshal.loads", "shelve.open", "pandas.read_pickle", "yaml.unsafe_load", "yaml.full_load",
    "yaml.unsafe_load_all", "yaml.full_load_all", "torch.serialization.add_safe_globals",
}  # fmt: skip
SAFE_YAML_LOADERS = {"SafeLoader", "CSafeLoader", "BaseLoader", "CBaseLoader"}


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted name it stands for, from the module's imports."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    names[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(func: ast.expr, names: dict[str, str]) -> str | None:
    parts: list[str] = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return None
    return ".".join([names.get(func.id, func.id), *reversed(parts)])


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_true(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def problems_in(source: str, filename: str) -> list[str]:
    """Every call in `source` that could deserialise code, as `file:line: what`."""
    tree = ast.parse(source, filename=filename)
    names = _aliases(tree)
    found = []
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        name = _dotted(call.func, names)
        where = f"{filename}:{call.lineno}: {name}"
        if name is None:
            continue
        if name == "torch.load" and not _is_true(_keyword(call, "weights_only")):
            found.append(f"{where} without weights_only=True")
        elif name in UNSAFE_CALLS:
            found.append(f"{where} can run code named by the file it reads")
        elif name == "numpy.load" and not (_keyword(call, "allow_pickle") is None or _is_false(call)):
            found.append(f"{where} with allow_pickle")
        elif name in ("yaml.load", "yaml.load_all") and not _safe_loader(call, names):
            found.append(f"{where} without a safe Loader (use yaml.safe_load)")
    return found


def _is_false(call: ast.Call) -> bool:
    value = _keyword(call, "allow_pickle")
    return isinstance(value, ast.Constant) and value.value is False


def _safe_loader(call: ast.Call, names: dict[str, str]) -> bool:
    loader = _keyword(call, "Loader") or (call.args[1] if len(call.args) > 1 else None)
    name = None if loader is None else _dotted(loader, names)
    return name is not None and name.rsplit(".", 1)[-1] in SAFE_YAML_LOADERS


def _python_files() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if not SKIPPED & set(p.relative_to(ROOT).parts[:-1]) and p.is_file())


def test_no_file_in_the_repository_loads_code() -> None:
    files = _python_files()
    assert any(p.relative_to(ROOT).parts[0] == "benchmarks" for p in files)  # the scan reaches every package
    assert ROOT / "trainer_backend" / "local" / "train.py" in files
    found = [problem for path in files for problem in problems_in(path.read_text(), str(path.relative_to(ROOT)))]
    assert found == []


PLANTED = [
    ("import torch\ntorch.load('x')", "without weights_only=True"),
    ("import torch as T\nT.load('x', weights_only=False)", "without weights_only=True"),
    ("from torch import load\nload('x', map_location='cpu')", "without weights_only=True"),
    ("import torch\nflag = True\ntorch.load('x', weights_only=flag)", "without weights_only=True"),
    ("import pickle\npickle.loads(b'')", "can run code"),
    ("from pickle import load as l\nl(open('x', 'rb'))", "can run code"),
    ("import joblib\njoblib.load('x')", "can run code"),
    ("import numpy as np\nnp.load('x', allow_pickle=True)", "with allow_pickle"),
    ("import yaml\nyaml.load(open('x'))", "without a safe Loader"),
    ("import yaml\nyaml.load(open('x'), Loader=yaml.Loader)", "without a safe Loader"),
    ("import yaml\nyaml.unsafe_load('a: 1')", "can run code"),
]


@pytest.mark.parametrize(("source", "what"), PLANTED)
def test_the_scan_finds_planted_loads(source: str, what: str) -> None:
    found = problems_in(source, "planted.py")
    assert len(found) == 1 and what in found[0], found


@pytest.mark.parametrize(
    "source",
    [
        "import torch\ntorch.load('x', map_location='cpu', weights_only=True)",
        "import numpy as np\nnp.load('x')\nnp.load('y', allow_pickle=False)",
        "import yaml\nyaml.safe_load('a: 1')\nyaml.load('a: 1', Loader=yaml.SafeLoader)",
        "import pickle\npickle.dumps(1)",
    ],
)
def test_the_scan_passes_safe_loads(source: str) -> None:
    assert problems_in(source, "safe.py") == []
