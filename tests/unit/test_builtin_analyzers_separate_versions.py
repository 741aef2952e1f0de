"""The upgrade step's built-in analyzers explain a stall the report's alerts do not.

They compare response texts inside groups (shingle distance, distinct answers), too costly for every report,
and are trusted only when they separate the session's kept versions from its rejected ones, like a
harness's own analyzer; the report's explanatory metrics are validated the same way.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.adapters.analyzers import run_builtin_analyzers
from diagnostics.analyzers import builtin_metrics, jaccard_distance, shingles
from diagnostics.schema import Rollout, write_rollouts
from harness.answers import AnswerProtocol

ANSWER = AnswerProtocol(pattern="<ans>(.*?)</ans>")


def _rollouts(variety: int) -> list[Rollout]:
    """4 groups of 4 samples; `variety` distinct answers per group (1 = every sample writes the same text)."""
    return [
        Rollout("r", 1, "train", f"p{g}", f"g{g}", i, "q", f"{g}+{i % variety}=<ans>{i % variety}</ans>", "0", 1.0)
        for g in range(4)
        for i in range(4)
    ]


def _run(path: Path, variety: int) -> str:
    write_rollouts(path / "rollouts" / "train" / "step_1.jsonl", _rollouts(variety))
    return str(path)


def test_text_distance_and_answer_diversity() -> None:
    assert jaccard_distance(shingles("abcd"), shingles("abcd")) == 0.0
    assert jaccard_distance(shingles("abc"), shingles("xyz")) == 1.0
    same = builtin_metrics(_rollouts(1), ANSWER)
    assert same == {"group_text_distance": 0.0, "distinct_answer_ratio": 0.25}
    varied = builtin_metrics(_rollouts(4), ANSWER)
    assert varied["distinct_answer_ratio"] == 1.0 and 0.0 < varied["group_text_distance"] < 1.0
    assert "distinct_answer_ratio" not in builtin_metrics(_rollouts(4), None)  # no protocol: not guessed
    assert builtin_metrics([], ANSWER) == {}


def test_builtin_metrics_are_used_only_when_they_separate_kept_from_rejected(tmp_path: Path) -> None:
    current = Path(_run(tmp_path / "now", 2))
    labelled = {_run(tmp_path / "k1", 4): "kept", _run(tmp_path / "k2", 3): "kept"}
    labelled |= {_run(tmp_path / "r1", 1): "rejected", _run(tmp_path / "r2", 1): "rejected"}
    reports = {d: {"identical_group_ratio": 0.0 if label == "kept" else 1.0} for d, label in labelled.items()}
    metrics, checks = run_builtin_analyzers(
        current, labelled, ANSWER, {"identical_group_ratio": 0.5, "kl_to_ref": None}, lambda d: reports[str(d)]
    )
    assert set(metrics) == {"group_text_distance", "distinct_answer_ratio"}
    assert metrics["distinct_answer_ratio"] == pytest.approx(0.5)
    assert checks["distinct_answer_ratio"]["direction"] == "higher_is_better"
    assert checks["report/identical_group_ratio"]["separates"]
    assert checks["report/identical_group_ratio"]["direction"] == "lower_is_better"
    assert "report/kl_to_ref" not in checks  # no value now: nothing to validate
    mixed = {d: ("kept" if "r1" in d or "k1" in d else "rejected") for d in labelled}
    metrics, checks = run_builtin_analyzers(current, mixed, ANSWER, {}, lambda d: reports[str(d)])
    assert metrics == {} and not checks["group_text_distance"]["separates"]


def test_the_upgrade_node_stores_every_validation_and_merges_what_separates(tmp_path: Path) -> None:
    import shutil
    import subprocess
    from types import SimpleNamespace
    from typing import Any

    from sqlalchemy import select

    from agent.adapters import ledger
    from agent.context import Context
    from agent.nodes.upgrade import upgrade_diagnostics
    from store import engine as store_engine
    from store import repository as repo
    from store.models import Case, DiagnosticMetric

    url = f"sqlite:///{tmp_path / 'store.db'}"
    store_engine.upgrade(url)
    harness = tmp_path / "harness"  # the session's repository: the nodes act only on the store's record of it
    shutil.copytree(Path(__file__).resolve().parents[2] / "examples" / "arithmetic-oracle", harness)
    for cmd in (["init", "-q"], ["add", "-A"], ["-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "v0"]):
        subprocess.run(["git", "-C", str(harness), *cmd], check=True, capture_output=True)
    head = subprocess.run(["git", "-C", str(harness), "rev-parse", "HEAD"], check=True, capture_output=True, text=True)
    with ledger.db(url) as db:
        repo.create_session(db, session_id="s", harness_path="/h", repo_path=str(harness), max_iterations=1,
                            max_train_steps=1, main_branch="main")  # fmt: skip
    runs_dir = Context(workdir=str(tmp_path)).session_dir("s") / "runs"  # run folders lie in the session's own
    runs = {"k1": 4, "k2": 3, "r1": 1, "r2": 1}
    pilots = [{"run_dir": _run(runs_dir / n, v), "candidate_id": n, "outcome": "ok"} for n, v in runs.items()]
    candidates = [{"id": n, "status": "merged" if n.startswith("k") else "reverted"} for n in runs]
    state: Any = {
        "session_id": "s",
        "harness_dir": str(harness),
        "version": {"run_dir": _run(runs_dir / "now", 2), "commit": head.stdout.strip()},
        "report": {"metrics": {"strict_acc": 0.5}},
        "candidates": candidates,
        "pilots": pilots,
    }
    out = upgrade_diagnostics(state, SimpleNamespace(context=Context(workdir=str(tmp_path), db_url=url)))  # type: ignore[arg-type]
    assert out["gap"] is False and out["report"]["metrics"]["distinct_answer_ratio"] == pytest.approx(0.5)
    with ledger.db(url) as db:
        stored = {m.name: m.validated for m in db.scalars(select(DiagnosticMetric))}
        assert stored["distinct_answer_ratio"] and stored["group_text_distance"]
        assert not db.scalars(select(Case)).all()  # something separates: no gap case
    rejected_only = [{**c, "status": "reverted"} for c in candidates]
    upgrade_diagnostics(
        {**state, "candidates": rejected_only}, SimpleNamespace(context=Context(workdir=str(tmp_path), db_url=url))
    )  # type: ignore[arg-type]
    with ledger.db(url) as db:
        [case] = db.scalars(select(Case)).all()  # nothing can separate without a kept version: the gap is recorded
        assert "no analyzer metric separates" in case.summary and "group_text_distance" in case.summary
