"""A session that merges nothing ends with the static harness's policy, bit for bit (exact continuation).

Each iteration's control pilot carries the incumbent's optimizer moments and random streams, so v0 plus
the control pilots train exactly like one `evotrainer train` run of the same lineage steps: the benchmark's
"static" arm and a session's control arm are the same trajectory, and a session is never behind static
by seed noise when it finds nothing to merge. With a KL term (`kl_coef > 0`) that needs the lineage's
reference policy carried from checkpoint to checkpoint (rebuilt from each pilot's start, the
control's KL term read 1e-5 where the uninterrupted run's read 0.006).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sqlalchemy import select

from store import models
from store.engine import make_engine, session_scope

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


@pytest.mark.parametrize("kl_coef", [0.0, 0.05], ids=["no-kl", "kl"])
def test_a_session_without_merges_ends_at_the_static_policy(tmp_path: Path, kl_coef: float) -> None:
    harness = ROOT / "examples" / "arithmetic-oracle"  # the fixed harness: nothing should beat its control
    if kl_coef:
        harness = Path(shutil.copytree(harness, tmp_path / "oracle-kl"))
        config = harness / "harness" / "trainer.yaml"
        config.write_text(config.read_text().replace("kl_coef: 0.0", f"kl_coef: {kl_coef}"))
        assert f"kl_coef: {kl_coef}" in config.read_text()
    budget = ["--base-steps", "10", "--pilot-steps", "10", "--iterations", "2", "--candidates", "2"]
    out = _cli("run", "--harness", str(harness), "--repo", "repo", "--sandbox", "process", "--seed", "4", *budget,
               cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    with session_scope(make_engine(f"sqlite:///{tmp_path / '.evotrainer' / 'evotrainer.db'}")) as db:
        versions = db.scalars(select(models.Version).order_by(models.Version.index)).all()
        runs = {r.id: r for r in db.scalars(select(models.Run)).all()}
        assert [v.decision for v in versions[1:]] == ["keep", "keep"], [(v.decision, v.rationale) for v in versions]
        final_dir = Path(runs[versions[-1].run_id].artefact_dir)

    static = _cli("train", "--harness", str(harness), "--steps", "30", "--seed", "4", "--out", "static", cwd=tmp_path)
    assert static.returncode == 0, static.stdout[-3000:] + static.stderr[-3000:]
    a = torch.load(final_dir / "checkpoints" / "last.pt", weights_only=True)
    b = torch.load(tmp_path / "static" / "checkpoints" / "last.pt", weights_only=True)
    for part in ("model", "reference"):
        assert a[part].keys() == b[part].keys() and all(torch.equal(a[part][k], b[part][k]) for k in a[part]), part
