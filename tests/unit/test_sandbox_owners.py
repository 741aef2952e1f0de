"""Scratch folders of a killed process are found by their owner's name and removed; live owners' stay."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sandboxes.owners import owner_token, reap_orphan_dirs, scratch_dir


def test_scratch_dirs_of_dead_owners_are_reaped_and_live_ones_kept(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    _, pid, started = owner_token(child.pid).split("/")
    child.kill()
    child.wait()
    dead = tmp_path / f"evotrainer-harness-{pid}-{started}-abc123xy"
    _, me, my_start = owner_token().split("/")
    live = tmp_path / f"evotrainer-worker-{me}-{my_start}-zz9_q0rt"
    reused = tmp_path / f"evotrainer-worker-{me}-{int(my_start or 0) + 1}-reused00"  # my pid, another start
    foreign = tmp_path / "evotrainer-harness-k2j3l4m5"  # no owner in the name (older folders): never touched
    for path in (dead, live, reused, foreign):
        (path / "harness").mkdir(parents=True)
    assert sorted(reap_orphan_dirs(tmp_path)) == sorted([dead, reused])
    assert live.is_dir() and foreign.is_dir() and not dead.exists() and not reused.exists()


def test_scratch_dir_names_its_owner_and_cleans_up_normally() -> None:
    with scratch_dir("stage") as name:
        _, me, started = owner_token().split("/")
        assert Path(name).name.startswith(f"evotrainer-stage-{me}-{started}-")
        assert Path(name).is_dir()
    assert not Path(name).exists()


@pytest.mark.parametrize("name", ["evotrainer-harness-12-", "evotrainer-x-1-2-a-b", "other-harness-1-2-abc"])
def test_names_that_do_not_fit_the_pattern_are_ignored(tmp_path: Path, name: str) -> None:
    (tmp_path / name).mkdir()
    assert reap_orphan_dirs(tmp_path) == []
