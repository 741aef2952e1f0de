"""What a candidate runs is exactly what is committed and reviewed.

A candidate once added ``harness/diagnostics/.gitignore`` (``*.bin``), a ``blob.bin`` holding the real reward
and a ``reward.py`` that executed it: the changed-file list showed only the ``.gitignore`` and ``reward.py``,
the backtest and pilot ran the worktree with the blob, and the commit did not contain it. Real `ChatOpenAI`
over HTTP against the scripted mock server, real git worktrees and store: a git control file is refused as an
edit by every tool, and a candidate whose worktree holds a file git ignores is refused at submit (a
classified outcome, its worktree restored), whichever route the files came by; a new file git does not
ignore is committed and counted.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from llm_session import fake_session
from mock_openai import MockOpenAI

from agent.policies.llm import propose_with_llm
from harness.manifest import load_harness

pytestmark = pytest.mark.llm
REWARD = (
    "from pathlib import Path\n\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    exec(Path(__file__).with_name('diagnostics').joinpath('blob.bin').read_text())\n    return 0.0\n"
)


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def _call(cid: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": cid, "name": name, "arguments": args}


def _open(cid: str, slug: str, factor: str = "reward") -> dict[str, Any]:
    return {"tool_calls": [_call(cid, "create_candidate", slug=slug, factors=[factor],
                                 hypothesis="If the reward changes, strict accuracy rises.",
                                 success_criterion="strict held-out accuracy above the control")]}  # fmt: skip


def _run(ctx: Any, state: dict[str, Any], script: list[Any]) -> tuple[MockOpenAI, Any]:
    with MockOpenAI(script) as mock, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", mock.base_url)
        outcome = propose_with_llm(ctx, state, load_harness(Path(state["harness_dir"])))
    return mock, outcome


def _worktree(ctx: Any, state: dict[str, Any], k: int, slug: str) -> Path:
    sid = state["session_id"]
    return ctx.session_dir(sid) / "worktrees" / sid / f"v{state['iteration']}.{k}-{slug}"


def test_git_control_files_are_refused_by_every_editing_tool(tmp_path: Path, git_available: None) -> None:
    ctx, state = fake_session(tmp_path, max_candidates=1)
    new_file = "diff --git a/{p} b/{p}\nnew file mode 100644\n--- /dev/null\n+++ b/{p}\n@@ -0,0 +1 @@\n+*.bin\n"
    script = [
        _open("open", "control"),
        {"tool_calls": [
            _call("ignore", "write_file", path="harness/diagnostics/.gitignore", content="*.bin\n"),
            _call("attrs", "write_file", path="harness/.gitattributes", content="*.py -diff\n"),
            _call("modules", "apply_patch", diff=new_file.format(p="harness/.gitmodules")),
            _call("patch", "apply_patch", diff=new_file.format(p="harness/x/.gitignore")),
        ]},
        {"tool_calls": [_call("done", "finish", summary="nothing")]},
    ]  # fmt: skip
    mock, outcome = _run(ctx, state, script)
    for cid in ("ignore", "attrs", "modules", "patch"):
        reply = mock.reply_to(cid)[1]
        assert reply.startswith("ERROR:") and ".gitignore, .gitattributes or .gitmodules" in reply, (cid, reply)
    wt = _worktree(ctx, state, 1, "control")
    for made in ("harness/diagnostics", "harness/.gitattributes", "harness/.gitmodules", "harness/x"):
        assert not os.path.lexists(wt / made), made
    assert outcome.candidates[0]["status"] == "refused"


def test_a_file_git_ignores_refuses_the_candidate_at_submit_and_nothing_of_it_stays(
    tmp_path: Path, git_available: None
) -> None:
    ctx, state = fake_session(tmp_path, max_candidates=1)
    wt = _worktree(ctx, state, 1, "blob")

    def plant(_body: dict[str, Any]) -> dict[str, Any]:
        """Another route (candidate code in the process sandbox) leaves an ignore rule and the hidden blob."""
        (wt / "harness" / "diagnostics").mkdir()
        (wt / "harness" / "diagnostics" / ".gitignore").write_text("*.bin\n")
        (wt / "harness" / "diagnostics" / "blob.bin").write_text("print('the real reward')\n")
        return {"tool_calls": [_call("write", "write_file", path="harness/reward.py", content=REWARD),
                               _call("backtest", "request_backtest")]}  # fmt: skip

    script = [_open("open", "blob"), plant, {"tool_calls": [_call("submit", "submit_candidate", title="t")]}]
    mock, outcome = _run(ctx, state, script)
    assert mock.reply_to("write")[1].startswith("wrote harness/reward.py")
    backtest = mock.reply_to("backtest")[1]
    assert backtest.startswith("ERROR:") and "harness/diagnostics/blob.bin" in backtest  # nothing unreviewed runs
    submitted = mock.reply_to("submit")[1]
    assert submitted.startswith("REFUSED:") and "harness/diagnostics/blob.bin" in submitted, submitted
    assert "ignored by git" in submitted
    (cand,) = outcome.candidates
    assert cand["status"] == "refused" and "blob.bin" in cand["reason"]
    for made in ("harness/diagnostics/blob.bin", "harness/diagnostics/.gitignore"):
        assert not os.path.lexists(wt / made), made  # restored to its base commit
    root = Path(state["harness_dir"])
    assert (wt / "harness" / "reward.py").read_text() == (root / "harness" / "reward.py").read_text()


def test_an_ignore_rule_outside_the_harness_files_still_refuses_what_it_hides(
    tmp_path: Path, git_available: None
) -> None:
    """An ignore rule in git's own folders (``info/exclude``) hides a file as well as a ``.gitignore`` would."""
    from git import Repo

    ctx, state = fake_session(tmp_path, max_candidates=1)
    wt = _worktree(ctx, state, 1, "exclude")

    def plant(_body: dict[str, Any]) -> dict[str, Any]:
        exclude = Path(Repo(wt).git.rev_parse("--git-common-dir"))
        exclude = exclude if exclude.is_absolute() else wt / exclude
        (exclude / "info").mkdir(exist_ok=True)
        (exclude / "info" / "exclude").write_text("*.bin\n")
        (wt / "harness" / "blob.bin").write_text("print('the real reward')\n")
        return {"tool_calls": [_call("write", "write_file", path="harness/reward.py", content=REWARD)]}

    script = [_open("open", "exclude"), plant, {"tool_calls": [_call("submit", "submit_candidate", title="t")]}]
    mock, outcome = _run(ctx, state, script)
    assert "harness/blob.bin" in mock.reply_to("submit")[1]
    assert outcome.candidates[0]["status"] == "refused"
    assert not os.path.lexists(wt / "harness" / "blob.bin")


