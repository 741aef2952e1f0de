"""propose: the policy picks interventions; each becomes a branch + worktree after the surface and factor checks.

The heuristic policy proposes the stored skills whose triggers match the incumbent's health report (a refused
one hands its slot to the next match); the slots the skills leave free explore when held-out accuracy stalled
or fell (without a stall, only where a symptom names the knob: a setting outside its documented range, a
biased filter, a training mix far from the held-out one, a misaligned reward component): single-factor probes over
the harness's declared knobs (`agent/decisions/knobs.py`, `agent/policies/explore.py`), skipping what case
memory says was already tried on the same symptoms. Skill triggers read the report's metrics plus the harness's context
variables, its current settings (``setting/<key>``) and its reward components' agreement with the strict
score, so a skill learned from a probe (`skills/learned.py`) can match the same signature elsewhere.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langgraph.runtime import Runtime

from agent.adapters import ledger
from agent.context import Context
from agent.decisions.candidates import finalise_candidate, open_candidate, refuse_candidate
from agent.decisions.knobs import HarnessKnobs
from agent.decisions.triggers import record_unevaluated_triggers, trigger_metrics
from agent.launch.session_guard import trusted_session
from agent.policies.heuristic import Proposal, propose_from_skills, propose_score_only
from agent.state import CandidateInfo, State
from harness.manifest import Harness, load_harness

if TYPE_CHECKING:
    from agent.policies.alert_aims import CriticalAlert

log = logging.getLogger(__name__)

# When a skill may be proposed again in a session: never after it was merged, refused or failed its
# backtest; after a regression ("reverted") only once the harness changed (a merge since its last try),
# because single factors interact (a longer length budget regresses under a hackable reward and helps
# under a strict one); after thin evidence ("pruned") or a non-best improvement ("kept") again. At most
# MAX_TRIES tries in all. A skill this session learned from a merged probe counts as that probe.
SETTLED = {"refused", "backtest_failed", "merged"}
MAX_TRIES = 2


def propose(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Propose this iteration's candidates (idempotent: existing branches and commits are reused)."""
    trusted_session(runtime.context, state)  # the caller's own session; its paths and revisions checked
    ctx, iteration = runtime.context, state["iteration"]
    if any(c["iteration"] == iteration for c in state.get("candidates", [])):
        return {}
    harness = load_harness(Path(state["harness_dir"]))
    tried = settled_skills(state.get("candidates", []))
    if ctx.mode != "score-only":  # a trigger the report cannot decide is recorded, never silently skipped
        record_unevaluated_triggers(ctx, state, harness, trigger_metrics(state["report"]["metrics"], harness))
    if ctx.policy == "llm" and ctx.mode != "score-only":
        from agent.policies.llm import propose_with_llm

        outcome = propose_with_llm(ctx, state, harness)
        made = [*state.get("candidates", []), *outcome.candidates]
        return {"candidates": made, "llm_stop_reason": outcome.budget_stop}
    if ctx.mode == "score-only":
        metrics = trigger_metrics(state["report"]["metrics"], harness)
        proposals = propose_score_only(tried, ctx.max_candidates)
        made = [_materialise(ctx, state, harness, p, k, metrics) for k, p in enumerate(proposals, start=1)]
        for proposal, info in zip(proposals, made, strict=True):
            _count_use(ctx, state, proposal, metrics, info)
        return {"candidates": [*state.get("candidates", []), *made]}
    knobs = _knobs(ctx, state, harness)
    metrics = probe_metrics(state["report"]["metrics"], harness, knobs)
    return {
        "candidates": [*state.get("candidates", []), *offline_candidates(ctx, state, harness, knobs, metrics, tried)]
    }


