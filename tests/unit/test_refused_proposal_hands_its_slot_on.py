"""A refused proposal hands its slot to the next-ranked skill in the same iteration; slots left free explore.

The unstable-optimiser regression (benchmarks/RESULTS.md): iteration 1 matched dense-auxiliary-reward,
learnable-data-mix and stabilise-policy-updates; the data-mix patch was refused (every source dead) and, with
two slots, stabilise-policy-updates waited an iteration, by which time the collapse could no longer be rolled
back. The ranking and the skills are the real seeded store's; only the patch step is replaced by a recorder
that refuses the named skills, so the slot rule is what is tested.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

import pytest
from scenario_cache import scenario_dir
from seeded_store import seeded_store

from agent.context import Context
from agent.decisions.knobs import harness_knobs
from agent.nodes import propose as node
from agent.policies.heuristic import Proposal
from agent.state import CandidateInfo
from harness.manifest import Harness, load_harness

# The trigger metrics of the unstable-optimiser scenario's v0 report (seed 0): dead groups under a discrete
# reward, every source dead, updates far beyond a trust region and a collapsed training score.
COLLAPSE = {
    "dead_group_ratio": 0.953,
    "dead_source_share": 1.0,
    "misranked_group_rate": 0.0,
    "ppo_kl_max": 0.120,
    "reward_discrete": 1.0,
    "reward_hacking": 0.0,
    "rewarded_wrong_rate": 0.0,
    "train_score_collapse": 0.890,
    "truncation_rate": 0.001,
    "unrewarded_correct_rate": 0.0,
    "strict_acc_delta": -0.697,
}


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Context, Harness]:
    url = seeded_store(tmp_path)
    shutil.copytree(scenario_dir("unstable-optimiser", "defective"), tmp_path / "harness")
    return Context(workdir=str(tmp_path), db_url=url, max_candidates=2), load_harness(tmp_path / "harness")


def _fill(ctx: Context, harness: Harness, refuse: set[str], monkeypatch: pytest.MonkeyPatch) -> list[CandidateInfo]:
    knobs = harness_knobs(harness, "local")
    metrics = node.probe_metrics(COLLAPSE, harness, knobs)

    def materialise(ctx: Context, state: Any, harness: Harness, p: Proposal, k: int, m: Any) -> CandidateInfo:
        names = ",".join(s.name for s in p.skills)
        status = "refused" if {s.name for s in p.skills} & refuse else "proposed"
        return {"skill": names, "status": status, "factor": p.factor, "id": f"c{k}"}  # type: ignore[typeddict-item]

    def skills(out: set[str], taken: set[str]) -> list[Proposal]:
        return node._skill_proposals(ctx, harness, metrics, out, taken)

    monkeypatch.setattr(node, "_materialise", materialise)

    monkeypatch.setattr(node, "_count_use", lambda *_, **__: None)  # its skill-use record too
    return node._fill(ctx, {}, harness, metrics, skills, set(), [])


def test_a_refused_top_match_hands_its_slot_to_the_next_ranked_skill(
    setup: tuple[Context, Harness], monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx, harness = setup
    first = _fill(ctx, harness, set(), monkeypatch)
    assert len(first) == ctx.max_candidates and all(c["status"] == "proposed" for c in first)
    assert "learnable-data-mix" in {c["skill"] for c in first}  # as in the benchmark run
    refused = "learnable-data-mix"
    made = _fill(ctx, harness, {refused}, monkeypatch)
    live = [c for c in made if c["status"] != "refused"]
    assert [c["skill"] for c in made if c["status"] == "refused"] == [refused]
    assert len(live) == ctx.max_candidates, made  # the refused slot was refilled in the same iteration
    assert len({c["factor"] for c in live}) == len(live)  # still one live candidate per factor
    assert refused not in {c["skill"] for c in live}
    names = {c["skill"] for c in made}
    assert "stabilise-policy-updates" in names, names


def test_refill_stops_when_the_ranked_matches_run_dry(
    setup: tuple[Context, Harness], monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx, harness = setup
    everything = {c["skill"] for c in _fill(dataclasses.replace(ctx, max_candidates=20), harness, set(), monkeypatch)}
    made = _fill(ctx, harness, everything, monkeypatch)
    assert made and all(c["status"] == "refused" for c in made)
    assert {c["skill"] for c in made} == everything  # each tried once, then the source ran dry


def _offline(ctx: Context, harness: Harness, refuse: set[str], metrics: dict[str, Any],
             monkeypatch: pytest.MonkeyPatch) -> list[CandidateInfo]:  # fmt: skip
    def materialise(ctx: Context, state: Any, harness: Harness, p: Proposal, k: int, m: Any) -> CandidateInfo:
        status = "refused" if {s.name for s in p.skills} & refuse else "proposed"
        kind = "probe" if p.probe is not None else "skill"
        return {"skill": ",".join(s.name for s in p.skills), "status": status, "factor": p.factor, "id": kind}  # type: ignore[typeddict-item]

    monkeypatch.setattr(node, "_materialise", materialise)

    monkeypatch.setattr(node, "_count_use", lambda *_, **__: None)  # its skill-use record too
    knobs = harness_knobs(harness, "local")
    return node.offline_candidates(ctx, {}, harness, knobs, node.probe_metrics(metrics, harness, knobs), set())


def test_slots_the_skills_leave_free_explore_when_held_out_accuracy_stalled(
    setup: tuple[Context, Harness], monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx, harness = setup
    wide = dataclasses.replace(ctx, max_candidates=6)
    made = _offline(wide, harness, {"learnable-data-mix"}, COLLAPSE, monkeypatch)
    live = [c for c in made if c["status"] != "refused"]
    skills = [c for c in live if c["id"] == "skill"]
    assert skills and len(live) == wide.max_candidates  # every matching skill, then probes
    assert [c["id"] for c in live] == ["skill"] * len(skills) + ["probe"] * (len(live) - len(skills))
    assert not {c["skill"] for c in live if c["id"] == "probe"} & {c["skill"] for c in skills}


def test_without_a_stall_free_slots_only_move_settings_back_into_their_range(
    setup: tuple[Context, Harness], monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx, harness = setup  # the scenario's lr (16x the fixed harness's) and clip_high lie outside their ranges
    wide = dataclasses.replace(ctx, max_candidates=6)
    made = _offline(wide, harness, set(), {**COLLAPSE, "strict_acc_delta": 0.2}, monkeypatch)
    probes = [c["skill"] for c in made if c["id"] == "probe"]
    assert probes and all(name.endswith("-default") for name in probes), probes
    wider = dataclasses.replace(ctx, max_candidates=10)
    stalled = [c["skill"] for c in _offline(wider, harness, set(), COLLAPSE, monkeypatch) if c["id"] == "probe"]
    assert stalled[: len(probes)] == probes  # out-of-range settings first (they name their knob) ...
    assert not all(name.endswith("-default") for name in stalled), stalled  # ... then a stall explores the rest