def test_a_new_file_git_sees_is_committed_and_counted(tmp_path: Path, git_available: None) -> None:
    from git import Repo

    ctx, state = fake_session(tmp_path, max_candidates=1)
    wt = _worktree(ctx, state, 1, "seen")

    def plant(_body: dict[str, Any]) -> dict[str, Any]:
        (wt / "harness" / "diagnostics").mkdir()
        (wt / "harness" / "diagnostics" / "helper.py").write_text("BONUS = 0.0\n")
        return {"tool_calls": [_call("submit", "submit_candidate", title="a helper")]}

    mock, outcome = _run(ctx, state, [_open("open", "seen", "diagnostic"), plant])
    assert mock.reply_to("submit")[1].startswith("submitted"), mock.reply_to("submit")[1]
    (cand,) = outcome.candidates
    files = Repo(wt).git.show("--name-only", "--format=", cand["commit"]).split()
    assert files == ["harness/diagnostics/helper.py"]


def test_bytecode_caches_are_dropped_before_the_checks_never_committed(tmp_path: Path, git_available: None) -> None:
    """A cached ``.pyc`` runs in place of its source when its stamps match: derived, unreviewed, so dropped."""
    from git import Repo

    ctx, state = fake_session(tmp_path, max_candidates=1)
    wt = _worktree(ctx, state, 1, "cache")

    def plant(_body: dict[str, Any]) -> dict[str, Any]:
        for folder in ("harness/__pycache__", "harness/diagnostics/__pycache__"):
            (wt / folder).mkdir(parents=True)
            (wt / folder / "reward.cpython-311.pyc").write_bytes(b"\x00planted bytecode")
        (wt / "harness" / "diagnostics" / "probe.py").write_text("X = 1\n")
        return {"tool_calls": [_call("submit", "submit_candidate", title="a probe")]}

    mock, outcome = _run(ctx, state, [_open("open", "cache", "diagnostic"), plant])
    assert mock.reply_to("submit")[1].startswith("submitted"), mock.reply_to("submit")[1]
    files = Repo(wt).git.show("--name-only", "--format=", outcome.candidates[0]["commit"]).split()
    assert files == ["harness/diagnostics/probe.py"]
    assert not (wt / "harness" / "__pycache__").exists()


def test_a_file_added_after_the_submit_fails_the_backtest_before_anything_runs(
    tmp_path: Path, git_available: None
) -> None:
    """The backtest and the pilot run the worktree: it must still be exactly the commit that was reviewed."""
    from types import SimpleNamespace

    from agent.nodes.backtest import backtest

    ctx, state = fake_session(tmp_path, max_candidates=1)
    wt = _worktree(ctx, state, 1, "late")

    def plant(_body: dict[str, Any]) -> dict[str, Any]:
        (wt / "harness" / "diagnostics").mkdir()
        (wt / "harness" / "diagnostics" / "probe.py").write_text("X = 1\n")
        return {"tool_calls": [_call("submit", "submit_candidate", title="a probe")]}

    _, outcome = _run(ctx, state, [_open("open", "late", "diagnostic"), plant])
    (cand,) = outcome.candidates
    assert cand["status"] != "refused", cand["reason"]
    (wt / ".git-info-exclude-stand-in").write_text("")  # any file the commit does not hold
    (wt / "harness" / "reward.py").write_text("def compute_score(*a, **k):\n    return 1.0\n")
    payload = {"candidate": cand, "version": state["version"], "session_id": state["session_id"],
               "iteration": 1, "harness_dir": state["harness_dir"]}  # fmt: skip
    (info,) = backtest(payload, SimpleNamespace(context=ctx))["backtests"]  # type: ignore[arg-type]
    assert info["outcome"] == "candidate_error" and info["verdict"] == "fail"
    assert "harness/reward.py" in info["reasons"][0] and ".git-info-exclude-stand-in" in info["reasons"][0]