def offline_candidates(
    ctx: Context, state: State, harness: Harness, knobs: HarnessKnobs, metrics: dict[str, Any], tried: set[str]
) -> list[CandidateInfo]:
    """The heuristic policy's candidates of this iteration, slot by slot:

    1. the probes of a blocking symptom (`explore.BLOCKING`: nothing else can show an effect), then the best
       probe whose evidence names the faulty place of the harness's own code (`symptoms.NAMED`: a constant
       outside the range its declaration calls safe, a gate, an unread reference, an env limit that refuses
       calls), one per iteration: a general skill's trigger never outranks the harness's own word;
    2. the matching skills, best-ranked first (they carry their track record);
    3. for each critical alert of the incumbent's report nothing so far is aimed at
       (`agent/policies/alert_aims.py`), its best probe: no stall needed, the alert is the evidence;
    4. probes in the free slots (when held-out accuracy stalled, or where a symptom names the knob).

    Each critical alert left without a candidate gets its reason recorded (`_record_alert_answers`).
    """
    from agent.policies.explore import BLOCKING
    from agent.policies.symptoms import names_its_fault

    alerts = _critical_alerts(state, metrics)

    def skills(out: set[str], taken: set[str]) -> list[Proposal]:
        return _skill_proposals(ctx, harness, metrics, out, taken)

    def probes(out: set[str], _taken: set[str]) -> list[Proposal]:
        return _probes(ctx, harness, knobs, metrics, out)

    def unblocking(out: set[str], taken: set[str]) -> list[Proposal]:
        return [p for p in probes(out, taken) if p.probe is not None and set(p.probe.symptoms) & BLOCKING]

    def named(out: set[str], taken: set[str]) -> list[Proposal]:
        return [p for p in probes(out, taken) if p.probe is not None and names_its_fault(p)]

    made = _fill(ctx, state, harness, metrics, unblocking, tried, [])
    made = _fill(ctx, state, harness, metrics, named, tried | _names(made), made, cap=1)
    made = _fill(ctx, state, harness, metrics, skills, tried | _names(made), made)
    if alerts:
        made = _fill_aimed(ctx, state, harness, knobs, metrics, tried, made, alerts)
    if sum(c["status"] != "refused" for c in made) < ctx.max_candidates:
        # Fewer matching skills than slots, or some were refused (a patch that did not apply here, e.g. a data
        # mix with no live source left: a trigger that matches but cannot act explains nothing): the free
        # slots explore (`_probes`: when held-out accuracy stalled, or where a symptom names the knob).
        made = _fill(ctx, state, harness, metrics, probes, tried | _names(made), made)
    if alerts:
        _record_alert_answers(ctx, state, harness, knobs, metrics, tried, made)
    return made


def _made(
    ctx: Context, state: State, harness: Harness, proposal: Proposal, k: int, metrics: dict[str, Any]
) -> CandidateInfo:
    """Materialise `proposal` as candidate `k`, noting the critical alerts it is aimed at (`CandidateInfo.aims`).

    A probe that repairs a reward defect named in its code (`symptoms.PROVEN_REPAIRS`), aimed at a disagreement
    its backtest must then show fall (`MUST_FALL`), is held to non-inferiority like a range restoration."""
    from agent.policies.alert_aims import aims
    from agent.policies.symptoms import PROVEN_REPAIRS
    from diagnostics.backtest import MUST_FALL

    info = _materialise(ctx, state, harness, proposal, k, metrics)
    aimed = aims(proposal, _critical_alerts(state, metrics))
    if aimed:
        info["aims"] = aimed
    probe, refused = proposal.probe, info["status"] == "refused"
    if probe is not None and not refused and set(probe.symptoms) & PROVEN_REPAIRS and set(aimed) & set(MUST_FALL):
        info["restores_range"] = [probe.probe_id]
        info["repairs_reward"] = True
    return info


def _critical_alerts(state: State, metrics: dict[str, Any]) -> list[CriticalAlert]:
    """The critical alerts of the incumbent's report, with what may be aimed at each."""
    from agent.policies.alert_aims import critical_alerts
    from diagnostics.findings import HealthReport

    report = state.get("report")
    return critical_alerts(HealthReport.from_json(report).findings, metrics) if report else []


def _fill_aimed(
    ctx: Context,
    state: State,
    harness: Harness,
    knobs: HarnessKnobs,
    metrics: dict[str, Any],
    tried: set[str],
    made: list[CandidateInfo],
    alerts: list[CriticalAlert],
) -> list[CandidateInfo]:
    """For each critical alert no live candidate is aimed at yet, in the report's order and while slots are
    free, its best-ranked probe (a refused one hands the alert to the next-ranked)."""
    from agent.policies.explore import propose_probes

    made = list(made)
    out = tried | _names(made)
    blocked = _case_memory(ctx, harness)
    for alert in alerts:
        live = [c for c in made if c["status"] != "refused"]
        if len(live) >= ctx.max_candidates:
            break
        if alert.no_probe or any(alert.alert_id in c.get("aims", []) for c in live):
            continue
        names = frozenset(s.name for s in alert.symptoms)
        ranked = propose_probes(knobs, metrics, tried=out, blocked=blocked, max_candidates=ctx.max_candidates,
                                only=names, evidence=alert.as_evidence())  # fmt: skip
        for proposal in ranked:
            out |= {s.name for s in proposal.skills}
            made.append(_candidate(ctx, state, harness, proposal, metrics, made))
            if made[-1]["status"] != "refused":
                break
    return made


