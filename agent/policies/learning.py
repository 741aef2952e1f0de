"""What a decided candidate teaches the store: skills learned from wins, probes' negative evidence.

Called by the `record` node inside its store transaction:

- `learn_from_merge`: a merged candidate that applied no stored skill — an exploration probe, or an LLM's
  own edit — becomes a stored skill (`skills/learned.py`): the probe's symptom signature (an LLM edit: the
  abnormal symptoms of the report it was proposed on) as its trigger, its patch as a template, provenance
  naming the session, candidate, version and evidence, and one win (its use in this session, settled).
  Nothing is learned from score-only sessions (training reward alone is no evidence) or from a merge whose
  report shows no abnormal symptom (a trigger that fires on every stall would be proposed everywhere):
  a `pattern` case says so.
- `probe_case`: a probe that did not merge (pruned, reverted, kept, or failed its backtest) goes to case
  memory under its probe id and symptom signature, so it is not retried blindly (`agent/policies/explore.py`).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from agent.adapters import ledger
from agent.context import Context
from agent.decisions.same_edit import case_signature
from agent.state import CandidateInfo, DecisionInfo, State


def learn_from_merge(
    db: Session, ctx: Context, state: State, cand: CandidateInfo, winner: DecisionInfo, version_index: int
) -> str | None:
    """Store the skill a merged candidate teaches and count its win; return its name (None: nothing learned)."""
    from skills.learned import from_probe
    from skills.models import SkillSpec
    from skills.repository import record_result, record_use, use_of_candidate

    if ctx.mode != "evotrainer":
        return None
    if use_of_candidate(db, cand["id"]) is not None:
        return None  # it applied a stored skill: that skill's win, counted by `record`
    session_id = state["session_id"]
    evidence = f"strict Δ {winner['delta']:+.3f} [{winner['ci_low']:+.3f}, {winner['ci_high']:+.3f}] over the control"
    where = f"session {session_id}, candidate {cand['id']}, merged as v{version_index}"
    probe = cand.get("probe")
    if probe is not None:
        if not probe["learned_trigger"]:
            _not_learned(db, state, cand, "the probe addressed no abnormal symptom")
            return None
        spec = SkillSpec.model_validate(probe["spec"])
        provenance = f"learned from exploration probe {probe['probe_id']} on symptoms {probe['symptom_key']}: "
        skill = from_probe(spec, probe["learned_trigger"], _domain(state), f"{provenance}{where}; {evidence}")
    else:
        learned = _from_llm_change(state, cand, f"learned from an LLM edit: {where}; {evidence}")
        if isinstance(learned, str):
            _not_learned(db, state, cand, learned)
            return None
        skill = learned
    from skills.repository import save_skill

    save_skill(db, skill, origin="learned", source_candidate_id=cand["id"])
    use = record_use(db, skill.name, session_id, cand["id"], {"strict_delta": winner["delta"]})
    record_result(db, use, win=True)
    return skill.name


def _from_llm_change(state: State, cand: CandidateInfo, provenance: str) -> Any:
    """The skill an LLM's merged edit teaches, or a string saying why none."""
    from agent.decisions.triggers import trigger_metrics
    from agent.policies.explore import STALL, abnormal, stalled
    from harness.manifest import load_harness
    from skills.learned import from_change, signature_trigger

    harness = load_harness(Path(state["harness_dir"]))
    metrics = trigger_metrics(state["report"]["metrics"], harness)
    found = abnormal(metrics)
    if not found:
        return "the report it was proposed on shows no abnormal symptom"
    trigger = signature_trigger([*([STALL] if stalled(metrics) else []), *(a.symptom.predicate for a in found)])
    skill = from_change(
        _changes(state["harness_dir"], state["version"]["commit"], cand["commit"]),
        factor=cand["factor"] if cand["factor"] != "other" else "trainer",  # type: ignore[arg-type]
        refs=_refs(harness),
        trigger=trigger,
        domain=harness.manifest.domain,
        slug=cand["slug"],
        expected_outcome=f"as in {cand['id']}: {cand['hypothesis']}"[:2000],
        provenance=provenance,
    )
    return skill if skill is not None else "its edit deletes a file or changes nothing a template can write"


def _refs(harness: Any) -> dict[str, str]:
    refs = {harness.reward.path: "@reward", harness.manifest.trainer.config: "@trainer_config"}
    if harness.group_filter is not None:
        refs[harness.group_filter.path] = "@group_filter"
    if harness.env is not None:
        refs[harness.env.path] = "@env"
    from skills.patches import SkillPatchError, resolve_file

    with contextlib.suppress(SkillPatchError):  # the settings name no data-selection file
        refs[resolve_file("@data_selection", harness)] = "@data_selection"
    return refs


def _changes(repo_dir: str, base: str, head: str) -> list[Any]:
    """The files `head` changed against `base`, with their text on both sides (git adapter)."""
    from sandboxes import git_revisions as gr
    from skills.learned import FileChange

    old, new = gr.verified_commit(repo_dir, base, "base commit"), gr.verified_commit(repo_dir, head, "head commit")
    return [FileChange(name, before, after) for name, before, after in gr.changed_files(repo_dir, old, new)]


def _not_learned(db: Session, state: State, cand: CandidateInfo, why: str) -> None:
    ledger.ensure_case(
        db,
        session_id=state["session_id"],
        kind="pattern",
        domain=_domain(state),
        summary=f"{cand['id']} merged but no skill was learned from it: {why}",
        signature=dict(state["report"]["metrics"]),
        candidate_id=cand["id"],
        outcome="improvement",
    )


def probe_fields(cand: CandidateInfo) -> dict[str, Any]:
    """The case-memory keys of a probe candidate (`intervention`, `symptom_key`); empty for any other candidate."""
    probe = cand.get("probe")
    return {} if probe is None else {"intervention": probe["probe_id"], "symptom_key": probe["symptom_key"]}


def probe_case(db: Session, state: State, cand: CandidateInfo, summary: str) -> None:
    """File a probe whose backtest failed under its probe id and symptom signature (once per candidate).

    Outcome ``regression``: the backtest predicted it harmful, so its move is not pushed further either.
    """
    if cand.get("probe") is None:
        return
    ledger.ensure_case(
        db,
        session_id=state["session_id"],
        candidate_id=cand["id"],
        kind="negative_evidence",
        domain=_domain(state),
        summary=summary,
        signature=case_signature(state["report"]["metrics"], cand),
        outcome="regression",
        **probe_fields(cand),
    )


def _domain(state: State) -> str:
    from harness.manifest import load_harness

    return load_harness(Path(state["harness_dir"])).manifest.domain
