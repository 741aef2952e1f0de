"""`evotrainer run` shows live progress, under a terminal and as plain lines without one.

Each test runs a real, small session (a tiny copy of the demo harness, process sandbox, 30 steps of v0):

- under a pseudo-terminal the rich live panel is redrawn at least every few seconds while v0 trains,
  its step counter advances, and it names the phase and the best version;
- with stdout a pipe there are no terminal escapes: node lines, and a progress line for the training
  run every `--progress-every` seconds while it advances.
Both print where the session's repository, runs and logs are.
"""

from __future__ import annotations

import itertools
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from llm_session import copy_demo

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--sandbox", "process", "--base-steps", "30", "--pilot-steps", "4", "--iterations", "1", "--candidates", "1"]
MAX_GAP_S = 3.0  # "updates at least every few seconds"
TIMEOUT_S = 600

pytestmark = [pytest.mark.slow]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVOTRAINER_CACHE": str(tmp_path / "cache"), **extra}
    env.pop("EVOTRAINER_DB", None)
    return env


def _command(tmp_path: Path, *extra: str) -> list[str]:
    harness = copy_demo(tmp_path / "mine")
    return [sys.executable, "-m", "agent.cli", "run", "--harness", str(harness), *ARGS, *extra]


def _read_pty(proc: subprocess.Popen[bytes], master: int) -> list[tuple[float, str]]:
    """Everything the process wrote to its terminal, as (seconds since start, chunk)."""
    chunks: list[tuple[float, str]] = []
    start = time.monotonic()
    while time.monotonic() - start < TIMEOUT_S:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end
                break
            if not data:
                break
            chunks.append((time.monotonic() - start, data.decode(errors="replace")))
        elif proc.poll() is not None:
            break
    return chunks


def test_run_under_a_terminal_redraws_a_live_panel_every_few_seconds_while_training(tmp_path: Path) -> None:
    master, slave = os.openpty()
    env = _env(tmp_path, TERM="xterm-256color", COLUMNS="140", LINES="40")
    proc = subprocess.Popen(_command(tmp_path), cwd=tmp_path, env=env, stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True)  # fmt: skip
    os.close(slave)
    try:
        chunks = _read_pty(proc, master)
        assert proc.wait(timeout=60) == 0, "".join(c for _, c in chunks)[-4000:]
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    text = "".join(c for _, c in chunks)
    v0 = [(t, int(m)) for t, c in chunks for m in re.findall(r"-v0 +step (\d+)/30", c)]
    assert len({step for _, step in v0}) >= 3, f"the v0 step counter did not advance on screen: {v0}"
    first, last = v0[0][0], v0[-1][0]
    frames = [t for t, c in chunks if first <= t <= last and "elapsed" in c]
    gaps = [b - a for a, b in itertools.pairwise(frames)]
    assert frames and max(gaps, default=0.0) <= MAX_GAP_S, f"live panel gaps while training: {max(gaps):.1f}s"
    assert "\x1b[" in text and re.search(r"\x1b\[\d*A", text), "no cursor movement: not a live redraw"
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    assert "phase observe" in plain and "best v0 (held-out" in plain and "ETA" in plain, plain[-3000:]
    assert "runs, logs" in plain and "train.log" in plain, plain[:3000]


def test_run_without_a_terminal_prints_plain_progress_lines(tmp_path: Path) -> None:
    # every 0.5 s (the smallest): an idle machine trains the 30 steps of v0 in about 3 s
    out = subprocess.run(_command(tmp_path, "--progress-every", "0.5"), cwd=tmp_path, env=_env(tmp_path),
                         capture_output=True, text=True, timeout=TIMEOUT_S)  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "\x1b" not in out.stdout, "terminal escapes in plain output"
    progress = [
        (float(m.group(1)), int(m.group(2)))
        for m in re.finditer(r"^ *([\d.]+)s progress +\S+-v0: step (\d+)/30 · ", out.stdout, re.M)
    ]
    assert len({step for _, step in progress}) >= 3, out.stdout[-3000:]
    times = [t for t, _ in progress]
    assert max(b - a for a, b in itertools.pairwise(times)) <= MAX_GAP_S, progress
    for node in ("setup", "observe", "diagnose", "propose", "record"):
        assert re.search(rf"^ *[\d.]+s {node} ", out.stdout, re.M), f"no {node} line:\n{out.stdout[-3000:]}"
    assert "runs, logs" in out.stdout and "train.log" in out.stdout
