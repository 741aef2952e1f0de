"""A newcomer's `make demo` install (the package and CPU torch, no extras) can fetch the pretrained model.

`make demo` makes its virtualenv with `python -m venv`, `pip install torch==2.13.0` and `pip install -e .`:
whatever `evotrainer models get smollm2-135m-instruct` imports to de-quantize the packaged GGUF file
(transformers, `gguf`, `accelerate`) must therefore be a base dependency, not one of the dev or verl
extras. This test makes such a virtualenv from a copy of this checkout (pip's cache and the machine's
wheels make it minutes, not a download of the world) and runs `models get` in it into a fresh cache.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
_NOT_COPIED = shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.egg-info", ".*_cache", ".evotrainer", "runs")


def _run(args: list[str], env: dict[str, str], cwd: Path, timeout_s: float = 1800) -> subprocess.CompletedProcess[str]:
    """Run `args`; the timeout is a hang guard only."""
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)


def test_the_gguf_loaders_imports_are_base_dependencies() -> None:
    base = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {req.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip().lower() for req in base}
    assert {"torch", "transformers", "gguf", "accelerate"} <= names, sorted(names)


def test_models_get_succeeds_in_a_virtualenv_made_like_the_demos(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT, checkout, ignore=_NOT_COPIED, symlinks=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["EVOTRAINER_MODELS"] = str(tmp_path / "models")
    base_python = getattr(sys, "_base_executable", sys.executable)
    venv = tmp_path / "venv"
    made = _run([base_python, "-m", "venv", str(venv)], env, tmp_path)
    assert made.returncode == 0, made.stderr[-3000:]
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    for step in (["torch==2.13.0"], ["-e", ".", "torch==2.13.0"]):  # the Makefile's demo install, step by step
        done = _run(pip + step, env, checkout)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    dev = _run([str(venv / "bin" / "python"), "-c", "import pytest"], env, tmp_path)
    assert dev.returncode != 0, "the demo install has the dev extra: it proves nothing about the base dependencies"

    got = _run([str(venv / "bin" / "evotrainer"), "models", "get", "smollm2-135m-instruct"], env, tmp_path)
    assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-3000:]
    folder = Path(got.stdout.strip().splitlines()[-1])
    assert folder == tmp_path / "models" / "smollm2-135m-instruct"
    assert (folder / "model.safetensors").is_file() and (folder / "evotrainer-model.json").is_file()
