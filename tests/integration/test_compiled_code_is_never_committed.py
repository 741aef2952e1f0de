"""A candidate that adds compiled code is refused: it would run, yet its diff shows only "Binary files differ".

A sourceless ``.pyc`` sent as a git binary patch was applied, committed and imported in the sandbox while
its review saw no code at all. Here the real tools (real git worktrees and `git apply`) take such patches:
by its name (``.pyc``) and by its content (bytecode under another name), the backtest and the submit refuse
it and the candidate's branch gains no commit.
"""

from __future__ import annotations

import py_compile
import subprocess
from pathlib import Path

import pytest
from llm_session import fake_session

from agent.llm.tools import Toolbox
from harness.manifest import load_harness
from sandboxes.compiled_code import compiled_code

SOURCE = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n"


def _binary_patch(tmp: Path, rel: str, data: bytes) -> str:
    """The `git diff --binary` adding `rel` with `data`, made by real git in a scratch repository."""
    tmp.mkdir()
    git = ["git", "-C", str(tmp), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
    (tmp / rel).write_bytes(data)
    subprocess.run([*git, "add", rel], check=True)
    patch = subprocess.run([*git, "diff", "--cached", "--binary"], check=True, capture_output=True, text=True).stdout
    assert "GIT binary patch" in patch
    return patch


def _bytecode(tmp: Path) -> bytes:
    src = tmp / "helper.py"
    src.write_text(SOURCE)
    return Path(py_compile.compile(str(src), cfile=str(tmp / "helper.pyc"))).read_bytes()


@pytest.mark.parametrize("rel", ["harness/helper.pyc", "harness/tables.dat"])
def test_a_binary_patch_of_bytecode_is_refused(tmp_path: Path, git_available: None, rel: str) -> None:
    from git import Repo

    ctx, state = fake_session(tmp_path, max_candidates=1)
    box = Toolbox(ctx, state, load_harness(Path(state["harness_dir"])))  # type: ignore[arg-type]
    patch = _binary_patch(tmp_path / "scratch", rel, _bytecode(tmp_path))
    opened = box.call("create_candidate", {"slug": "pyc", "factors": ["reward"], "hypothesis": "h",
                                           "success_criterion": "c"})  # fmt: skip
    assert opened.startswith("opened candidate"), opened
    assert box.call("apply_patch", {"diff": patch}).startswith("patch applied"), "git applies it: the check is ours"
    box.call("write_file", {"path": "harness/reward.py", "content": "from helper import compute_score\n"})
    backtest = box.call("request_backtest", {})
    assert backtest.startswith("ERROR:") and rel in backtest and "compiled code" in backtest, backtest
    submitted = box.call("submit_candidate", {"title": "t"})
    assert submitted.startswith("REFUSED:") and rel in submitted and "Binary files differ" in submitted, submitted
    (cand,) = box.made
    assert cand["status"] == "refused"
    repo = Repo(state["harness_dir"])
    assert repo.commit(cand["branch"]).hexsha == repo.commit(state["version"]["commit"]).hexsha, "nothing committed"
    assert not (Path(cand["worktree"]) / rel).exists(), "the refused worktree is back at its base"


def test_compiled_code_is_found_by_name_and_content(tmp_path: Path) -> None:
    files = {
        "harness/ok.py": SOURCE.encode(),
        "harness/notes.txt": b"ab\r\n\0\0\0\0 text that looks like nothing",
        "harness/x.bin": _bytecode(tmp_path),
        "harness/native": b"\x7fELF\x02\x01\x01\0" + b"\0" * 32,
        "harness/ext.cpython-311-x86_64-linux-gnu.so": b"",
        "harness/lib.so.1": b"",
        "harness/__pycache__/m.txt": b"",
    }
    root = tmp_path / "wt"
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    found = compiled_code(root, [*files, "harness/deleted.py"])
    assert found == [
        "harness/x.bin",
        "harness/native",
        "harness/ext.cpython-311-x86_64-linux-gnu.so",
        "harness/lib.so.1",
        "harness/__pycache__/m.txt",
    ]
