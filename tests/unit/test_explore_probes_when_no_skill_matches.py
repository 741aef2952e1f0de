"""When no skill matches and held-out accuracy stalls, the offline policy still proposes probes.

Single-factor probes over the harness's declared knobs, ranked by the abnormal health metrics they address,
each with a written hypothesis; a probe that case memory says was tried on the same symptoms is not
proposed again (a real migrated SQLite store, the demo harness's real files).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from seeded_store import seeded_store
from sqlalchemy.orm import Session

from agent.context import Context
from agent.decisions.knobs import harness_knobs
from agent.nodes.propose import offline_proposals, probe_metrics
from agent.policies.explore import SYMPTOMS
from harness.manifest import Harness, load_harness
from store import engine as store_engine
from store import repository as store_repo
from trainer_backend.knobs import declared_knobs
from trainer_backend.local.config import LocalTrainerConfig

ROOT = Path(__file__).resolve().parents[2]
# A stall with collapsed within-group diversity and updates that barely move the policy: no seed skill's
# trigger reads these, so only exploration can propose anything.
STALLED = {"strict_acc_delta": 0.0, "ppo_kl_max": 0.0001, "identical_group_ratio": 0.8, "dead_group_ratio": 0.1}
SIGNATURE = "no_diversity+tiny_updates"


@pytest.fixture
def store(tmp_path: Path) -> tuple[Context, str]:
    url = seeded_store(tmp_path)
    return Context(workdir=str(tmp_path), db_url=url, max_candidates=4), url


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    shutil.copytree(ROOT / "examples" / "arithmetic", tmp_path / "arithmetic")
    return load_harness(tmp_path / "arithmetic")


def _propose(ctx: Context, harness: Harness, report: dict[str, Any], tried: set[str] | None = None) -> list[Any]:
    knobs = harness_knobs(harness, "local")
    return offline_proposals(ctx, harness, knobs, probe_metrics(report, harness, knobs), tried or set())


def _forget(url: str, probe_id: str, outcome: str, signature: str = SIGNATURE) -> None:
    with Session(store_engine.make_engine(url)) as db:
        store_repo.add_case(db, session_id="s0", kind="negative_evidence", domain="math", summary=f"{probe_id} lost",
                            signature=STALLED, outcome=outcome, intervention=probe_id,  # type: ignore[arg-type]
                            symptom_key=signature)  # fmt: skip
        db.commit()


def test_stall_without_a_matching_skill_gets_ranked_single_factor_probes(
    store: tuple[Context, str], harness: Harness
) -> None:
    ctx, _ = store
    props = _propose(ctx, harness, STALLED)
    assert props and all(p.probe is not None and not p.from_skill for p in props)
    safe = {k.key: k for k in declared_knobs(LocalTrainerConfig)}
    weight = {s.name: s.weight for s in SYMPTOMS}
    for p in props:
        ops = json.loads(p.skill.patch)
        assert len(ops) == 1 and len(p.factors) == 1, p.slug  # one knob, one factor
        assert p.probe.symptom_key == SIGNATURE
        assert p.probe.symptoms and set(p.probe.symptoms) <= {"no_diversity", "tiny_updates"}
        assert p.probe.score == sum(weight[s] for s in p.probe.symptoms)
        assert p.hypothesis.startswith("If we ") and "because" in p.hypothesis
        named = {"no_diversity": "identical_group_ratio=0.8", "tiny_updates": "ppo_kl_max=0.0001"}
        assert all(named[s] in p.hypothesis for s in p.probe.symptoms), p.hypothesis
        key = ops[0]["key"]
        assert ops[0]["op"] == "set_yaml_key" and key in safe
        assert "safe_min" in ops[0]["value"] and p.skill.params["safe_max"] == safe[key].safe_max
    scores = [p.probe.score for p in props]
    assert scores == sorted(scores, reverse=True)
    # the move addressing both abnormal symptoms ranks first; nothing shrinks updates that are already tiny
    assert props[0].probe.probe_id == "trainer:clip_high:up:m0" and props[0].probe.score == 4.0
    assert not any(":down:" in p.probe.probe_id for p in props)
    assert len({json.loads(p.skill.patch)[0]["key"] for p in props}) == len(props)  # one probe per knob


def test_no_probe_without_a_stall_or_when_a_skill_matches(store: tuple[Context, str], harness: Harness) -> None:
    ctx, _ = store
    assert _propose(ctx, harness, {**STALLED, "strict_acc_delta": 0.1}) == []
    assert _propose(ctx, harness, {k: v for k, v in STALLED.items() if k != "strict_acc_delta"}) == []
    matched = _propose(ctx, harness, {**STALLED, "ppo_kl_max": 0.05})  # the seed stabilise skill's trigger
    assert matched and all(p.from_skill and p.probe is None for p in matched)


def test_case_memory_keeps_a_probe_from_being_repeated_blindly(store: tuple[Context, str], harness: Harness) -> None:
    ctx, url = store
    first = [p.probe.probe_id for p in _propose(ctx, harness, STALLED)]
    assert "trainer:clip_high:up:m0" in first and "trainer:lr:up:m0" in first
    _forget(url, "trainer:clip_high:up:m0", "insufficient")
    _forget(url, "trainer:lr:up:m0", "insufficient")
    again = [p.probe.probe_id for p in _propose(ctx, harness, STALLED)]
    assert "trainer:clip_high:up:m0" not in again and "trainer:lr:up:m0" not in again
    assert "trainer:lr:up:m1" in again  # thin evidence: the next magnitude of the same move
    # a move that regressed is not pushed further
    _forget(url, "trainer:group_size:up:m0", "regression")
    later = [p.probe.probe_id for p in _propose(ctx, harness, STALLED)]
    assert not any(pid.startswith("trainer:group_size:up") for pid in later)
    # the memory is per symptom signature: on other symptoms the same probe is a fresh idea
    other = {**STALLED, "identical_group_ratio": 0.1}
    assert "trainer:lr:up:m0" in [p.probe.probe_id for p in _propose(ctx, harness, other)]
    # and a probe this session settled is not proposed again either
    settled = _propose(ctx, harness, STALLED, tried={"probe-lr-up-x4"})
    assert "trainer:lr:up:m1" not in [p.probe.probe_id for p in settled]


def test_a_probe_whose_backtest_failed_is_filed_and_not_proposed_again(
    store: tuple[Context, str], harness: Harness
) -> None:
    """`record` files a failed probe with `learning.probe_case` (outcome regression: not pushed further)."""
    from agent.nodes.propose import probe_info
    from agent.policies.learning import probe_case, probe_fields
    from agent.state import CandidateInfo

    ctx, url = store
    lr = next(p for p in _propose(ctx, harness, STALLED) if p.probe and p.probe.probe_id == "trainer:lr:up:m0")
    info = probe_info(lr)
    assert info is not None and info["symptom_key"] == SIGNATURE
    with Session(store_engine.make_engine(url)) as db:
        version = store_repo.add_version(db, session_id="s0", branch="evo/s0/main", commit_sha="a" * 40).id
        cid = store_repo.candidate_id("s0", 0, 1, lr.slug)
        store_repo.add_candidate(db, candidate_id=cid, session_id="s0", parent_version_id=version, iteration=1,
                                 slug=lr.slug, branch=f"evo/s0/{lr.slug}", worktree_path="/w", hypothesis=lr.hypothesis,
                                 factor="trainer", success_criterion=lr.success_criterion)  # fmt: skip
        cand = CandidateInfo(id=cid, iteration=1, slug=lr.slug, branch="", worktree="", commit="", hypothesis="",
                             factor="trainer", factors=["trainer"], justification="", success_criterion="",
                             skill=lr.skill.name, status="backtest_failed", reason="", probe=info)  # fmt: skip
        assert probe_fields(cand) == {"intervention": "trainer:lr:up:m0", "symptom_key": SIGNATURE}
        state: Any = {"session_id": "s0", "harness_dir": str(harness.root), "report": {"metrics": STALLED}}
        probe_case(db, state, cand, f"{cid}: backtest failed: predicted harmful")
        probe_case(db, state, cand, f"{cid}: backtest failed: predicted harmful")  # a re-run node files it once
        db.commit()
        assert store_repo.tried_interventions(db, "math") == [("trainer:lr:up:m0", SIGNATURE, "regression")]
    again = [p.probe.probe_id for p in _propose(ctx, harness, STALLED)]
    assert not any(pid.startswith("trainer:lr:up") for pid in again)
