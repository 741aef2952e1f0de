"""`make demo` is a first look on a small budget; `make demo FULL=1` is the full campaign.

The figure (minutes on an idle 2-core machine) is measured, not tested: README "What you see". Here: the budget
the Makefile passes is one `evotrainer run` accepts and plans (every run of iteration 1 validated), and
`FULL=1` drops it so the `run` defaults apply.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _demo_command(*make_args: str) -> str:
    """The `evotrainer run` line `make demo` runs on a CPU (make -n prints the recipe; nothing runs)."""
    done = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "demo", *make_args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if "evotrainer run" in line]
    return lines[-1]


def _budget(line: str) -> list[str]:
    """The flags of the CPU branch's `evotrainer run` (the last one the recipe prints)."""
    return shlex.split(line.split("evotrainer run", 1)[1].split(";")[0])


def test_the_demo_passes_a_small_budget_that_run_accepts_and_plans(tmp_path: Path) -> None:
    flags = _budget(_demo_command())
    assert flags[:2] == ["--escalate-after", "0"]
    budget = dict(zip(flags[2::2], flags[3::2], strict=True))
    assert int(budget["--iterations"]) <= 2 and int(budget["--pilot-steps"]) <= 40, budget
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "run", "--dry-run", *flags],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert re.search(r"# (\d+) of \1 run\(s\) validated", done.stdout), done.stdout[-1000:]
    assert "(40 steps" in done.stdout


def test_full_runs_the_full_length_campaign() -> None:
    assert _budget(_demo_command("FULL=1")) == ["--escalate-after", "0"]
