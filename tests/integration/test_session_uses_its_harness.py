"""Sessions use the harness you gave them, through `evotrainer run` (real git and SQLite).

- A user's mistake is refused with one line naming the file or field and the fix, exit 2, no traceback,
  and nothing created: no session folder, no repository, no branch.
- Without `--repo` a session gets a repository of its own harness (never the demo's ./evotrainer-demo);
  a `--repo` holding a different harness is refused with both paths and the fix.
- When v0's training fails, `run` exits 1 and the session reads `failed` with the reason, in the store
  and in `evotrainer status`.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from llm_session import copy_demo
from typer.testing import CliRunner

from agent.cli import app
from agent.context import Context
from agent.launch.repos import choose_repo
from store import models
from store.engine import make_engine, session_scope

RUNNER = CliRunner()
FAST = ["--sandbox", "process", "--base-steps", "4", "--pilot-steps", "4", "--iterations", "1", "--candidates", "1"]


def _run(cwd: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str]:
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("EVOTRAINER_DB", raising=False)
    result = RUNNER.invoke(app, list(args), env={"COLUMNS": "200", "EVOTRAINER_CACHE": str(cwd / "cache")})
    return result.exit_code, result.output


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _made_nothing(cwd: Path, before: set[str]) -> None:
    assert not (cwd / ".evotrainer" / "sessions").exists(), "a session folder was created"
    made = {p.name for p in cwd.iterdir()} - before - {".evotrainer", "cache"}
    assert not made, f"created {made}"


def _edit(path: Path, old: str, new: str) -> None:
    path.write_text(path.read_text().replace(old, new))


MISTAKES: dict[str, tuple[Callable[[Path], None], str]] = {
    "empty folder": (lambda h: (shutil.rmtree(h), h.mkdir()), "is empty"),
    "no manifest": (lambda h: (h / "evotrainer.yaml").unlink(), "has no evotrainer.yaml"),
    "malformed yaml": (lambda h: (h / "evotrainer.yaml").write_text("name: [x\n"), "not valid YAML"),
    "missing function": (
        lambda h: _edit(h / "evotrainer.yaml", ":compute_score", ":compute_scores"),
        "defines no function 'compute_scores'",
    ),
    "unknown trainer key": (
        lambda h: _edit(h / "harness" / "trainer.yaml", "lr:", "learning_rate:"),
        "unknown trainer key 'learning_rate'",
    ),
}


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_a_mistake_is_refused_before_any_repository_or_branch_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, git_available: None, mistake: str
) -> None:
    harness = copy_demo(tmp_path / "mine")
    subprocess.run(["git", "init", "-q", str(harness)], check=True)  # a git harness: would be used in place
    edit, expected = MISTAKES[mistake]
    edit(harness)
    before = {p.name for p in tmp_path.iterdir()}
    code, out = _run(tmp_path, monkeypatch, "run", "--harness", str(harness), *FAST)
    assert code == 2, out
    assert expected in out and "Traceback" not in out, out
    assert out.count("\n") <= 2, out  # one line: the problem and the fix
    _made_nothing(tmp_path, before)
    if (harness / ".git").is_dir():
        assert _git(harness, "branch", "--list", "evo/*") == ""


def test_an_unreachable_database_is_refused_before_anything_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, git_available: None
) -> None:
    harness = copy_demo(tmp_path / "mine")
    before = {p.name for p in tmp_path.iterdir()}
    url = "postgresql+psycopg://postgres@127.0.0.1:1/unreachable"
    code, out = _run(tmp_path, monkeypatch, "run", "--harness", str(harness), "--db", url, *FAST)
    assert code == 2 and "cannot connect" in out and "Traceback" not in out, out
    _made_nothing(tmp_path, before)


def test_a_repository_holding_another_harness_is_refused_with_both_paths_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, git_available: None
) -> None:
    from agent.launch.bootstrap import ensure_session

    first = copy_demo(tmp_path / "first")
    ensure_session(Context(workdir=str(tmp_path), sandbox="process"), "s-first", first, tmp_path / "repo")
    branches = _git(tmp_path / "repo", "branch", "--list")
    fixed = copy_demo(tmp_path / "fixed")
    _edit(fixed / "harness" / "trainer.yaml", "max_new_tokens: 16", "max_new_tokens: 24")
    code, out = _run(tmp_path, monkeypatch, "run", "--harness", str(fixed), "--repo", "repo", *FAST)
    flat = " ".join(out.split())
    assert code == 2, out
    assert str((tmp_path / "repo").resolve()) in flat and str(fixed.resolve()) in flat, out
    assert "harness/trainer.yaml" in flat and "pass a new --repo folder" in flat, out
    assert _git(tmp_path / "repo", "branch", "--list") == branches, "the refused run created a branch"


@pytest.mark.slow
def test_a_session_trains_its_own_harness_and_fails_loudly_when_v0_cannot_train(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, git_available: None
) -> None:
    demo_repo = tmp_path / "evotrainer-demo"  # a previous demo in the same folder: must not be reused
    shutil.copytree(copy_demo(tmp_path / "demo-src"), demo_repo)
    subprocess.run(["git", "init", "-q", str(demo_repo)], check=True)
    subprocess.run(["git", "-C", str(demo_repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(demo_repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "d"],
                   check=True)  # fmt: skip
    mine = copy_demo(tmp_path / "mine")
    _edit(mine / "evotrainer.yaml", "name: arithmetic", "name: mine")
    (mine / "harness" / "reward.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
        "    raise RuntimeError('reward exploded on purpose')\n"
    )
    code, out = _run(tmp_path, monkeypatch, "run", "--harness", str(mine), "--quiet", *FAST)
    assert code == 1, out
    flat = " ".join(out.split())
    assert "failed: v0 training failed (candidate_error)" in flat and "reward exploded on purpose" in flat, out
    assert "harness/reward.py" in flat and "train.log" in flat and "Traceback" not in out, out
    assert " observe " not in out, "--quiet printed node lines"

    engine = make_engine(f"sqlite:///{tmp_path / '.evotrainer' / 'evotrainer.db'}")
    with session_scope(engine) as db:
        [session] = db.query(models.EvoSession).all()
        assert session.status == "failed" and "reward exploded on purpose" in (session.status_reason or "")
        repo = Path(session.repo_path)
        assert Path(session.harness_path) == mine.resolve()
    engine.dispose()
    assert repo == (tmp_path / "evotrainer-mine").resolve(), repo
    assert "reward exploded" in (repo / "harness" / "reward.py").read_text(), "the session trained another harness"
    assert _git(demo_repo, "branch", "--list", "evo/*") == "", "the demo repository was used"

    code, status = _run(tmp_path, monkeypatch, "status")
    assert code == 0 and "failed" in status and "v0 training failed" in " ".join(status.split()), status

    # After fixing the harness, the next session gets a fresh repository of the fixed harness.
    shutil.copy(tmp_path / "demo-src" / "harness" / "reward.py", mine / "harness" / "reward.py")
    assert choose_repo(mine, None, "mine", tmp_path) == (tmp_path / "evotrainer-mine-2").resolve()
    # A harness that is a git repository's top level is used in place.
    assert choose_repo(demo_repo, None, "arithmetic", tmp_path) == demo_repo.resolve()


def test_a_git_harness_is_used_in_place_from_head_or_copied_as_it_is(tmp_path: Path, git_available: None) -> None:
    from agent.launch.bootstrap import ensure_session
    from agent.launch.input_checks import SetupError

    harness = copy_demo(tmp_path / "mine")
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "h"]):
        _git(harness, *args)
    _edit(harness / "harness" / "trainer.yaml", "max_new_tokens: 16", "max_new_tokens: 20")  # uncommitted
    ctx = Context(workdir=str(tmp_path), sandbox="process")
    with pytest.raises(SetupError, match=r"uncommitted changes .*harness/trainer\.yaml.*--repo DIR"):
        ensure_session(ctx, "s-inplace", harness, None)
    assert _git(harness, "branch", "--list", "evo/*") == ""

    root = ensure_session(ctx, "s-copy", harness, tmp_path / "copy")
    assert root == (tmp_path / "copy").resolve() and (root / ".git").is_dir()
    assert "max_new_tokens: 20" in (root / "harness" / "trainer.yaml").read_text(), "not the folder as it is"
    assert _git(root, "log", "--format=%s").strip().splitlines()[-1] == "v0: starting harness"
    assert not list(tmp_path.glob(".copy.*")), "staging folders left behind"

    _git(harness, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "20 tokens")
    assert ensure_session(ctx, "s-inplace", harness, None) == harness.resolve()
    assert _git(harness, "branch", "--show-current").strip() == "evo/s-inplace/main"
