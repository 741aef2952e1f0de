"""A merged probe becomes a stored skill another harness retrieves first.

Session A (the arithmetic demo, domain math) stalls with symptoms no seed skill reads; the offline policy
proposes probes and the top one merges. The record step's learning code (`agent.policies.learning.learn_from_merge`,
what `record` calls on a merge) stores it as a learned skill: a trigger over documented metric names from
the signature that preceded the win, the patch as a template, provenance and one win. Session B on another
harness (the skeleton, domain sorting) with the same symptoms gets that skill as its first proposal, and
its template applies there; losses down-weight it below a competing skill. Real migrated SQLite store.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from agent.context import Context
from agent.decisions.knobs import harness_knobs
from agent.nodes.propose import offline_proposals, probe_info, probe_metrics
from agent.policies.heuristic import Proposal
from agent.policies.learning import learn_from_merge
from agent.state import CandidateInfo, DecisionInfo, State
from harness.manifest import Harness, load_harness
from skills.models import SkillSpec
from skills.patches import apply_skill
from skills.repository import list_skills, record_result, record_use, save_skill, seed_skills
from skills.triggers import parse
from store import engine as store_engine
from store import models
from store import repository as store_repo

ROOT = Path(__file__).resolve().parents[2]
STALLED = {"strict_acc_delta": 0.0, "ppo_kl_max": 0.0001, "identical_group_ratio": 0.8, "dead_group_ratio": 0.1}


def _harness(tmp: Path, name: str) -> Harness:
    shutil.copytree(ROOT / "examples" / name, tmp / name)
    return load_harness(tmp / name)


def _propose(ctx: Context, harness: Harness) -> list[Proposal]:
    knobs = harness_knobs(harness, "local")
    return offline_proposals(ctx, harness, knobs, probe_metrics(STALLED, harness, knobs), set())


def _session(db: Session, sid: str, harness: Harness) -> int:
    store_repo.create_session(db, session_id=sid, harness_path=str(harness.root), repo_path=str(harness.root),
                              max_iterations=3, max_train_steps=100, main_branch=f"evo/{sid}/main")  # fmt: skip
    return store_repo.add_version(db, session_id=sid, branch=f"evo/{sid}/main", commit_sha="a" * 40).id


def _candidate(db: Session, sid: str, version: int, proposal: Proposal, k: int = 1) -> CandidateInfo:
    cid = store_repo.candidate_id(sid, 0, k, proposal.slug)
    store_repo.add_candidate(db, candidate_id=cid, session_id=sid, parent_version_id=version, iteration=1,
                             slug=proposal.slug, branch=f"evo/{sid}/v0.{k}-{proposal.slug}", worktree_path="/w",
                             hypothesis=proposal.hypothesis, factor=proposal.factors[0],  # type: ignore[arg-type]
                             success_criterion=proposal.success_criterion)  # fmt: skip
    info = CandidateInfo(id=cid, iteration=1, slug=proposal.slug, branch="", worktree="", commit="b" * 40,
                         hypothesis=proposal.hypothesis, factor=proposal.factors[0], factors=list(proposal.factors),
                         justification="", success_criterion=proposal.success_criterion,
                         skill=",".join(s.name for s in proposal.skills), status="merged", reason="")  # fmt: skip
    probe = probe_info(proposal)
    if probe is not None:
        info["probe"] = probe
    return info


def test_a_merged_probe_is_learned_and_retrieved_first_on_another_harness(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store_engine.upgrade(url)
    engine = store_engine.make_engine(url)
    ctx = Context(workdir=str(tmp_path), db_url=url, max_candidates=3)
    with Session(engine) as db:
        seed_skills(db)
        db.commit()
    arithmetic, skeleton = _harness(tmp_path, "arithmetic"), _harness(tmp_path, "skeleton")
    assert arithmetic.manifest.domain != skeleton.manifest.domain
    before_b = _propose(ctx, skeleton)
    assert before_b and all(p.probe is not None for p in before_b)  # nothing stored explains this yet

    # session A: the top probe merges; the record step learns from it
    probes = _propose(ctx, arithmetic)
    top = probes[0]
    assert top.probe is not None and top.probe.learned_trigger
    winner = DecisionInfo(candidate_id="", decision="merge", outcome="improvement", delta=0.08, ci_low=0.02,
                          ci_high=0.14, train_gain=0.1, rationale="replicated")  # fmt: skip
    with Session(engine) as db:
        cand = _candidate(db, "sa", _session(db, "sa", arithmetic), top)
        winner["candidate_id"] = cand["id"]
        state: Any = {"session_id": "sa", "harness_dir": str(arithmetic.root), "report": {"metrics": STALLED}}
        name = learn_from_merge(db, ctx, State(**state), cand, winner, 1)
        db.commit()
    assert name is not None and name.startswith("learned-")
    with Session(engine) as db:
        (learned,) = [r for r in list_skills(db) if r.spec.name == name]
    assert learned.origin == "learned" and learned.source_candidate_id == cand["id"]
    assert (learned.wins, learned.losses, learned.uses) == (1, 0, 1)
    trigger = parse(learned.spec.trigger)
    assert learned.spec.trigger == top.probe.learned_trigger
    assert {"strict_acc_delta", "identical_group_ratio", "ppo_kl_max"} <= trigger.names
    assert learned.spec.patch == top.skill.patch and learned.spec.patch_kind == "template"
    assert "current" in json.loads(learned.spec.patch)[0]["value"]  # relative to the harness it lands in
    assert "session sa" in learned.spec.provenance and cand["id"] in learned.spec.provenance
    assert top.probe.probe_id in learned.spec.provenance and "+0.080" in learned.spec.provenance
    assert learned.spec.domain == "math" and learned.spec.applies_to("sorting")

    # session B, another harness and domain, same symptoms: the learned skill comes first, ahead of a
    # competing skill on the same trigger that has no wins
    lr_up = [{"op": "set_yaml_key", "file": "@trainer_config", "key": "lr", "value": "{{ current * 2 }}"}]
    rival = SkillSpec(name="rival-lr-up", domain="math", trigger=learned.spec.trigger, factor="trainer",
                      patch_kind="template", applicability=("*",), expected_outcome="strict up",
                      validation_rule="strict up", patch=json.dumps(lr_up))  # fmt: skip
    with Session(engine) as db:
        save_skill(db, rival)
        db.commit()
    first = _propose(ctx, skeleton)[0]
    assert first.from_skill and first.probe is None and first.skill.name == name
    work = tmp_path / "b-worktree"
    shutil.copytree(skeleton.root, work)
    apply_skill(first.skill, work, skeleton, metrics=STALLED)
    cfg = yaml.safe_load((work / skeleton.manifest.trainer.config).read_text())
    before = yaml.safe_load(skeleton.path(skeleton.manifest.trainer.config).read_text())
    key = json.loads(first.skill.patch)[0]["key"]
    assert cfg[key] != before.get(key) and {k: v for k, v in cfg.items() if k != key} == {
        k: v for k, v in before.items() if k != key
    }

    # losses down-weight it like any skill: the unproven rival overtakes it
    with Session(engine) as db:
        version = _session(db, "sb", skeleton)
        for k in (1, 2):
            cid = _candidate(db, "sb", version, first, k)["id"]
            record_result(db, record_use(db, name, "sb", cid, {"strict_delta": -0.03}), win=False)
        db.commit()
        row = db.scalars(select(models.Skill).where(models.Skill.name == name)).one()
        assert (row.wins, row.losses) == (1, 2)
    assert _propose(ctx, skeleton)[0].skill.name == "rival-lr-up"
