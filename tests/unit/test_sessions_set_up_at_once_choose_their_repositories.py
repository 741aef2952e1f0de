"""Two sessions set up at the same instant may choose the same free repository folder (a LangGraph server's
callers starting from harnesses with one manifest name): the second to finish its copy chooses again, never
fails with "Directory not empty" and never works in a repository that holds another harness."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agent.launch import bootstrap
from agent.launch.repos import differences

ROOT = Path(__file__).resolve().parents[2]


def _harness(tmp_path: Path, name: str, reward_note: str) -> Path:
    folder = tmp_path / name
    shutil.copytree(ROOT / "examples" / "skeleton", folder)
    reward = folder / "harness" / "reward.py"
    reward.write_text(reward.read_text() + f"\n# {reward_note}\n")
    return folder


def _other_session_wins(monkeypatch: pytest.MonkeyPatch, other: Path) -> list[Path]:
    """Make the other session's copy land in the chosen folder just before this session's copy is renamed."""
    real = bootstrap._build_repo
    built: list[Path] = []

    def build(harness: Path, root: Path, session_id: str) -> None:
        if not built:
            real(other, root, "sother")  # the session beside this one finishes first
        built.append(root)
        real(harness, root, session_id)

    monkeypatch.setattr(bootstrap, "_build_repo", build)
    return built


def test_a_folder_taken_by_another_harness_meanwhile_sends_the_session_to_the_next_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, theirs = _harness(tmp_path, "a", "mine"), _harness(tmp_path, "b", "theirs")
    workdir = tmp_path / "work"
    workdir.mkdir()
    built = _other_session_wins(monkeypatch, theirs)
    root = bootstrap._repository(mine, None, "skeleton", workdir, "smine")
    assert built == [workdir / "evotrainer-skeleton", workdir / "evotrainer-skeleton-2"]
    assert root == (workdir / "evotrainer-skeleton-2").resolve()
    assert differences(mine, root) == [] and differences(theirs, workdir / "evotrainer-skeleton") == []
    assert not [p.name for p in workdir.iterdir() if "partial" in p.name]  # no staging folder left behind


def test_a_folder_taken_by_the_same_harness_meanwhile_is_shared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = _harness(tmp_path, "a", "same")
    workdir = tmp_path / "work"
    workdir.mkdir()
    built = _other_session_wins(monkeypatch, mine)
    root = bootstrap._repository(mine, None, "skeleton", workdir, "smine")
    assert built == [workdir / "evotrainer-skeleton"]
    assert root == (workdir / "evotrainer-skeleton").resolve() and differences(mine, root) == []
