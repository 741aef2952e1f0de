"""Output outside a terminal (CI logs, `nohup`, pipes) keeps ids and paths whole, `run` says where
everything is before its slow set-up, and the process does not linger after its last line.

- `agent.commands.output.console()` outside a terminal: no 80-column wrap, no `…` in a table cell;
- `evotrainer run`'s first line is the session's, printed before torch, transformers or LangGraph are
  imported (they took 20 of the 25 s before the first line on a busy 2-core machine);
- the CLI freezes the garbage collector at exit: the interpreter's teardown then no longer walks the few
  hundred thousand objects a session leaves (3.0 s after a tiny session's last line on an idle box, 0.3 s
  with it; 10-14 s on a busy one).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from rich.table import Table

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "arithmetic"
HEAVY = ("torch", "transformers", "langgraph", "langchain_core")


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("EVOTRAINER_DB", "COLUMNS", "LINES")}
    return {**env, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path), "TERM": "xterm-256color"}


def test_the_console_outside_a_terminal_neither_wraps_nor_cuts() -> None:
    from agent.commands.output import console

    out = console()
    out.file = io.StringIO()  # not a terminal, like a pipe or a CI log
    path = "/data/" + "/".join(f"folder-{i:02d}" for i in range(30)) + "/train.log"
    table = Table(title="EvoTrainer sessions")
    for name in ("session", "created (UTC)", "mode", "status", "versions", "best strict", "why it stopped"):
        table.add_column(name)
    table.add_row("s12041821-28d4", "2026-12-04 18:21", "evotrainer", "failed", "0", "—", f"see {path}")
    out.print(table)
    out.print(f"final checkpoint: {path}")
    text = out.file.getvalue()
    assert "s12041821-28d4" in text and "…" not in text, text
    assert f"see {path}" in text and f"final checkpoint: {path}\n" in text, text


def test_run_prints_where_everything_is_before_the_heavy_imports(tmp_path: Path) -> None:
    """The first stdout line of `run` is written before any heavy module is imported (then the probe exits)."""
    harness = shutil.copytree(DEMO, tmp_path / "mine", ignore=shutil.ignore_patterns("__pycache__"))
    probe = f"""
import json, os, sys
class FirstLine:
    def __init__(self, real):
        self.real = real
    def write(self, text):
        if text.strip():
            heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)
            self.real.write(json.dumps({{"line": text.strip().splitlines()[0], "heavy": heavy}}) + "\\n")
            self.real.flush()
            os._exit(0)
        return len(text)
    def flush(self):
        pass
    def isatty(self):
        return False
sys.stdout = FirstLine(sys.stdout)
from agent.cli import app
app(["run", "--harness", {str(harness)!r}, "--sandbox", "process"])
"""
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    first = json.loads(done.stdout.strip().splitlines()[-1])
    assert first["line"].startswith("session s"), first
    assert first["heavy"] == [], f"imported before the first line: {first['heavy']}"


def test_the_cli_freezes_the_garbage_collector_at_exit(tmp_path: Path) -> None:
    probe = (
        "import atexit, gc\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count()))\n"  # runs after the CLI's own handler
        "import agent.cli\n"
        "garbage = [{'i': i} for i in range(1000)]\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    frozen = int(done.stdout.split()[-1])
    assert frozen >= 1000, done.stdout
