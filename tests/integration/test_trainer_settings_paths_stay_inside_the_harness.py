"""A path a harness file names goes through the one path rule before anything opens it.

`harness/trainer.yaml` is on the editable surface: a candidate who points `data_selection:` (or
`warmstart_data:`) at a host file must not make the trainer, which runs outside the sandbox, read it. The
real CLI (`evotrainer train`, in a fresh interpreter) refuses with one line naming the file, the field and
the rule; the target is a 0600 file holding a marker that must appear nowhere, or a FIFO that would hang
the command if anything opened it. The trainer process itself refuses the same way (`load_run`), for a
pilot whose settings skip the CLI's checks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.failures import CandidateCodeError
from trainer_backend.base import RunSpec
from trainer_backend.local.train import load_run

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "arithmetic"
MARKER = "TOP-SECRET-25: [unclosed"  # also invalid YAML: a parse error would quote it


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("EVOTRAINER_DB", "COLUMNS")}
    env.update(PYTHONPATH=str(ROOT), HOME=str(cwd), EVOTRAINER_CACHE=str(cwd / "cache"))
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def _setup(tmp_path: Path, field: str, how: str) -> tuple[Path, Path]:
    """A copy of the demo whose trainer.yaml names, in `field`, a host file outside it the way `how` says."""
    harness = Path(shutil.copytree(DEMO, tmp_path / "mine", ignore=shutil.ignore_patterns("__pycache__")))
    secret = tmp_path / "secret.yaml"
    if how == "fifo":
        os.mkfifo(secret, 0o600)
    else:
        secret.write_text(MARKER + "\n")
        secret.chmod(0o600)
    value = {
        "absolute": str(secret),
        "fifo": str(secret),
        "dotdot": "../secret.yaml",
        "symlink": "harness/picked.yaml",
        "linked-folder": "up/secret.yaml",
    }[how]
    if how == "symlink":
        (harness / "harness" / "picked.yaml").symlink_to(secret)
    if how == "linked-folder":
        (harness / "up").symlink_to(tmp_path)
    trainer = harness / "harness" / "trainer.yaml"
    lines = [ln for ln in trainer.read_text().splitlines() if not ln.startswith(f"{field}:")]
    trainer.write_text("\n".join([*lines, f"{field}: {value}"]) + "\n")
    return harness, trainer


CASES = [
    ("data_selection", "absolute", "it is absolute"),
    ("data_selection", "fifo", "it is absolute"),
    ("data_selection", "dotdot", "'..'"),
    ("data_selection", "symlink", "harness/picked.yaml is a symlink"),
    ("warmstart_data", "linked-folder", "up is a symlink"),
]


@pytest.mark.parametrize(("field", "how", "rule"), CASES, ids=[f"{f}-{h}" for f, h, _ in CASES])
def test_train_refuses_a_settings_path_outside_the_harness_in_one_line(
    tmp_path: Path, field: str, how: str, rule: str
) -> None:
    harness, trainer = _setup(tmp_path, field, how)
    done = _cli(tmp_path, "train", "--harness", str(harness), "--steps", "1")
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {trainer}: field '{field}': "), done.stderr
    assert rule in lines[0] and "inside the harness" in lines[0], lines[0]
    assert "TOP-SECRET" not in done.stdout + done.stderr
    assert not (tmp_path / "runs").exists()


def test_the_trainer_process_refuses_it_too(tmp_path: Path) -> None:
    harness, trainer = _setup(tmp_path, "data_selection", "symlink")
    spec = RunSpec(run_id="r", harness_dir=harness, out_dir=tmp_path / "out", steps=1, seed=0)
    with pytest.raises(CandidateCodeError) as caught:
        load_run(spec)
    assert f"{trainer}: field 'data_selection'" in caught.value.message
    assert "is a symlink" in caught.value.message and "TOP-SECRET" not in caught.value.message
