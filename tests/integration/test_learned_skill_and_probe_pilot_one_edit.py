"""A learned skill and a probe proposing the same edit get one backtest and one pilot; a later try on the same
evidence is not piloted again.

A real session (the demo harness in a real git repository, a fabricated v0 run and its real health report,
the real SQLite store with the seed skills) and the real propose node. The stored learned skill is the one
the store would learn from the probe the report asks for (`skills.learned.from_probe`), so its patch is
the probe's: both route to the identical edit, with different commit messages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime
from llm_session import fake_session

from agent.adapters import ledger
from agent.adapters.pilots import candidate_name
from agent.context import Context
from agent.decisions.same_edit import case_signature
from agent.nodes import propose as node
from agent.policies.heuristic import Proposal
from agent.policies.learning import probe_fields
from agent.state import CandidateInfo
from harness.manifest import load_harness
from skills.learned import from_probe
from skills.repository import save_skill, session_uses, skill_id_of
from store import repository as store_repo


def _probe(ctx: Context, state: dict[str, Any]) -> Proposal:
    """The first probe the session's report asks for."""
    harness = load_harness(Path(state["harness_dir"]))
    knobs = node._knobs(ctx, state, harness)
    metrics = node.probe_metrics(state["report"]["metrics"], harness, knobs)
    probes = node._probes(ctx, harness, knobs, metrics, set())
    assert probes and probes[0].probe is not None, "the demo report asks for no probe: this test needs one"
    return probes[0]


def _learn(ctx: Context, probe: Proposal) -> str:
    """Store the skill learned from `probe` (its patch, its symptom signature as the trigger); its name."""
    assert probe.probe is not None
    learned = from_probe(probe.skill, probe.probe.learned_trigger, "math", "learned from a probe")
    with ledger.db(ledger.store_url(ctx)) as db:
        save_skill(db, learned, origin="learned")
    return learned.name


def _session(tmp_path: Path, **context: Any) -> tuple[Context, dict[str, Any]]:
    return fake_session(tmp_path, policy="heuristic", max_candidates=3, **context)  # type: ignore[no-any-return]


def _propose(ctx: Context, state: dict[str, Any]) -> list[CandidateInfo]:
    out = node.propose(state, Runtime(context=ctx))  # type: ignore[arg-type]
    return [c for c in out["candidates"] if c["iteration"] == state["iteration"]]


def test_a_learned_skill_and_a_probe_proposing_the_same_edit_pilot_it_once(tmp_path: Path, git_available: None) -> None:
    ctx, state = _session(tmp_path)
    learned = _learn(ctx, _probe(ctx, state))
    made = _propose(ctx, state)
    sid = state["session_id"]
    live = [c for c in made if c["status"] != "refused"]
    keys = [c["content_key"] for c in live]
    assert len(keys) == len(set(keys)), made  # every backtest and pilot tests a distinct edit
    [kept] = [c for c in live if learned in c.get("proposers", [])]
    [twin] = [c for c in made if c["status"] == "refused" and c.get("content_key") == kept["content_key"]]
    names = {kept["skill"], twin["skill"]}
    assert learned in names and any(n.startswith("probe-") for n in names), names  # one skill, one probe
    assert kept["proposers"] == [kept["skill"], twin["skill"]]  # the kept one names every proposer
    assert twin["reason"].startswith(f"same edit as {candidate_name(sid, kept['id'])}"), twin["reason"]
    assert f"proposed by {kept['skill']}, {twin['skill']}" in twin["reason"]
    assert kept["commit"] != twin["commit"]  # two commits, one edit: the key is the content, not the commit

    with ledger.db(ledger.store_url(ctx)) as db:
        row = store_repo.find_candidate(db, twin["id"])
        assert row is not None and row.status == "refused" and row.refusal_reason == twin["reason"]
        skill_id = skill_id_of(db, learned)
        owner = kept if kept["skill"] == learned else twin
        assert store_repo.find_candidate(db, owner["id"]).skill_id == skill_id  # type: ignore[union-attr]
        uses = [u for u in session_uses(db, sid) if u.skill_id == skill_id]
    # one use of the learned skill, carried by the candidate that is piloted, never by the refused duplicate
    assert [u.candidate_id for u in uses] == [kept["id"]]


def test_an_edit_settled_in_an_earlier_iteration_is_not_piloted_again_by_another_proposer(
    tmp_path: Path, git_available: None
) -> None:
    ctx, state = _session(tmp_path)
    probe = _probe(ctx, state)
    first = _propose(ctx, state)  # before the skill is learned: the probe alone makes the edit
    [tried] = [c for c in first if c["skill"] == probe.skill.name]
    tried["status"] = "reverted"  # its pilot regressed; the incumbent stays
    learned = _learn(ctx, probe)
    later = {**state, "iteration": 2, "candidates": first}
    [again] = [c for c in _propose(ctx, later) if c["skill"] == learned]
    assert again["status"] == "refused" and again["content_key"] == tried["content_key"], again
    name = candidate_name(state["session_id"], tried["id"])
    assert again["reason"] == (
        f"same edit as {name}, tried on the same incumbent commit and reverted: an edit is piloted once on the "
        "same evidence"
    )
    with ledger.db(ledger.store_url(ctx)) as db:
        skill_id = skill_id_of(db, learned)
        # a refused candidate counts no use of its skill (the seed skills live beside it count theirs)
        assert [u for u in session_uses(db, state["session_id"]) if u.skill_id == skill_id] == []


def test_an_edit_case_memory_saw_regress_on_the_same_symptoms_is_not_piloted_in_another_session(
    tmp_path: Path, git_available: None
) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    ctx, state = _session(tmp_path / "a", db_url=url)
    probe = _probe(ctx, state)
    [tried] = [c for c in _propose(ctx, state) if c["skill"] == probe.skill.name]
    with ledger.db(url) as db:  # what the record node files for a candidate whose pilot regressed
        signature = case_signature(state["report"]["metrics"], tried)
        ledger.ensure_case(db, session_id=state["session_id"], candidate_id=tried["id"], kind="negative_evidence",
                           domain="math", summary="regressed", outcome="regression", signature=signature,
                           **probe_fields(tried))  # fmt: skip
    other_ctx, other = _session(tmp_path / "b", db_url=url)
    learned = _learn(other_ctx, probe)
    made = _propose(other_ctx, other)
    assert probe.skill.name not in {c["skill"] for c in made}  # the probe itself: case memory's ladder
    [again] = [c for c in made if c["skill"] == learned]
    assert again["status"] == "refused", again
    assert again["reason"].startswith(f"same edit as {tried['id']}, tried on the same symptoms ("), again["reason"]
    assert "and regression" in again["reason"]
