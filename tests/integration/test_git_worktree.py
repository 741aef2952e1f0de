"""Session repository, candidate branches in worktrees, surface refusal, patches, merges (real git)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.manifest import load_harness
from sandboxes import git_worktree as gw
from sandboxes import worktree_files as wf

DEMO = Path(__file__).resolve().parents[2] / "examples" / "arithmetic"
pytestmark = pytest.mark.usefixtures("git_available")


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def session(tmp_path: Path):  # type: ignore[no-untyped-def]
    repo = gw.init_session_repo(DEMO, tmp_path / "repo")
    main = gw.create_session_branch(repo, "s1")
    return repo, main, load_harness(tmp_path / "repo"), tmp_path / "wt"


def test_init_copies_harness_into_fresh_repo_with_v0_commit(tmp_path: Path) -> None:
    repo = gw.init_session_repo(DEMO, tmp_path / "repo")
    root = tmp_path / "repo"
    assert _git(root, "log", "--format=%s") == gw.INITIAL_COMMIT_MESSAGE
    assert (root / "evotrainer.yaml").is_file() and (root / "harness/reward.py").is_file()
    assert _git(root, "status", "--porcelain") == ""
    again = gw.init_session_repo(DEMO, root)  # idempotent: dest already a repo
    assert again.head.commit.hexsha == repo.head.commit.hexsha


def test_init_uses_existing_harness_repo_in_place(tmp_path: Path) -> None:
    first = gw.init_session_repo(DEMO, tmp_path / "own")
    reused = gw.init_session_repo(tmp_path / "own", tmp_path / "unused")
    assert Path(reused.working_tree_dir or "") == Path(first.working_tree_dir or "")
    assert not (tmp_path / "unused").exists()


def test_branch_names_follow_the_convention_and_reject_bad_parts(session) -> None:  # type: ignore[no-untyped-def]
    repo, main, _, wt = session
    assert main == "evo/s1/main"
    assert gw.create_session_branch(repo, "s1") == main  # idempotent
    cand = gw.create_candidate(repo, "s1", 0, 1, "strict-reward", main, wt)
    assert cand.branch == "evo/s1/v0.1-strict-reward"
    assert cand.path == (wt / "s1" / "v0.1-strict-reward").resolve()
    assert cand.base_sha == _git(Path(repo.working_tree_dir or ""), "rev-parse", main)
    for bad in ("Strict Reward", "../x", "a" * 60, ""):
        with pytest.raises(gw.BranchNameError):
            gw.candidate_branch("s1", 0, 1, bad)
    with pytest.raises(gw.BranchNameError):
        gw.session_main_branch("bad..id")


def test_create_candidate_is_idempotent_and_remembers_its_base(session) -> None:  # type: ignore[no-untyped-def]
    repo, main, harness, wt = session
    first = gw.create_candidate(repo, "s1", 0, 1, "strict-reward", main, wt)
    assert gw.create_candidate(repo, "s1", 0, 1, "strict-reward", main, wt) == first
    # main moves on (another candidate merged); the candidate keeps its original base
    other = gw.create_candidate(repo, "s1", 0, 2, "budget", main, wt)
    wf.write_file(other.path, "harness/trainer.yaml", "lr: 1.0\n", harness)
    gw.commit_candidate(other.path, "edit")
    gw.merge_candidate(repo, main, other.branch, "v1: merge budget")
    # worktree removed (e.g. after a crash): re-creating re-attaches the branch, same base
    gw.remove_worktree(repo, first.path)
    again = gw.create_candidate(repo, "s1", 0, 1, "strict-reward", main, wt)
    assert again.branch == first.branch and again.base_sha == first.base_sha
    assert again.path.is_dir()


def test_write_file_refuses_paths_off_the_editable_surface(session) -> None:  # type: ignore[no-untyped-def]
    repo, main, harness, wt = session
    cand = gw.create_candidate(repo, "s1", 0, 1, "x", main, wt)
    for rel, words in [
        ("eval/strict.py", "protected"),
        ("evotrainer.yaml", "protected"),
        ("data/val.jsonl", "protected"),
        ("data/train.jsonl", "outside the editable surface"),
        ("../escape.py", "not a relative path"),
        ("/etc/passwd", "not a relative path"),
    ]:
        with pytest.raises(gw.SurfaceError, match=words) as info:
            wf.write_file(cand.path, rel, "x", harness)
        assert rel in str(info.value) and "harness/" in str(info.value)
    assert _git(cand.path, "status", "--porcelain") == ""
    wf.write_file(cand.path, "harness/new_helper.py", "X = 1\n", harness)
    assert wf.changed_files(cand.path, cand.base_sha) == ["harness/new_helper.py"]


def test_patch_that_does_not_apply_raises_patch_error_with_gits_reason(session) -> None:  # type: ignore[no-untyped-def]
    repo, main, _, wt = session
    cand = gw.create_candidate(repo, "s1", 0, 1, "x", main, wt)
    stale = (
        "diff --git a/harness/trainer.yaml b/harness/trainer.yaml\n"
        "--- a/harness/trainer.yaml\n+++ b/harness/trainer.yaml\n"
        "@@ -5 +5 @@\n-max_new_tokens: 999\n+max_new_tokens: 64\n"
    )
    with pytest.raises(gw.PatchError, match="patch does not apply") as info:
        wf.apply_patch(cand.path, stale)
    assert "harness/trainer.yaml" in info.value.detail
    with pytest.raises(gw.PatchError, match="empty patch"):
        wf.apply_patch(cand.path, "  \n")
    assert wf.changed_files(cand.path, cand.base_sha) == []


def test_patch_roundtrip_and_surface_check_on_patches(session) -> None:  # type: ignore[no-untyped-def]
    repo, main, harness, wt = session
    a = gw.create_candidate(repo, "s1", 0, 1, "a", main, wt)
    text = (a.path / "harness/trainer.yaml").read_text().replace("max_new_tokens: 16", "max_new_tokens: 48")
    wf.write_file(a.path, "harness/trainer.yaml", text, harness)
    patch = wf.diff(a.path, a.base_sha)
    assert "+max_new_tokens: 48" in patch
    b = gw.create_candidate(repo, "s1", 0, 2, "b", main, wt)
    assert wf.apply_patch(b.path, patch, harness=harness) == ["harness/trainer.yaml"]
    assert "max_new_tokens: 48" in (b.path / "harness/trainer.yaml").read_text()
    c = gw.create_candidate(repo, "s1", 0, 3, "c", main, wt)
    evil = patch.replace("harness/trainer.yaml", "eval/strict.py")
    with pytest.raises(gw.SurfaceError, match=r"eval/strict\.py"):
        wf.apply_patch(c.path, evil, harness=harness)


def test_commit_message_carries_structured_trailers(session) -> None:  # type: ignore[no-untyped-def]
    repo, main, harness, wt = session
    cand = gw.create_candidate(repo, "s1", 0, 1, "x", main, wt)
    with pytest.raises(gw.NothingToCommitError):
        gw.commit_candidate(cand.path, "nothing")
    wf.write_file(cand.path, "harness/reward.py", "def compute_score(*a, **k):\n    return 0.0\n", harness)
    msg = gw.InterventionMessage(
        title="strict reward",
        hypothesis="If the reward only credits the final tagged answer,\nstrict_acc rises because spam stops paying",
        factor="reward",
        success_criterion="strict_acc_delta > 0 and reward_hacking == 0",
        extra={"Skill": "strict-answer-extraction"},
    )
    sha = gw.commit_candidate(cand.path, msg)
    text = gw.commit_message(repo, sha)
    assert text.splitlines()[0] == "strict reward"
    trailers = gw.parse_trailers(text)
    assert trailers["Factor"] == "reward"
    assert trailers["Hypothesis"].startswith("If the reward only credits the final tagged answer, strict_acc")
    assert trailers["Success-Criterion"] == "strict_acc_delta > 0 and reward_hacking == 0"
    assert trailers["Skill"] == "strict-answer-extraction"
    assert wf.changed_files(cand.path, cand.base_sha) == ["harness/reward.py"]


def test_decision_note_merge_and_branch_kept_after_worktree_removal(session) -> None:  # type: ignore[no-untyped-def]
    repo, main, harness, wt = session
    root = Path(repo.working_tree_dir or "")
    win = gw.create_candidate(repo, "s1", 0, 1, "win", main, wt)
    lose = gw.create_candidate(repo, "s1", 0, 2, "lose", main, wt)
    wf.write_file(win.path, "harness/data.yaml", "level_weights: {2: 0.5, 3: 0.5}\n", harness)
    gw.commit_candidate(win.path, "data mix")
    wf.write_file(lose.path, "harness/trainer.yaml", "lr: 9.0\n", harness)
    lose_sha = gw.commit_candidate(lose.path, "huge lr")

    note = gw.amend_decision_note(repo, lose.branch, "prune: strict_acc -0.08\nloss diverged", decision="prune")
    assert gw.amend_decision_note(repo, lose.branch, "prune: strict_acc -0.08\nloss diverged", decision="prune") == note
    assert _git(root, "log", "-1", "--format=%s", lose.branch) == "decision: prune: strict_acc -0.08"
    assert _git(root, "rev-parse", f"{note}^") == lose_sha
    assert _git(lose.path, "status", "--porcelain") == ""  # checked-out worktree stays clean

    merged = gw.merge_candidate(repo, main, win.branch, "v1: merge data mix")
    assert gw.merge_candidate(repo, main, win.branch, "v1: merge data mix") == merged  # idempotent
    assert _git(root, "log", "-1", "--format=%s", main) == "v1: merge data mix"
    assert _git(root, "show", f"{main}:harness/data.yaml") == "level_weights: {2: 0.5, 3: 0.5}"
    assert len(_git(root, "rev-list", "--parents", "-1", main).split()) == 3  # a merge commit

    gw.remove_worktree(repo, lose.path)
    gw.remove_worktree(repo, lose.path)  # idempotent
    assert not lose.path.exists()
    assert lose.branch in gw.branches(repo, "s1")  # negative evidence stays
    assert _git(root, "rev-parse", lose.branch) == note


def test_merge_conflict_is_typed_and_dirty_worktree_is_protected(session) -> None:  # type: ignore[no-untyped-def]
    repo, main, harness, wt = session
    a = gw.create_candidate(repo, "s1", 0, 1, "a", main, wt)
    b = gw.create_candidate(repo, "s1", 0, 2, "b", main, wt)
    for cand, lr in ((a, "1.0"), (b, "2.0")):
        wf.write_file(cand.path, "harness/trainer.yaml", f"lr: {lr}\n", harness)
        gw.commit_candidate(cand.path, f"lr {lr}")
    gw.merge_candidate(repo, main, a.branch, "v1")
    with pytest.raises(gw.MergeConflictError, match=r"harness/trainer\.yaml"):
        gw.merge_candidate(repo, main, b.branch, "v2")
    wf.write_file(b.path, "harness/reward.py", "x = 1\n", harness)
    with pytest.raises(gw.WorktreeDirtyError):
        gw.remove_worktree(repo, b.path)
    gw.remove_worktree(repo, b.path, force=True)
    assert b.branch in gw.branches(repo, "s1")


def test_fast_forward_merge_when_requested(session) -> None:  # type: ignore[no-untyped-def]
    repo, main, harness, wt = session
    a = gw.create_candidate(repo, "s1", 0, 1, "a", main, wt)
    wf.write_file(a.path, "harness/trainer.yaml", "lr: 1.0\n", harness)
    sha = gw.commit_candidate(a.path, "lr")
    assert gw.merge_candidate(repo, main, a.branch, "unused", no_ff=False) == sha
