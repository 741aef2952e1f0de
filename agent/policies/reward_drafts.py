"""Probe drafts that edit the reward, one builder per kind of evidence:

- train on the component that agrees best with the strict score, when another one does not;
- drop a gate of its entry function (`harness/code_gates.py`) whose payout most of the strict-right responses
  it fails carry (`agent/decisions/reward_gates.py`);
- read the reference answer where a reward that pays wrong responses reads the row's extra_info instead
  (`harness/code_reference.py`);
- where nothing of these (nor a declared knob) answers a critical disagreement, pay 1 when the reward's own
  checks that best agree with the strict score all hold (`agent/decisions/reward_alignment.py`).

`agent/policies/probe_drafts.py: draft_probes` gathers them with the other knobs' drafts. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from agent.decisions.knobs import HarnessKnobs
from agent.policies.draft import ENTRY, Draft
from agent.policies.heuristic import Metrics
from agent.policies.symptoms import ALIGNED_CORR, GATE_FAILS_RIGHT, GATE_WEIGHT, REFERENCE_UNREAD, Symptom
from diagnostics.score import MISRANKED_GROUP_CRITICAL, REWARDED_WRONG_CRITICAL, UNREWARDED_CORRECT_CRITICAL


def _reward(knobs: HarnessKnobs) -> list[Draft]:
    """Train on the reward component that agrees best with the strict score, when another one does not and it
    agrees better than the reward as a whole (a component that only checks the program parses agrees, but less
    than the pass ratio the reward pays)."""
    comps = [c for c in knobs.components if not math.isnan(c.strict_corr)]
    if len(knobs.components) < 2 or not comps:
        return []
    best = max(comps, key=lambda c: c.strict_corr)
    if best.strict_corr < ALIGNED_CORR or not best.strict_corr > _or(knobs.reward_strict_corr, -1.0):
        return []  # no component agrees with the strict score, or none better than the reward as a whole
    others = ", ".join(c.name for c in knobs.components if c.name != best.name)
    return [
        Draft(
            probe_id=f"reward:only:{best.name}",
            knob="@reward",
            factor="reward",
            slug="reward-only-" + ENTRY.sub("-", best.name.lower()).strip("-")[:24],
            ops=[{"op": "score_from_component", "file": "@reward", "component": best.name}],
            params={},
            effects=("reward_component",),
            what=f"train on the reward component {best.name!r} alone (corr. with strict {best.strict_corr:+.2f}); "
            f"drop {others} from the score (still logged)",
            why="a component unrelated to correctness moves samples within a group at random",
        )
    ]


# A gate is drafted when the reward fails strict-right responses at the critical level (the alert its probe is
# then aimed at makes its backtest show them fall: `diagnostics/backtest.py: MUST_FALL`) and the gate's payout is
# on at least half of them (no fewer than `GATE_MIN_FAILED`: a handful of rows names nothing). The reference
# probe likewise needs strict-wrong responses paid at the critical level.
GATE_MIN_SHARE = 0.5
GATE_MIN_FAILED = 10


def _gates(knobs: HarnessKnobs) -> list[Draft]:
    """Drop a gate of the reward's entry function that explains the strict-right responses the reward fails."""
    out = []
    for ev in knobs.gates:
        if ev.failed_right < GATE_MIN_FAILED or not ev.failed_rate > UNREWARDED_CORRECT_CRITICAL:
            continue
        if not ev.share >= GATE_MIN_SHARE:
            continue
        gate = ev.gate
        where = f"{ev.path}:{gate.line}"
        fields = " and ".join(("the reward", *ev.fingerprint))
        symptom = (
            _named(
                GATE_FAILS_RIGHT,
                f"unrewarded_correct_rate > {UNREWARDED_CORRECT_CRITICAL}",
                f"{ev.explained} of the {ev.failed_right} strict-right responses the reward fails ({ev.share:.0%}) "
                f"carry the payout of `{gate.shown}` ({where}) in {fields}",
            )
            if ev.fingerprint
            else None  # a bare-number payout names no gate: every other way of paying 0 leaves the same reward
        )
        out.append(
            Draft(
                probe_id=f"reward:gate:{gate.id}",
                knob=f"@reward:gate:{gate.id}",
                factor="reward",
                slug=f"reward-drop-gate-{gate.id}",
                ops=[{"op": "drop_gate", "file": "@reward", "gate": gate.id}],
                params={},
                effects=("pay_more_right",),
                what=f"drop the early exit `{gate.shown}` from {gate.function} ({where}), so the rest of the "
                "reward judges the responses it stops",
                why="the gate pays nothing before the reward's own checks run, and the strict evaluator passes "
                "many of the responses the reward fails",
                own_symptom=symptom,
            )
        )
    return out