def _record_alert_answers(
    ctx: Context,
    state: State,
    harness: Harness,
    knobs: HarnessKnobs,
    metrics: dict[str, Any],
    tried: set[str],
    made: list[CandidateInfo],
) -> list[str]:
    """Record, in case memory, what answers each critical alert of this iteration: the candidates aimed at it,
    or one line saying why there is none. One `pattern` case per iteration; returns its lines."""
    from agent.adapters.pilots import candidate_name
    from agent.policies.alert_aims import ALERT_ANSWERS, AlertAnswer, unaimed_reason
    from agent.policies.explore import why_no_probe
    from store.repository import add_case

    answers: list[AlertAnswer] = []
    live = [c for c in made if c["status"] != "refused"]
    for alert in _critical_alerts(state, metrics):
        mine = tuple(c["id"] for c in live if alert.alert_id in c.get("aims", []))
        reason = ""
        if not mine:
            gap = why_no_probe(knobs, metrics, alert.as_evidence(), tried=tried | _names(made),
                               blocked=_case_memory(ctx, harness))  # fmt: skip
            refused = [f"{c['id']} ({c['reason']})" for c in made if c["status"] == "refused" and
                       alert.alert_id in c.get("aims", [])]  # fmt: skip
            reason = (
                f"every candidate aimed at it was refused: {'; '.join(refused)}" if refused else
                unaimed_reason(alert, gap) or f"the iteration's {ctx.max_candidates} candidate slot(s) went to "
                "matching skills and other alerts first; its probe waits for a free slot"
            )  # fmt: skip
        answers.append(AlertAnswer(alert.alert_id, mine, reason))
    lines = [AlertAnswer(a.alert_id, tuple(candidate_name(state["session_id"], c) for c in a.candidates),
                         a.reason).line() for a in answers]  # fmt: skip
    summary = f"iteration {state['iteration']}: critical alerts and what answers them: " + "; ".join(lines)
    signature = {
        "iteration": state["iteration"],
        ALERT_ANSWERS: {a.alert_id: {"candidates": list(a.candidates), "reason": a.reason} for a in answers},
    }
    with ledger.db(ledger.store_url(ctx)) as db:
        add_case(db, session_id=state["session_id"], kind="pattern", domain=harness.manifest.domain,
                 summary=summary, signature=signature)  # fmt: skip
    log.info("%s", summary)
    return lines


def _case_memory(ctx: Context, harness: Harness) -> dict[str, str]:
    """Earlier tries by `explore.case_key`: the outcome of each probe on each symptom signature."""
    from agent.policies.explore import case_key
    from store.repository import tried_interventions

    with ledger.db(ledger.store_url(ctx)) as db:
        tried_before = tried_interventions(db, harness.manifest.domain)
    return {case_key(i, k): o or "" for i, k, o in tried_before}


def _names(made: list[CandidateInfo]) -> set[str]:
    """The skill (or probe) names the candidates made so far apply."""
    return {name for c in made for name in c["skill"].split(",") if name}


Source = Callable[[set[str], set[str]], list[Proposal]]


def _fill(
    ctx: Context,
    state: State,
    harness: Harness,
    metrics: dict[str, Any],
    source: Source,
    tried: set[str],
    made: list[CandidateInfo],
    cap: int | None = None,
) -> list[CandidateInfo]:
    """Materialise `source`'s proposals until `max_candidates` are live (`cap` of them from this source, when
    given) or it runs dry.

    A refused proposal (its patch did not apply, or the surface check refused the diff) hands its slot to the
    next-ranked one: the source is asked again without everything proposed so far and without the factors the
    live candidates already test, so an unusable top match never pushes a usable one to a later iteration.
    """
    made = list(made)
    out = set(tried)
    first = len(made)
    while True:
        live = [c for c in made if c["status"] != "refused"]
        need = ctx.max_candidates - len(live)
        if cap is not None:
            need = min(need, cap - sum(c["status"] != "refused" for c in made[first:]))
        taken = {c["factor"] for c in live}
        batch = [p for p in source(out, taken) if not {s.name for s in p.skills} & out][:need] if need > 0 else []
        if not batch:
            return made
        for proposal in batch:
            out |= {s.name for s in proposal.skills}
            made.append(_candidate(ctx, state, harness, proposal, metrics, made))


