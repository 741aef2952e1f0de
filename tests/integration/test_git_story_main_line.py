"""The git adapter writes a readable story (real git, no training).

Every commit subject is at most 72 characters with the whole text kept in the body; a version that keeps the
incumbent harness is its own (empty) main-line commit; versions are tagged; main-line commits are dated
after every branch tip, so `git log --graph --all` draws the newest version on top.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from harness.manifest import load_harness
from sandboxes import git_versions as gv
from sandboxes import git_worktree as gw
from sandboxes import worktree_files as wf

DEMO = Path(__file__).resolve().parents[2] / "examples" / "arithmetic"
LONG = (
    "strict-answer-extraction: rewarded_wrong_rate falls to ~0 and the reward_hacking alarm clears; training "
    "reward tracks strict_acc again; strict_acc holds or rises within the next version"
)
pytestmark = pytest.mark.usefixtures("git_available")


def _git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    full = {**os.environ, **(env or {})}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=full).stdout.strip()


@pytest.fixture
def session(tmp_path: Path):  # type: ignore[no-untyped-def]
    repo = gw.init_session_repo(DEMO, tmp_path / "repo")
    main = gw.create_session_branch(repo, "s1")
    return repo, main, load_harness(tmp_path / "repo"), tmp_path / "wt", tmp_path / "repo"


def test_long_subjects_are_cut_at_a_word_and_kept_whole_in_the_body() -> None:
    text = gw.commit_text(LONG + "\n\nmore evidence")
    subject, _, body = text.partition("\n\n")
    assert len(subject) <= gw.SUBJECT_MAX and subject.endswith("…") and LONG.startswith(subject[:-1])
    assert body.startswith(LONG) and body.rstrip().endswith("more evidence")
    assert gw.commit_text("short") == "short\n"
    assert len(gw.commit_text("x" * 200).splitlines()[0]) <= gw.SUBJECT_MAX  # no space to cut at
    with pytest.raises(ValueError):
        gw.commit_text("  \n ")


def test_every_commit_writer_keeps_subjects_short_and_trailers_readable(session) -> None:  # type: ignore[no-untyped-def]
    repo, main, harness, wt, root = session
    cand = gw.create_candidate(repo, "s1", 1, 1, "strict-answer-extraction", main, wt)
    wf.write_file(cand.path, "harness/trainer.yaml", "lr: 0.5\n", harness)
    msg = gw.InterventionMessage(title=LONG, hypothesis="h " * 80, factor="reward", success_criterion="CI > 0")
    gw.commit_candidate(cand.path, msg)
    assert gw.parse_trailers(gw.commit_message(repo, cand.branch))["Factor"] == "reward"
    gw.amend_decision_note(repo, cand.branch, f"merge {LONG} (improvement)\n\nstrict up", decision="merge")
    gw.merge_candidate(repo, main, cand.branch, f"v1: merge {LONG}\n\nEvidence: strict up")
    subjects = _git(root, "log", "--all", "--format=%s").splitlines()
    assert len(subjects) == 4 and all(len(s) <= gw.SUBJECT_MAX for s in subjects), subjects
    bodies = _git(root, "log", "--all", "--format=%B")
    assert bodies.count(LONG) == 3  # the candidate, its decision and the merge keep the whole title


def test_a_continued_version_is_an_empty_tagged_commit_on_the_main_line(session) -> None:  # type: ignore[no-untyped-def]
    repo, main, _, _, root = session
    v0 = _git(root, "rev-parse", main)
    message = "v1: v0 harness trained on (no candidate beat the control)\n\nRun: s1-v1.0-control"
    sha = gv.continue_main(repo, main, message)
    assert gv.continue_main(repo, main, message) == sha  # idempotent: a re-run of `record` adds nothing
    assert _git(root, "rev-parse", f"{sha}^") == v0 and _git(root, "rev-parse", main) == sha
    assert _git(root, "diff", "--stat", v0, sha) == ""  # no file changed
    assert _git(root, "status", "--porcelain") == ""  # the checked-out main line stays clean
    assert gv.tag_version(repo, "s1", 0, v0) == "evo/s1/v0"
    assert gv.tag_version(repo, "s1", 1, sha) == gv.tag_version(repo, "s1", 1, sha) == "evo/s1/v1"
    assert _git(root, "rev-parse", "evo/s1/v1^{commit}") == sha
    with pytest.raises(gw.GitWorktreeError, match="already marks"):
        gv.tag_version(repo, "s1", 1, v0)
    with pytest.raises(gw.GitWorktreeError):
        gv.continue_main(repo, "evo/s1/nope", message)


def test_main_line_commits_are_dated_after_every_branch_tip(session) -> None:  # type: ignore[no-untyped-def]
    """A decision commit in the same second (or, with clock skew, later) never draws above the version."""
    repo, main, harness, wt, root = session
    pruned = gw.create_candidate(repo, "s1", 1, 1, "pruned", main, wt)
    wf.write_file(pruned.path, "harness/trainer.yaml", "lr: 0.5\n", harness)
    gw.commit_candidate(pruned.path, "v1.1-pruned: lr")
    ahead = str(int(time.time()) + 30)
    note = _git(root, "commit-tree", f"{pruned.branch}^{{tree}}", "-p", pruned.branch, "-m", "decision: prune",
                env={"GIT_COMMITTER_DATE": f"{ahead} +0000", "GIT_AUTHOR_DATE": f"{ahead} +0000"})  # fmt: skip
    _git(root, "update-ref", f"refs/heads/{pruned.branch}", note)
    version = gv.continue_main(repo, main, "v1: v0 harness trained on")
    assert int(_git(root, "log", "-1", "--format=%ct", version)) > int(ahead)
    assert _git(root, "log", "--graph", "--all", "--format=%H").splitlines()[0].endswith(version)
    winner = gw.create_candidate(repo, "s1", 2, 1, "winner", main, wt)
    wf.write_file(winner.path, "harness/trainer.yaml", "lr: 0.25\n", harness)
    gw.commit_candidate(winner.path, "v2.1-winner: lr")
    gw.amend_decision_note(repo, winner.branch, "merge v2.1-winner (improvement)", decision="merge")
    merged = gw.merge_candidate(repo, main, winner.branch, "v2: merge v2.1-winner")
    assert _git(root, "log", "--graph", "--all", "--format=%H").splitlines()[0].endswith(merged)
    first_parent = _git(root, "log", "--first-parent", "--format=%s", main).splitlines()
    assert first_parent == ["v2: merge v2.1-winner", "v1: v0 harness trained on", gw.INITIAL_COMMIT_MESSAGE]
