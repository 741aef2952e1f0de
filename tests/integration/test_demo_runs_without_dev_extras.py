"""`make demo` installs only the package (no `dev` or `verl` extra), so a session must not need them.

A whole small session (tiny demo harness copy, process sandbox) runs with the extras' packages absent from
the controller and from every Python process it starts (trainer, sandbox worker): a `sitecustomize` on
PYTHONPATH swaps site-packages for a view of it without them, so importing one fails as it would on a
demo-only install. The session must finish as usual.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

import pytest
from llm_session import copy_demo

ROOT = Path(__file__).resolve().parents[2]
# Top-level packages of the dev and verl extras (pyproject.toml), none of which the demo may import
# (langgraph-sdk is in the dev extra only for its version pin: langgraph itself requires it).
EXTRAS = {"pytest", "_pytest", "ruff", "mypy", "pandas", "langgraph_api", "langgraph_cli", "langgraph_runtime_inmem",
          "verl", "ray", "pyarrow"}  # fmt: skip

pytestmark = [pytest.mark.slow]


def _site_without_extras(view: Path) -> Path:
    """A folder of links to every site-packages entry except the extras' packages; returns the real folder."""
    [real] = [Path(p) for p in site.getsitepackages() if (Path(p) / "torch").exists()]
    view.mkdir()
    for entry in real.iterdir():
        if entry.name.split(".")[0].split("-")[0] not in EXTRAS:
            (view / entry.name).symlink_to(entry)
    return real


def test_a_session_runs_with_the_dev_and_verl_extras_absent(tmp_path: Path) -> None:
    view, shim = tmp_path / "site", tmp_path / "shim"
    real = _site_without_extras(view)
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        f"import sys\nsys.path[:] = [{str(view)!r} if p == {str(real)!r} else p for p in sys.path]\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{shim}{os.pathsep}{ROOT}", "EVOTRAINER_CACHE": str(tmp_path / "cache")}
    env.pop("EVOTRAINER_DB", None)
    probe = subprocess.run([sys.executable, "-c", "import pandas"], env=env, capture_output=True, text=True)
    assert probe.returncode != 0 and "No module named 'pandas'" in probe.stderr, "the extras are still importable"
    harness = copy_demo(tmp_path / "mine")
    args = ["--sandbox", "process", "--base-steps", "4", "--pilot-steps", "4", "--iterations", "1", "--candidates", "1"]
    out = subprocess.run([sys.executable, "-m", "agent.cli", "run", "--harness", str(harness), *args, "--quiet"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "iteration budget reached" in out.stdout, out.stdout[-3000:]