def _candidate(
    ctx: Context, state: State, harness: Harness, proposal: Proposal, metrics: dict[str, Any], made: list[CandidateInfo]
) -> CandidateInfo:
    """Materialise `proposal` as the iteration's next candidate, refuse it when its edit is made or settled
    already (`_once`), then count the stored skills' use against the candidate that carries the edit: itself
    when live; the kept twin when refused as its duplicate and the twin carries no stored skill's use yet (a
    probe), so the twin's pilot settles the skill's track record; nothing when refused otherwise."""
    info, kept = _once(ctx, state, harness, _made(ctx, state, harness, proposal, len(made) + 1, metrics), made)
    _count_use(ctx, state, proposal, metrics, info if info["status"] != "refused" else kept, twin=kept is not None)
    return info


def _count_use(
    ctx: Context,
    state: State,
    proposal: Proposal,
    metrics: dict[str, Any],
    carrier: CandidateInfo | None,
    *,
    twin: bool = False,
) -> None:
    """Record a use of each stored skill of `proposal` against `carrier` (a live candidate; `twin`: the kept
    candidate making the same edit, counted only while it carries no use of its own)."""
    from skills.repository import evidence, record_use, use_of_candidate

    if carrier is None or carrier["status"] == "refused" or not proposal.from_skill:
        return
    with ledger.db(ledger.store_url(ctx)) as db:
        if twin and use_of_candidate(db, carrier["id"]) is not None:
            return
        for spec in proposal.skills:
            record_use(db, spec.name, state["session_id"], carrier["id"], evidence(spec, metrics))


def _once(
    ctx: Context, state: State, harness: Harness, info: CandidateInfo, made: list[CandidateInfo]
) -> tuple[CandidateInfo, CandidateInfo | None]:
    """Refuse `info` when its edit has a pilot already (`agent/decisions/same_edit.py`): a live candidate of
    this iteration making it (returned second; it lists every proposer in `proposers` and the refusal names
    it), or another proposer's earlier try on the same evidence that settled it (the refusal names that
    candidate and how it ended). A refused slot is handed on like any refusal."""
    from agent.adapters.pilots import candidate_name
    from agent.decisions.same_edit import proposers, same_in_iteration, tried_before

    if info["status"] == "refused" or not info.get("content_key"):
        return info, None
    session_id, candidates = state["session_id"], state.get("candidates", [])
    same = same_in_iteration(info, [*candidates, *made])
    if same is not None:
        same["proposers"] = list(dict.fromkeys([*proposers(same), *proposers(info)]))
        kept = candidate_name(session_id, same["id"])
        why = f"same edit as {kept} (proposed by {', '.join(same['proposers'])}): one pilot per edit"
        return refuse_candidate(ctx, state, info, why), same
    earlier = tried_before(info, candidates, _tried_edits(ctx, harness))
    if earlier is None:
        return info, None
    why = (
        f"same edit as {candidate_name(session_id, earlier.candidate_id)}, tried on {earlier.evidence} and "
        f"{earlier.outcome}: an edit is piloted once on the same evidence"
    )
    return refuse_candidate(ctx, state, info, why), None


def _tried_edits(ctx: Context, harness: Harness) -> list[dict[str, Any]]:
    """The domain's negative evidence in case memory, newest first, as `same_edit.tried_before` reads it."""
    from store.repository import cases_for_domain

    with ledger.db(ledger.store_url(ctx)) as db:
        rows = cases_for_domain(db, harness.manifest.domain, "negative_evidence")
        return [{"candidate_id": r.candidate_id, "outcome": r.outcome, "signature": r.signature} for r in rows]


def probe_metrics(report_metrics: dict[str, Any], harness: Harness, knobs: HarnessKnobs) -> dict[str, Any]:
    """What skill triggers and probes read: report metrics, context variables, settings, component evidence."""
    from agent.policies.explore import component_variables

    return {**trigger_metrics(report_metrics, harness), **knobs.variables(), **component_variables(knobs.components)}


def settled_skills(candidates: list[CandidateInfo]) -> set[str]:
    """Skills not to propose again (see the rules above `SETTLED`)."""
    last_merge = max((c["iteration"] for c in candidates if c["status"] == "merged"), default=-1)
    tries: dict[str, int] = {}
    settled: set[str] = set()
    for cand in candidates:
        for name in filter(None, cand["skill"].split(",")):
            tries[name] = tries.get(name, 0) + 1
            if cand["status"] in SETTLED or (cand["status"] == "reverted" and cand["iteration"] > last_merge):
                settled.add(name)
            elif cand["status"] == "reverted":
                settled.discard(name)
        if cand.get("learned_skill"):
            settled.add(cand["learned_skill"])
    return settled | {name for name, n in tries.items() if n >= MAX_TRIES}


