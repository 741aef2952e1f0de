"""One pilot per distinct edit: candidates that make the same edit share a content key; a live twin of the
iteration, or another proposer's earlier try that settled the edit on the same evidence, rules it out
(`agent/decisions/same_edit.py`; the real propose node is driven in
tests/integration/test_learned_skill_and_probe_pilot_one_edit.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from agent.decisions.same_edit import TRIED_EDIT, EarlierTry, case_signature, same_in_iteration, tried_before
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


def _cand(cid: str, skill: str, key: str, **more: Any) -> Any:
    return {"id": cid, "iteration": 1, "slug": skill, "skill": skill, "status": "proposed", "content_key": key,
            "base_commit": "b0", "evidence_key": "reward_pays_wrong", **more}  # fmt: skip


def test_a_live_twin_of_the_iteration_is_found_and_a_refused_one_or_another_edit_is_not() -> None:
    kept, twin = _cand("c1", "probe-kl-up", "k1"), _cand("c2", "kl-anchor", "k1")
    assert same_in_iteration(twin, [kept]) is kept
    assert same_in_iteration(twin, [{**kept, "status": "refused"}]) is None
    assert same_in_iteration(twin, [{**kept, "iteration": 0}]) is None  # an earlier iteration: `tried_before`
    assert same_in_iteration(_cand("c3", "lr-down", "k2"), [kept]) is None


def test_an_earlier_try_rules_an_edit_out_only_on_the_same_evidence_when_it_settled_it() -> None:
    now = _cand("c9", "kl-anchor", "k1", iteration=2)
    before = _cand("c1", "probe-kl-up", "k1", status="reverted")
    assert tried_before(now, [before], []) == EarlierTry("c1", "reverted", "the same incumbent commit")
    moved = {**before, "base_commit": "b1"}
    assert tried_before(now, [moved], []) == EarlierTry("c1", "reverted", "the same symptoms (reward_pays_wrong)")
    assert tried_before(now, [{**moved, "evidence_key": "none"}], []) is None  # other incumbent, other symptoms
    assert tried_before(now, [{**before, "status": "pruned"}], []) is None  # thin evidence: a second try is due
    assert tried_before(now, [{**before, "skill": "kl-anchor"}], []) is None  # its own retry: settled_skills
    assert tried_before(now, [{**before, "content_key": "k2"}], []) is None


def test_case_memory_rules_an_edit_out_on_the_same_symptoms_after_a_regression() -> None:
    now = _cand("c9", "kl-anchor", "k1")
    tried = _cand("sA-v1.1-probe-kl-up", "probe-kl-up", "k1")
    case = {"candidate_id": tried["id"], "outcome": "regression", "signature": case_signature({"x": 1.0}, tried)}
    assert case["signature"]["x"] == 1.0 and case["signature"][TRIED_EDIT]["tried_by"] == ["probe-kl-up"]
    found = tried_before(now, [], [case])
    assert found == EarlierTry(tried["id"], "regression", "the same symptoms (reward_pays_wrong)")
    assert tried_before(now, [], [{**case, "outcome": "insufficient"}]) is None
    assert tried_before({**now, "evidence_key": "none"}, [], [case]) is None
    assert tried_before(now, [], [{**case, "signature": {"x": 1.0}}]) is None  # a case that names no edit
    assert case_signature({"x": 1.0}, {**tried, "content_key": ""}) == {"x": 1.0}
