"""Setting up a session copies the harness without following links, through `evotrainer run`.

A harness holding a symlink to a 0600 host file (the file named by the manifest, or any other) or a FIFO
is refused with one line naming the path; nothing of the host file reaches the session repository, the
output or a commit, and no repository is created. The same copy (`harness.files.copy_folder`) serves a
git harness copied into a separate `--repo`.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from llm_session import copy_demo
from typer.testing import CliRunner

from agent.cli import app
from agent.context import Context
from harness.files import copy_folder
from harness.paths import PathRuleError

RUNNER = CliRunner()
FAST = ["--sandbox", "process", "--base-steps", "4", "--pilot-steps", "4", "--iterations", "1", "--candidates", "1"]
MARKER = "TOP-SECRET-25-COPY"


def _secret(tmp_path: Path) -> Path:
    secret = tmp_path / "host-secret.jsonl"
    secret.write_text(f'{{"prompt": "{MARKER}", "ground_truth": "1"}}\n')
    secret.chmod(0o600)
    return secret


def _run(cwd: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str]:
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("EVOTRAINER_DB", raising=False)
    result = RUNNER.invoke(app, list(args), env={"COLUMNS": "200", "EVOTRAINER_CACHE": str(cwd / "cache")})
    return result.exit_code, result.output


def _links(harness: Path, secret: Path, how: str) -> str:
    """Plant the link or special file `how` names; return the path the refusal must name."""
    if how == "data-symlink":
        (harness / "data" / "train.jsonl").unlink()
        (harness / "data" / "train.jsonl").symlink_to(secret)
        return "data/train.jsonl"
    if how == "other-symlink":
        (harness / "harness" / "notes.txt").symlink_to(secret)
        return "harness/notes.txt"
    if how == "linked-folder":
        (harness / "extra").symlink_to(secret.parent)
        return "extra"
    os.mkfifo(harness / "harness" / "pipe")
    return "harness/pipe"


@pytest.mark.parametrize("how", ["data-symlink", "other-symlink", "linked-folder", "fifo"])
def test_run_refuses_a_harness_holding_links_or_special_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, git_available: None, how: str
) -> None:
    secret = _secret(tmp_path)
    harness = copy_demo(tmp_path / "mine")
    named = _links(harness, secret, how)
    code, out = _run(tmp_path, monkeypatch, "run", "--harness", str(harness), *FAST)
    assert code == 2, out
    assert named in out and "Traceback" not in out and out.count("\n") <= 2, out
    assert ("symlink" if how != "fifo" else "FIFO") in out, out
    assert MARKER not in out
    assert not (tmp_path / ".evotrainer" / "sessions").exists()
    leftovers = [p for p in tmp_path.iterdir() if p.name not in {"mine", "host-secret.jsonl", ".evotrainer", "cache"}]
    assert not leftovers, f"created {leftovers}"


def test_a_git_harness_copied_into_a_separate_repo_refuses_a_link(tmp_path: Path, git_available: None) -> None:
    from agent.launch.bootstrap import ensure_session
    from agent.launch.input_checks import SetupError
    from sandboxes.git_worktree import init_session_repo

    secret = _secret(tmp_path)
    harness = copy_demo(tmp_path / "mine")
    subprocess.run(["git", "init", "-q", str(harness)], check=True)
    (harness / "harness" / "notes.txt").symlink_to(secret)
    with pytest.raises(SetupError, match=r"harness/notes\.txt is a symlink"):
        ensure_session(Context(workdir=str(tmp_path), sandbox="process"), "s-link", harness, tmp_path / "copy")
    assert not (tmp_path / "copy").exists() and not list(tmp_path.glob(".copy.*"))
    (harness / ".git").rename(tmp_path / "moved.git")  # a plain folder: the session repository is a copy of it
    with pytest.raises(PathRuleError, match=r"harness/notes\.txt is a symlink"):
        init_session_repo(harness, tmp_path / "repo")
    assert not (tmp_path / "repo").exists()


def test_copy_folder_writes_nothing_when_refusing_and_keeps_modes(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "run.sh").write_text("echo hi\n")
    (src / "a" / "b" / "run.sh").chmod(0o755)
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "x.pyc").symlink_to("/etc/passwd")  # skipped entries are not looked at
    copy_folder(src, tmp_path / "ok", ("__pycache__",))
    assert (tmp_path / "ok" / "a" / "b" / "run.sh").stat().st_mode & 0o777 == 0o755
    assert not (tmp_path / "ok" / "__pycache__").exists()
    os.link(src / "a" / "b" / "run.sh", src / "a" / "hard")
    with pytest.raises(PathRuleError, match="a hard link"):
        copy_folder(src, tmp_path / "refused", ("__pycache__",))
    assert not (tmp_path / "refused").exists()
