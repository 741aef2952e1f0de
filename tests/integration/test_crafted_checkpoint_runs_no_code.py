"""A checkpoint whose pickle runs code is refused by the local trainer, and its payload never runs.

A checkpoint path can come from state a client wrote (a version's checkpoint becomes a pilot's
`init_checkpoint`), so the trainer reads every checkpoint with `torch.load(weights_only=True)`. Here a file
whose `__reduce__` writes a marker is handed to the real trainer twice: as a run's `init_checkpoint`
(`RunSpec`, through the local backend) and as the run's own checkpoint (`evotrainer train --resume`). Each run
ends as a classified `infra_error` whose message names the file and what to do, and no marker appears. A
control loads the same file the unsafe way in a throwaway interpreter: the marker appears, so the file's
payload is live.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.failures import Outcome
from trainer_backend import BACKENDS
from trainer_backend.base import RunSpec

ROOT = Path(__file__).resolve().parents[2]
TINY = "lr: 1.0e-3\ngroup_size: 4\nprompts_per_step: 4\nmax_new_tokens: 24\nn_layers: 1\nhidden: 32\n"


class _Payload:
    """Pickles as a call of `exec` on code that writes `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


@pytest.fixture
def harness(tmp_path: Path) -> Path:
    root = Path(shutil.copytree(ROOT / "examples" / "arithmetic-oracle", tmp_path / "h"))
    (root / "harness" / "trainer.yaml").write_text(TINY)
    return root


def _crafted(path: Path, marker: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": {}, "optimizer": _Payload(marker), "state": {"step": 1}}, path)
    return path


def test_the_crafted_file_runs_its_payload_when_loaded_unsafely(tmp_path: Path) -> None:
    marker = tmp_path / "control-marker"
    path = _crafted(tmp_path / "evil.pt", marker)
    unsafe = "import sys, torch; torch.load(sys.argv[1], weights_only=" + "False)"
    subprocess.run([sys.executable, "-c", unsafe, str(path)], check=True, capture_output=True, timeout=120)
    assert marker.read_text() == "ran"


def test_an_init_checkpoint_that_runs_code_fails_the_run_without_running_it(harness: Path, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    evil = _crafted(tmp_path / "parent" / "checkpoints" / "last.pt", marker)
    spec = RunSpec(run_id="r", harness_dir=harness, out_dir=tmp_path / "run", steps=2, init_checkpoint=evil)
    result = BACKENDS["local"].run(spec)
    assert not marker.exists()
    assert result.outcome is Outcome.INFRA_ERROR
    assert f"init_checkpoint {evil}: refused" in result.message, result.message
    assert "it names exec" in result.message and "weights_only=True" in result.message
    assert "weights_only=False" not in result.message  # torch's own advice (load it unsafely) is not passed on


def test_evotrainer_train_resume_refuses_a_crafted_own_checkpoint(harness: Path, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    out = tmp_path / "run"
    _crafted(out / "checkpoints" / "last.pt", marker)
    argv = ["train", "--harness", str(harness), "--steps", "2", "--out", str(out), "--resume"]
    proc = subprocess.run(
        [sys.executable, "-m", "agent.cli", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT), "EVOTRAINER_CACHE": str(tmp_path / "cache")},
    )
    assert not marker.exists()
    assert proc.returncode != 0, proc.stdout[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["outcome"] == "infra_error"
    assert f"the run's own checkpoint {out / 'checkpoints' / 'last.pt'}: refused" in summary["message"]
    assert "refused" in proc.stdout + proc.stderr