def _reference(knobs: HarnessKnobs, metrics: Metrics) -> list[Draft]:
    """Read the reference answer where the reward reads the row's extra_info, when the reward pays wrong responses
    and its code never reads the reference (one draft per place, in source order; the backtest tells which)."""
    use = knobs.reference
    paid_wrong = metrics.get("rewarded_wrong_rate")
    if use is None or use.read or not isinstance(paid_wrong, int | float) or not paid_wrong > REWARDED_WRONG_CRITICAL:
        return []
    out = []
    for sub in use.substitutions:
        where = sub.key if len({s.function for s in use.substitutions}) == 1 else f"{sub.function}-{sub.key}"
        slug = ENTRY.sub("-", where.lower()).strip("-")[:28]  # the branch name keeps it whole: one per place
        symptom = _named(
            REFERENCE_UNREAD,
            f"rewarded_wrong_rate > {REWARDED_WRONG_CRITICAL}",
            f"the reward never reads its reference answer ({sub.reference}): {sub.function} receives it, ignores "
            f"it and reads `{sub.text}` (line {sub.line})",
        )
        out.append(
            Draft(
                probe_id=f"reward:reference:{sub.function}:{sub.key}",
                knob=f"@reward:reference:{sub.function}:{sub.key}",
                factor="reward",
                slug=f"reward-reads-{slug}",
                ops=[{"op": "read_reference", "file": "@reward", "function": sub.function, "key": sub.key}],
                params={},
                effects=("pay_fewer_wrong",),
                what=f"make {sub.function} read the reference answer ({sub.reference}) where it reads `{sub.text}`",
                why="a reward that never reads the reference cannot tell a right response from one that only "
                "matches what the row shows the policy",
                own_symptom=symptom,
            )
        )
    return out


# What a move of the reward does about its disagreement with the strict score (the effects symptoms.py's reward
# symptoms need): the generic alignment probe is drafted only when no other draft has one of them.
DISAGREEMENT_EFFECTS = frozenset({"reward_component", "pay_fewer_wrong", "pay_more_right"})


def _aligned(knobs: HarnessKnobs, metrics: Metrics, others: Sequence[Draft]) -> list[Draft]:
    """Pay 1 when the reward's own checks that agree with the strict score all hold: the generic
    candidate when the reward and the evaluator disagree at the critical level and nothing more specific (a
    component, a declared knob, a gate, the reference) is drafted to answer it."""
    fit = knobs.alignment
    paid_wrong, unpaid_right = metrics.get("rewarded_wrong_rate"), metrics.get("unrewarded_correct_rate")
    critical = _above(paid_wrong, REWARDED_WRONG_CRITICAL) or _above(unpaid_right, UNREWARDED_CORRECT_CRITICAL)
    if fit is None or not critical or any(DISAGREEMENT_EFFECTS & set(d.effects) for d in others):
        return []
    # Its backtest must show each critical disagreement fall (diagnostics/backtest.py: MUST_FALL): a rule that
    # cannot is not drafted, and leaves its slot to another candidate.
    misranked = metrics.get("misranked_group_rate")
    pays_wrong = _above(paid_wrong, REWARDED_WRONG_CRITICAL) or _above(misranked, MISRANKED_GROUP_CRITICAL)
    if (pays_wrong or metrics.get("reward_hacking") == 1.0) and not fit.rewarded_wrong < fit.reward_rewarded_wrong:
        return []
    if _above(unpaid_right, UNREWARDED_CORRECT_CRITICAL) and not fit.unrewarded_correct < fit.reward_unrewarded_correct:
        return []
    shown = " and ".join(c.shown for c in fit.checks)
    key = "-".join(f"{c.component}{'ge' if c.op == '>=' else 'le'}{c.threshold:g}" for c in fit.checks)
    return [
        Draft(
            probe_id=f"reward:checks:{key}",
            knob="@reward:checks",
            factor="reward",
            slug="reward-pays-checks-" + ENTRY.sub("-", key.lower()).strip("-")[:24],
            ops=[
                {
                    "op": "score_from_checks",
                    "file": "@reward",
                    "checks": [[c.component, c.op, c.threshold] for c in fit.checks],
                }
            ],
            params={},
            effects=("reward_component",),
            what=f"pay 1 when {shown} (the reward's own checks), else 0: on the training rollouts it pays "
            f"{fit.rewarded_wrong:.0%} of the {fit.n_wrong} strict-wrong ones and fails {fit.unrewarded_correct:.0%} "
            f"of the {fit.n_right} strict-right ones, where the reward pays {fit.reward_rewarded_wrong:.0%} and "
            f"fails {fit.reward_unrewarded_correct:.0%}",
            why="the reward's training-side checks together agree with the evaluator where its score does not",
        )
    ]


def _named(name: str, predicate: str, text: str) -> Symptom:
    """Evidence that names one place of the reward's code (`symptoms.PROVEN_REPAIRS`): it weighs like a
    pinpointing symptom; `predicate` (on documented metrics) is what a skill learned from its probe triggers on."""
    return Symptom(name, predicate, GATE_WEIGHT, (), text=text)


def _above(value: object, limit: float) -> bool:
    return isinstance(value, int | float) and value > limit


def _or(value: float, fallback: float) -> float:
    return fallback if math.isnan(value) else value


def reward_drafts(knobs: HarnessKnobs, metrics: Metrics, others: Sequence[Draft]) -> list[Draft]:
    """`others` (the other knobs' drafts), then the reward's, in this module's order: the order breaks score ties
    when probes are ranked; the generic checks candidate comes last and only when nothing before answers."""
    drafts = [*others, *_reward(knobs), *_gates(knobs), *_reference(knobs, metrics)]
    return [*drafts, *_aligned(knobs, metrics, drafts)]
