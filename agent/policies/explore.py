"""Exploration when nothing explains a stall: single-factor probes over the harness's declared knobs.

When held-out accuracy stalls or falls (`STALL`) and no stored skill matches, the heuristic policy still
proposes: one move of one knob (`agent/decisions/knobs.py`: trainer settings with their safe range and effects, the
constants the reward, filter and env code declare as knobs, the group filter, the data weights, the reward's
components), each with a written hypothesis. The moves are
drafted per kind of knob in `agent/policies/probe_drafts.py`; they are ranked by the abnormal health metrics
they address, from the symptom table in `agent/policies/symptoms.py`:

- a critical alert of the incumbent's report needs no stall: `agent/policies/alert_aims.py` names the symptoms
  aimed at it, and `propose_probes(..., evidence=...)` holds them on the alert (`why_no_probe` says in one
  line why no probe addresses them);
- `SYMPTOMS` is the table: a symptom is a trigger-language predicate over documented metric names, a weight,
  the knob effects that address it and the effects it forbids (no probe makes updates bigger while they
  already jump);
- a trainer setting outside its documented safe range is a symptom of its own (`out_of_range`), addressed
  by moving it back to its documented default;
- a probe's score is the sum of the weights of the abnormal symptoms it addresses; probes with no support
  are offered only when no probe has any, and never one whose pilot restarts from the starting model (a
  warm-start setting: it gives up the incumbent's training);
- probes supported by a symptom that names their knob (`PINPOINTING`: the filter's kept groups, the data mix
  against the held-out set, a reward component; or `out_of_range`) rank first, and are the only ones
  proposed while held-out accuracy has not stalled (`UNPROMPTED`).

Case memory: `blocked` maps `case_key(probe_id, symptom_key)` to the outcome of an earlier try; the same
probe on the same symptom signature is not retried (except a filter, data or reward probe whose evidence was
thin), a larger magnitude of the same move is tried after thin evidence, and a move that regressed is not
pushed further (the other direction may still be tried).

A probe becomes a `Proposal` carrying an ad-hoc `SkillSpec` (its template patch, applied by
`skills.patches.apply_skill` like any skill) and a `ProbeInfo` (its id, symptom signature and the trigger a
learned skill would get: `skills/learned.py`). This module re-exports the symptom table's and the drafts'
public names, so callers import from here as before. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

from agent.decisions.knobs import HarnessKnobs
from agent.policies.draft import ENTRY, Draft
from agent.policies.heuristic import Metrics, ProbeInfo, Proposal
from agent.policies.probe_drafts import KEEP_LIVE_FILTER, MIN_COVER_GAP, draft_probes
from agent.policies.symptoms import (
    ALIGNED_CORR,
    BLOCKING,
    COMPONENT_ALIGNED,
    COMPONENT_MISALIGNED,
    MISALIGNED_SHARE,
    OUT_OF_RANGE,
    OUT_OF_RANGE_WEIGHT,
    PINPOINTING,
    STALL,
    STALL_GAIN,
    SYMPTOM_NAMES,
    SYMPTOMS,
    UNPROMPTED,
    Abnormal,
    Symptom,
    abnormal,
    component_variables,
    stalled,
    symptom_key,
)
from skills.learned import signature_trigger
from skills.models import SkillSpec

__all__ = [
    "ALIGNED_CORR",
    "BLOCKING",
    "COMPONENT_ALIGNED",
    "COMPONENT_MISALIGNED",
    "KEEP_LIVE_FILTER",
    "MIN_COVER_GAP",
    "MISALIGNED_SHARE",
    "OUT_OF_RANGE",
    "OUT_OF_RANGE_WEIGHT",
    "PINPOINTING",
    "STALL",
    "STALL_GAIN",
    "SYMPTOMS",
    "SYMPTOM_NAMES",
    "UNPROMPTED",
    "Abnormal",
    "Symptom",
    "abnormal",
    "case_key",
    "component_variables",
    "propose_probes",
    "stalled",
    "symptom_key",
    "why_no_probe",
]


def case_key(probe_id: str, signature: str) -> str:
    """The key of one (probe, symptom signature) pair in case memory."""
    return f"{probe_id}@{signature}"


def propose_probes(
    knobs: HarnessKnobs,
    metrics: Metrics,
    *,
    tried: Iterable[str],
    blocked: Mapping[str, str],
    max_candidates: int,
    only: frozenset[str] | None = None,
    evidence: Sequence[Abnormal] = (),
) -> list[Proposal]:
    """Rank single-factor probes by the abnormal symptoms they address; at most one per knob, best first.

    `tried` are probe skill names this session settled (`agent.nodes.propose.settled_skills`); `blocked` the
    case-memory outcomes of earlier tries by `case_key`; `only`, when given, keeps the probes that address one
    of these symptoms (`UNPROMPTED`: what is proposed without a stall); `evidence` adds symptoms that hold
    on other grounds than their predicate (a critical alert aimed at them: `agent/policies/alert_aims.py`).
    """
    found, signature, screened = _screen(knobs, metrics, tried, blocked, only, evidence)
    chosen: dict[str, Draft] = {}
    for draft, rejected in screened:
        if rejected:
            continue
        best = chosen.get(draft.knob)
        if best is None or draft.score > best.score:
            chosen[draft.knob] = draft
    ranked = sorted(chosen.values(), key=lambda d: (-d.pinpointed, -d.score))  # stable: declaration order breaks ties
    supported = [d for d in ranked if d.score > 0]
    picked = (supported or ranked)[:max_candidates]
    return [_proposal(d, found, signature, metrics) for d in picked]


# What a harness lacks when no probe of a kind is drafted (`agent/policies/probe_drafts.py`).
CODE_KNOB_HINT = (
    "a reward knob with this effect is a constant of the reward's code declared in EVOTRAINER_KNOBS (docs/harness.md, "
    "'Knobs in harness code')"
)
NEED_HINTS = {
    "reward_component": "a reward probe needs a reward that reports two or more components, one of them moving with "
    "the strict score",
    "filter_keep_live": "a filter probe needs a group filter in the manifest",
    "filter_std": "a filter probe needs a group filter in the manifest",
    "data_drop": "a data probe needs a data selection file with two or more weighted sources",
    "data_cover": "a data probe needs a data selection file and a held-out set whose mix of sources differs",
    "pay_fewer_wrong": CODE_KNOB_HINT,
    "pay_more_right": CODE_KNOB_HINT + ", or a gate of the reward function (`if COND: return 0`) whose payout most "
    "of the right responses it fails carry (docs/harness.md, 'Gates')",
    "env_allows_more": "an env probe needs a limit of the environment's code declared in EVOTRAINER_KNOBS with a move "
    "whose effect is env_allows_more (docs/harness.md, 'Knobs in harness code')",
}


def why_no_probe(
    knobs: HarnessKnobs,
    metrics: Metrics,
    symptoms: Sequence[Abnormal],
    *,
    tried: Iterable[str],
    blocked: Mapping[str, str],
) -> str:
    """Why no probe addresses `symptoms` (held as evidence), in one line; "" when one may be proposed."""
    names = frozenset(a.symptom.name for a in symptoms)
    needs = sorted({n for a in symptoms for n in a.symptom.needs})
    if not needs:
        return f"no move is known to address {', '.join(sorted(names))}: the symptom table names no knob effect for it"
    _, _, screened = _screen(knobs, metrics, tried, blocked, names, symptoms)
    aimed = [(d, why) for d, why in screened if set(d.effects) & set(needs)]
    if not aimed:
        hints = "; ".join(dict.fromkeys(NEED_HINTS[n] for n in needs if n in NEED_HINTS))
        return f"no knob this harness declares has a move with the effect it needs ({', '.join(needs)})" + (
            f": {hints}" if hints else ""
        )
    if any(not why for _, why in aimed):
        return ""
    return "every move aimed at it is ruled out: " + "; ".join(f"{d.probe_id} {why}" for d, why in aimed)


def _screen(
    knobs: HarnessKnobs,
    metrics: Metrics,
    tried: Iterable[str],
    blocked: Mapping[str, str],
    only: frozenset[str] | None,
    evidence: Sequence[Abnormal],
) -> tuple[list[Abnormal], str, list[tuple[Draft, str]]]:
    """Every draft with its support and why it may not be proposed ("" when it may), plus the abnormal symptoms
    and their signature."""
    found = abnormal(metrics)
    for extra in evidence:  # a symptom that holds on its own predicate too keeps both pieces of evidence
        same = next((i for i, a in enumerate(found) if a.symptom.name == extra.symptom.name), None)
        if same is None:
            found.append(extra)
        else:
            found[same] = Abnormal(extra.symptom, (*found[same].evidence, *extra.evidence))
    signature = symptom_key(found)
    tried_names = set(tried)
    out: list[tuple[Draft, str]] = []
    for draft in draft_probes(knobs, metrics):
        if draft.own_symptom is not None:
            draft.support.append(Abnormal(draft.own_symptom, (draft.own_symptom.text,)))
        draft.support += [a for a in found if set(a.symptom.needs) & set(draft.effects)]
        out.append((draft, _rejection(draft, found, signature, tried_names, blocked, only)))
    return found, signature, out


def _rejection(
    draft: Draft,
    found: Sequence[Abnormal],
    signature: str,
    tried_names: set[str],
    blocked: Mapping[str, str],
    only: frozenset[str] | None,
) -> str:
    """Why `draft` may not be proposed, in a few words ("" when it may)."""
    forbidding = sorted({a.symptom.name for a in found if set(a.symptom.forbids) & set(draft.effects)})
    if forbidding:
        return f"(forbidden while {', '.join(forbidding)} holds)"
    if draft.restarts and not draft.support:
        return "(restarts from the starting model, and no symptom asks for that)"  # gives up the incumbent's training
    if _name(draft) in tried_names:
        return "(already tried in this session)"
    if not _ladder_allows(draft, signature, blocked):
        before = blocked.get(case_key(draft.probe_id, signature))
        return f"(tried before on these symptoms: {before})" if before else "(a smaller step was not tried first)"
    if only is not None and not {a.symptom.name for a in draft.support} & only:
        return "(addresses none of the symptoms asked for)"
    return ""


def _ladder_allows(draft: Draft, signature: str, blocked: Mapping[str, str]) -> bool:
    """The same probe on the same signature is not retried, except a move without magnitudes (a filter, data or
    reward probe) whose evidence was thin ("insufficient": the session's `MAX_TRIES` still bounds it); a
    regressed move is not pushed further; a larger magnitude needs the smaller one tried with thin evidence
    first. (greedy-filter seed 1: the std-filter probe's pilot gained +0.057 but its replicate tied, so it was
    pruned, and the filter stayed biased for the rest of the session.)"""
    before = blocked.get(case_key(draft.probe_id, signature))
    if before is not None:
        return before == "insufficient" and draft.rung is None
    if draft.rung is None:
        return True
    stem, rung = draft.probe_id.rpartition(":")[0], draft.rung
    earlier = [blocked.get(case_key(f"{stem}:m{i}", signature)) for i in range(rung)]
    return "regression" not in earlier and all(outcome is not None for outcome in earlier)


def _name(draft: Draft) -> str:
    """The probe's skill name and branch slug (the skill-name pattern: lower-case letters, digits, hyphens)."""
    return "probe-" + ENTRY.sub("-", draft.slug.lower()).strip("-")[:100]


def _proposal(draft: Draft, found: Sequence[Abnormal], signature: str, metrics: Metrics) -> Proposal:
    support = draft.support or list(found)
    evidence = "; ".join(f"{a.symptom.text} ({', '.join(a.evidence)})" for a in draft.support) or (
        "no health metric points at this knob; tried because nothing else is indicated"
    )
    gain = metrics.get("strict_acc_delta")
    stall = f"held-out strict changed {gain:+.3f} within the run" if isinstance(gain, int | float) else "stalled"
    hypothesis = (
        f"If we {draft.what}, held-out strict accuracy rises, because {draft.why}. Evidence: {evidence}; {stall}."
    )
    # A probe a symptom that names its knob supports is proposed without a stall too, so what it learns is too.
    needs_stall = [] if draft.pinpointed else [STALL]
    trigger = signature_trigger([*needs_stall, *(a.symptom.predicate for a in support)])  # fails here, not when saved
    symptoms = ", ".join(a.symptom.name for a in draft.support) or "a stall"
    spec = SkillSpec(
        name=_name(draft),
        domain="*",
        trigger=trigger,
        factor=draft.factor,  # type: ignore[arg-type]
        patch_kind="template",
        patch=json.dumps(draft.ops),
        params=draft.params,
        expected_outcome=f"strict held-out accuracy rises over the control and the {symptoms} symptom(s) ease",
        validation_rule="pilot: strict_acc_delta vs the control above --min-effect with its paired-bootstrap 95% CI "
        "above 0, replicated on a fresh seed, no new warning alert",
        provenance=f"exploration probe {draft.probe_id} on symptoms {signature}",
    )
    info = ProbeInfo(
        probe_id=draft.probe_id,
        symptom_key=signature,
        symptoms=tuple(a.symptom.name for a in draft.support),
        score=draft.score,
        learned_trigger=trigger if draft.support else "",
    )
    return Proposal(
        slug=_name(draft)[:40].rstrip("-"),
        skills=(spec,),
        hypothesis=hypothesis,
        success_criterion="strict held-out accuracy improves over the control with a paired-bootstrap 95% CI above "
        "0 (at least --min-effect, replicated on a fresh seed) and no new critical alert",
        from_skill=False,
        probe=info,
    )
