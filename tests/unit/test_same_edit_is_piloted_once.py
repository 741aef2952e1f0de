"""One pilot per distinct edit: candidates of an iteration that make the same edit share a content key, and
the later one is refused naming the kept candidate, which lists every proposer."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from agent.nodes import propose as node
from sandboxes.git_worktree import change_key


def _git(cwd: Path, *args: str) -> str:
    run = ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args]
    return subprocess.run(run, cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _edit(repo: Path, base: str, branch: str, text: str, message: str) -> str:
    _git(repo, "checkout", "-q", "-b", branch, base)
    (repo / "trainer.yaml").write_text(text)
    _git(repo, "commit", "-qam", message)
    return _git(repo, "rev-parse", "HEAD")


def test_the_same_edit_by_two_routes_has_one_key_and_another_edit_another(tmp_path: Path, git_available: None) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "trainer.yaml").write_text("kl_coef: 0.0\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD")
    skill = _edit(repo, base, "skill", "kl_coef: 0.05\n", "learned skill kl-anchor")
    probe = _edit(repo, base, "probe", "kl_coef: 0.05\n", "probe kl_coef-up")
    other = _edit(repo, base, "other", "kl_coef: 0.1\n", "probe kl_coef-up2")
    assert change_key(repo, base, skill) == change_key(repo, base, probe) != ""
    assert change_key(repo, base, other) != change_key(repo, base, skill)
    assert change_key(repo, base, base) == ""


def test_a_second_proposer_of_the_same_edit_is_refused_naming_the_kept_candidate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refused: list[tuple[str, str]] = []

    def refuse(ctx: Any, state: Any, info: Any, reason: str) -> Any:
        refused.append((info["id"], reason))
        return {**info, "status": "refused", "reason": reason}

    monkeypatch.setattr(node, "refuse_candidate", refuse)
    state: Any = {"session_id": "s0", "candidates": []}
    kept: Any = {"id": "s0-c1-1-kl", "iteration": 1, "slug": "kl", "skill": "kl_coef-up", "status": "proposed",
                 "content_key": "k1"}  # fmt: skip
    twin: Any = {**kept, "id": "s0-c1-2-anchor", "slug": "anchor", "skill": "kl-anchor"}
    distinct: Any = {**kept, "id": "s0-c1-3-lr", "slug": "lr", "skill": "lr-down", "content_key": "k2"}
    made = [kept]
    made.append(node._once(None, state, twin, made))  # type: ignore[arg-type]
    made.append(node._once(None, state, distinct, made))  # type: ignore[arg-type]
    assert [c["status"] for c in made] == ["proposed", "refused", "proposed"]
    assert kept["proposers"] == ["kl_coef-up", "kl-anchor"]
    [(who, why)] = refused
    assert who == twin["id"] and "same edit as" in why and "kl_coef-up, kl-anchor" in why, why