def _knobs(ctx: Context, state: State, harness: Harness) -> HarnessKnobs:
    from agent.decisions.knobs import harness_knobs
    from agent.nodes.common import run_table, session_answer

    rows = run_table(Path(state["version"]["run_dir"]), session_answer(state)).train
    return harness_knobs(harness, ctx.backend, rows)


def offline_proposals(
    ctx: Context, harness: Harness, knobs: HarnessKnobs, metrics: dict[str, Any], tried: set[str]
) -> list[Proposal]:
    """The heuristic policy's proposals: the stored skills whose triggers match; when none does, probes."""
    return _skill_proposals(ctx, harness, metrics, tried, set()) or _probes(ctx, harness, knobs, metrics, tried)


def probe_info(proposal: Proposal) -> dict[str, Any] | None:
    """What a probe candidate carries (`CandidateInfo.probe`) for case memory and learning; None for a skill."""
    p = proposal.probe
    if p is None:
        return None
    return {
        "probe_id": p.probe_id,
        "symptom_key": p.symptom_key,
        "symptoms": list(p.symptoms),
        "learned_trigger": p.learned_trigger,
        "spec": proposal.skill.model_dump(mode="json"),
    }


def _skill_proposals(
    ctx: Context, harness: Harness, metrics: dict[str, Any], tried: set[str], taken: set[str]
) -> list[Proposal]:
    """The matching stored skills that fit the harness, best first."""
    from skills.patches import skill_fits
    from skills.repository import rank

    with ledger.db(ledger.store_url(ctx)) as db:
        matches = rank(db, metrics, harness.manifest.domain)
    # e.g. a reward-writing skill needs the manifest's answer protocol: never propose what cannot apply
    fitting = [m for m in matches if skill_fits(m.record.spec, harness) is None]
    return propose_from_skills(fitting, metrics, tried, ctx.max_candidates, taken_factors=taken)


def _probes(
    ctx: Context, harness: Harness, knobs: HarnessKnobs, metrics: dict[str, Any], tried: set[str]
) -> list[Proposal]:
    """Exploration probes when held-out accuracy stalled; without a stall only those a symptom that names their
    knob supports (`explore.UNPROMPTED`)."""
    from agent.policies.explore import UNPROMPTED, propose_probes, stalled

    only = None if stalled(metrics) else UNPROMPTED
    blocked = _case_memory(ctx, harness)
    return propose_probes(knobs, metrics, tried=tried, blocked=blocked, max_candidates=ctx.max_candidates, only=only)


def _materialise(
    ctx: Context, state: State, harness: Harness, proposal: Proposal, k: int, metrics: dict[str, Any]
) -> CandidateInfo:
    """Open the candidate, apply the skill patch(es) (ops like reweight_sources read `metrics`), then check,
    commit and record it with its edit's content key and evidence. Its skills' use is counted by the caller,
    once it is known to be piloted (`_count_use`)."""
    from agent.policies.explore import abnormal, symptom_key
    from sandboxes import git_worktree as gw
    from skills.patches import SkillPatchError, apply_skill

    cand = open_candidate(
        ctx,
        state,
        k,
        proposal.slug,
        hypothesis=proposal.hypothesis,
        factors=proposal.factors,
        success_criterion=proposal.success_criterion,
        justification=proposal.justification,
        skill=",".join(s.name for s in proposal.skills),
    )
    probe = probe_info(proposal)
    if probe is not None:
        cand.info["probe"] = probe
    if not cand.committed:
        try:
            for spec in proposal.skills:
                apply_skill(spec, Path(cand.info["worktree"]), harness, metrics=metrics, backend=ctx.backend)
        except (SkillPatchError, gw.GitWorktreeError) as exc:
            return refuse_candidate(ctx, state, cand.info, f"patch did not apply: {exc}")
    info = finalise_candidate(ctx, state, harness, cand, f"{proposal.slug}: {proposal.skill.expected_outcome}")
    if info["status"] != "refused":  # what an earlier try of the same edit is matched by (`_once`)
        info["content_key"] = gw.change_key(Path(info["worktree"]), cand.base_sha, info["commit"])
        info["base_commit"] = cand.base_sha
        info["evidence_key"] = symptom_key(abnormal(metrics))
    return info
