"""Exploration when nothing explains a stall: single-factor probes over the harness's declared knobs (issue 17).

When held-out accuracy stalls or falls (`STALL`) and no stored skill matches, the heuristic policy still
proposes: one move of one knob (`agent/knobs.py`: trainer settings with their safe range and effects, the
group filter, the data weights, the reward's components), each with a written hypothesis. Probes are
ranked by the abnormal health metrics they address:

- `SYMPTOMS` is the table: a symptom is a trigger-language predicate over documented metric names
  (`skills/triggers.py`; a metric the report lacks leaves it unknown, i.e. not abnormal), a weight, the
  knob effects that address it (`trainer_backend.knobs.Effect`, or a filter/data/reward probe kind) and
  the effects it forbids (no probe makes updates bigger while they already jump);
- a trainer setting outside its documented safe range is a symptom of its own (`out_of_range`), addressed
  by moving it back to its documented default;
- a probe's score is the sum of the weights of the abnormal symptoms it addresses; probes with no support
  are offered only when no probe has any;
- probes supported by a symptom that names their knob (`PINPOINTING`: the filter's kept groups, the data mix
  against the held-out set, a reward component; or `out_of_range`) rank first, and are the only ones
  proposed while held-out accuracy has not stalled (`UNPROMPTED`).

Case memory: `blocked` maps `case_key(probe_id, symptom_key)` to the outcome of an earlier try; the same
probe on the same symptom signature is not retried (except a filter, data or reward probe whose evidence was
thin), a larger magnitude of the same move is tried after thin evidence, and a move that regressed is not
pushed further (the other direction may still be tried).

A probe becomes a `Proposal` carrying an ad-hoc `SkillSpec` (its template patch, applied by
`skills.patches.apply_skill` like any skill) and a `ProbeInfo` (its id, symptom signature and the trigger a
learned skill would get: `skills/learned.py`). Pure: no I/O.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from agent.knobs import ComponentEvidence, HarnessKnobs, TrainerKnob
from agent.policies.heuristic import Metrics, ProbeInfo, Proposal
from diagnostics.groups import BIASED_REWARD_GAP
from diagnostics.sources import HELDOUT_SOURCE_SHARE, MIX_GAP_WARNING
from skills.learned import signature_trigger
from skills.models import SkillSpec
from skills.triggers import evaluate, matched_terms

# Held-out strict accuracy stalls or falls: its gain within the incumbent's run is below this (a healthy
# 40-step run of the demo's fixed harness gains +0.08; later runs +0.01 to +0.04, so late runs probe too,
# and only a replicated improvement of at least --min-effect merges).
STALL_GAIN = 0.03
STALL = f"strict_acc_delta < {STALL_GAIN}"

# A reward component that moves the reward within groups but not with the strict score (issue 17: "a reward
# component that dominates"): its correlation with the strict score below this, its share of the reward's
# within-group variation above MISALIGNED_SHARE.
ALIGNED_CORR = 0.3
MISALIGNED_SHARE = 0.3
COMPONENT_MISALIGNED = "reward_component_misaligned_share"  # trigger variable (agent/nodes/propose.py)
COMPONENT_ALIGNED = "reward_component_aligned_corr"


@dataclass(frozen=True)
class Symptom:
    """One abnormal-metric rule: its predicate, how much it weighs, what addresses it and what it forbids."""

    name: str
    predicate: str
    weight: float
    needs: tuple[str, ...]  # knob effects or probe kinds ("filter_keep_live", "data_drop", "reward_component")
    forbids: tuple[str, ...] = ()
    text: str = ""


SYMPTOMS: tuple[Symptom, ...] = (
    Symptom("no_diversity", "identical_group_ratio > 0.5 or distinct_response_ratio < 0.3", 2.0, ("explore",),
            ("sharpen",), "the samples of a group are (nearly) all the same response"),
    Symptom("exploration_collapse", "wrong_mean_logprob > -0.1", 1.0, ("explore",), ("sharpen",),
            "wrong answers are sampled with high confidence (exploration collapse)"),
    Symptom("dead_groups", "dead_group_ratio > 0.3", 1.0, ("more_signal", "explore"), (),
            "many groups carry no reward variance (no GRPO signal)"),
    Symptom("low_spread", "reward_spread < 0.1", 1.0, ("explore", "more_signal"), (),
            "the reward barely varies within groups"),
    Symptom("filter_drops_signal", "kept_live_ratio < 0.5 or filter_spread_gap > 0.02", 3.0,
            ("filter_keep_live",), (), "the group filter drops groups that carry reward variance"),
    Symptom("filter_keeps_dead", "dead_group_ratio_after_filter > 0.3 and filter_present == 1", 2.0,
            ("filter_std",), (), "the group filter lets dead groups through"),
    Symptom("big_updates", "ppo_kl_max > 0.01", 2.0,
            ("smaller_steps", "anchor"), ("bigger_steps", "unanchor"), "single updates jump far"),
    Symptom("tiny_updates", "ppo_kl_max < 0.0005 or no_update_share > 0.25", 2.0, ("bigger_steps", "unanchor"),
            ("smaller_steps", "anchor"), "updates barely move the policy"),
    Symptom("unstable", "train_score_collapse > 0.3 or entropy_growth_ratio > 1.5", 2.0,
            ("smaller_steps", "anchor", "sharpen"), ("bigger_steps", "explore", "unanchor"),
            "the policy drifts: training score or entropy swing"),
    Symptom("degenerate", "degenerate_rate > 0.05 or empty_response_rate > 0.05 or format_failure_rate > 0.1", 2.0,
            ("sharpen", "smaller_steps"), ("explore",), "responses degenerate or break the answer format"),
    Symptom("truncated", "truncation_rate > 0.05", 2.0, ("longer_responses",), (), "responses hit the length cap"),
    Symptom("far_from_reference", "kl_to_ref > 0.05", 1.0, ("unanchor",), ("anchor",),
            "the KL pull toward the reference policy is large"),
    Symptom("component_dominates", f"{COMPONENT_MISALIGNED} > {MISALIGNED_SHARE} and {COMPONENT_ALIGNED} >= "
            f"{ALIGNED_CORR}", 3.0, ("reward_component",), (),
            "a reward component moves the reward within groups without moving with the strict score"),
    Symptom("dead_sources", "dead_source_share >= 0.3", 1.0, ("data_drop",), (),
            "a share of the batch comes from data sources whose groups are mostly dead"),
    Symptom("filter_biased", f"filter_reward_bias > {BIASED_REWARD_GAP}", 3.0, ("filter_std",), (),
            "of the groups that carry signal, the filter keeps those the policy already does well on and drops "
            "the hard ones"),
    Symptom("heldout_uncovered", f"source_mix_gap > {MIX_GAP_WARNING}", 3.0, ("data_cover",), (),
            "training practises another mix of data sources than the held-out set measures"),
)  # fmt: skip
SYMPTOM_NAMES = frozenset(s.name for s in SYMPTOMS)
# Symptoms whose evidence names one knob (the filter's kept groups, the data mix against the held-out set, one
# reward component against the strict score), not a general state of training: the probes they support rank
# above any probe supported by general symptoms only (however many), and are proposed without a stall too
# (`UNPROMPTED`). On greedy-filter seed 1 the temperature and group-size probes (no diversity, low spread, dead
# groups: 4.0) outranked the std-filter probe (filter_biased: 3.0) and the filter was never changed.
PINPOINTING = frozenset({"filter_drops_signal", "filter_keeps_dead", "filter_biased", "heldout_uncovered",
                         "component_dominates"})  # fmt: skip
OUT_OF_RANGE = "out_of_range"
OUT_OF_RANGE_WEIGHT = 3.0
# A setting outside the range its backend documents is a misconfiguration whether or not held-out accuracy
# stalled yet (the cold-sampling scenario gained +0.03 in its first 40 steps at temperature 0.1, then fell
# 0.13 behind the oracle): its probe is proposed without a stall, and ranks like a pinpointing symptom's.
UNPROMPTED = frozenset({OUT_OF_RANGE, *PINPOINTING})

# The minimal group filter a filter probe installs: drop only groups without reward variance.
KEEP_LIVE_FILTER = '''"""Group filter: keep every group whose rewards vary; drop only zero-variance ("dead") groups.

Installed by an EvoTrainer exploration probe: the harness's filter dropped groups that carry signal.
Contract: filter_groups(group_rewards, state) -> one keep flag per group; `state` is unused.
"""

from statistics import pstdev

ZERO_STD = 1e-6


def filter_groups(group_rewards, state):
    """Return one keep flag per group (True = use the group for the policy update)."""
    return [len(g) > 1 and pstdev(g) > ZERO_STD for g in group_rewards]
'''


@dataclass(frozen=True)
class Abnormal:
    """A symptom that holds on the metrics, with the comparisons that held (the evidence)."""

    symptom: Symptom
    evidence: tuple[str, ...]


@dataclass
class _Draft:
    probe_id: str
    knob: str  # one probe per knob and iteration
    factor: str
    slug: str
    ops: list[dict[str, object]]
    params: dict[str, float | int | str]
    effects: tuple[str, ...]
    what: str
    why: str
    range_symptom: Symptom | None = None
    support: list[Abnormal] = field(default_factory=list)

    @property
    def score(self) -> float:
        return sum(a.symptom.weight for a in self.support)

    @property
    def pinpointed(self) -> float:
        """The weight of the support that names this probe's knob (`PINPOINTING`, `OUT_OF_RANGE`)."""
        return sum(a.symptom.weight for a in self.support if a.symptom.name in UNPROMPTED)


def stalled(metrics: Metrics) -> bool:
    """Return True when held-out accuracy stalled or fell within the incumbent's run (unknown: not stalled)."""
    return evaluate(STALL, metrics)


def abnormal(metrics: Metrics, symptoms: Sequence[Symptom] = SYMPTOMS) -> list[Abnormal]:
    """The symptoms whose predicate holds on `metrics` (a missing metric never makes one hold)."""
    return [Abnormal(s, tuple(matched_terms(s.predicate, metrics))) for s in symptoms if evaluate(s.predicate, metrics)]


def symptom_key(found: Iterable[Abnormal]) -> str:
    """The symptom signature case memory files a probe under: the abnormal symptoms' names, sorted."""
    return "+".join(sorted({a.symptom.name for a in found})) or "none"


def case_key(probe_id: str, signature: str) -> str:
    """The key of one (probe, symptom signature) pair in case memory."""
    return f"{probe_id}@{signature}"


def component_variables(components: Sequence[ComponentEvidence]) -> dict[str, float]:
    """Trigger variables for the reward's components: the best strict correlation of any component, and the
    largest within-group share of a component that does not move with the strict score."""
    if len(components) < 2:
        return {}
    aligned = [c.strict_corr for c in components if not math.isnan(c.strict_corr)]
    misaligned = [
        c.within_group_share
        for c in components
        if not math.isnan(c.within_group_share) and not (c.strict_corr >= ALIGNED_CORR)
    ]
    out: dict[str, float] = {}
    if aligned:
        out[COMPONENT_ALIGNED] = max(aligned)
    if misaligned:
        out[COMPONENT_MISALIGNED] = max(misaligned)
    return out


def propose_probes(
    knobs: HarnessKnobs,
    metrics: Metrics,
    *,
    tried: Iterable[str],
    blocked: Mapping[str, str],
    max_candidates: int,
    only: frozenset[str] | None = None,
) -> list[Proposal]:
    """Rank single-factor probes by the abnormal symptoms they address; at most one per knob, best first.

    `tried` are probe skill names this session settled (`agent.nodes.propose.settled_skills`); `blocked` the
    case-memory outcomes of earlier tries by `case_key`; `only`, when given, keeps the probes that address one
    of these symptoms (`UNPROMPTED`: what is proposed without a stall).
    """
    found = abnormal(metrics)
    signature = symptom_key(found)
    drafts = [*_trainer(knobs.trainer), *_filter(knobs), *_data(knobs, metrics), *_reward(knobs)]
    tried_names = set(tried)
    chosen: dict[str, _Draft] = {}
    for draft in drafts:
        if draft.range_symptom is not None:
            draft.support.append(Abnormal(draft.range_symptom, (draft.range_symptom.text,)))
        draft.support += [a for a in found if set(a.symptom.needs) & set(draft.effects)]
        if any(set(a.symptom.forbids) & set(draft.effects) for a in found):
            continue
        if _name(draft) in tried_names or not _ladder_allows(draft, signature, blocked):
            continue
        if only is not None and not {a.symptom.name for a in draft.support} & only:
            continue
        best = chosen.get(draft.knob)
        if best is None or draft.score > best.score:
            chosen[draft.knob] = draft
    ranked = sorted(chosen.values(), key=lambda d: (-d.pinpointed, -d.score))  # stable: declaration order breaks ties
    supported = [d for d in ranked if d.score > 0]
    picked = (supported or ranked)[:max_candidates]
    return [_proposal(d, found, signature, metrics) for d in picked]


def _ladder_allows(draft: _Draft, signature: str, blocked: Mapping[str, str]) -> bool:
    """The same probe on the same signature is not retried, except a move without magnitudes (a filter, data or
    reward probe) whose evidence was thin ("insufficient": the session's `MAX_TRIES` still bounds it); a
    regressed move is not pushed further; a larger magnitude needs the smaller one tried with thin evidence
    first. (greedy-filter seed 1: the std-filter probe's pilot gained +0.057 but its replicate tied, so it was
    pruned, and the filter stayed biased for the rest of the session.)"""
    before = blocked.get(case_key(draft.probe_id, signature))
    if before is not None:
        return before == "insufficient" and (draft.factor != "trainer" or draft.probe_id.endswith(":default"))
    if draft.factor != "trainer" or draft.probe_id.endswith(":default"):
        return True
    stem, magnitude = draft.probe_id.rsplit(":", 1)
    rung = int(magnitude.removeprefix("m"))
    earlier = [blocked.get(case_key(f"{stem}:m{i}", signature)) for i in range(rung)]
    return "regression" not in earlier and all(outcome is not None for outcome in earlier)


def _trainer(knobs: Sequence[TrainerKnob]) -> list[_Draft]:
    out: list[_Draft] = []
    for knob in knobs:
        spec = knob.spec
        lo, hi = spec.safe_min, spec.safe_max
        if not knob.in_range:
            direction = "up" if knob.current < lo else "down"
            rel = "above" if direction == "down" else "below"
            symptom = Symptom(
                OUT_OF_RANGE,
                f"setting__{spec.key} {'>' if direction == 'down' else '<'} {hi if direction == 'down' else lo}",
                OUT_OF_RANGE_WEIGHT,
                (),
                text=f"{spec.key} = {knob.current:g} is {rel} its safe range [{lo:g}, {hi:g}]",
            )
            value = "{{ int(default) }}" if spec.kind == "int" else "{{ default }}"
            out.append(
                _Draft(
                    probe_id=f"trainer:{spec.key}:default",
                    knob=spec.key,
                    factor="trainer",
                    slug=f"{spec.key}-default",
                    ops=[_set(knob, value)],
                    params={"default": spec.default},
                    effects=(),
                    what=f"set {spec.key} from {knob.current:g} back to its documented default {spec.default:g}",
                    why=f"{spec.key} lies {rel} the range this backend trains well in",
                    range_symptom=symptom,
                )
            )
            continue
        for move in spec.moves:
            for rung, factor in enumerate(move.factors):
                base = spec.from_zero if knob.current == 0 and move.direction == "up" and spec.from_zero else None
                new = _clamp(base if base is not None else knob.current * factor, lo, hi, spec.kind)
                if new == knob.current:
                    break  # at the edge of the safe range: no move left this way
                expr = (
                    f"max(current * {factor!r}, from_zero)" if spec.from_zero and move.direction == "up" else
                    f"current * {factor!r}"
                )  # fmt: skip
                bounded = f"min(max({expr}, safe_min), safe_max)"
                value = f"{{{{ int({bounded}) }}}}" if spec.kind == "int" else f"{{{{ {bounded} }}}}"
                params: dict[str, float | int | str] = {"safe_min": lo, "safe_max": hi}
                if spec.from_zero:
                    params["from_zero"] = spec.from_zero
                out.append(
                    _Draft(
                        probe_id=f"trainer:{spec.key}:{move.direction}:m{rung}",
                        knob=spec.key,
                        factor="trainer",
                        slug=f"{spec.key}-{move.direction}-x{factor:g}".replace(".", "p"),
                        ops=[_set(knob, value)],
                        params=params,
                        effects=move.effects,
                        what=f"move {spec.key} {move.direction} from {knob.current:g} to {new:g} (x{factor:g}, "
                        f"kept in its safe range [{lo:g}, {hi:g}])",
                        why=move.why,
                    )
                )
    return out


def _set(knob: TrainerKnob, value: str) -> dict[str, object]:
    """The op that sets a knob. It always may create the key, reading the backend's default as its current
    value (what the trainer uses when the key is absent): a skill learned from this probe must also apply to
    a harness whose settings file does not write the key."""
    return {
        "op": "set_yaml_key",
        "file": knob.file,
        "key": knob.spec.key,
        "value": value,
        "create": True,
        "default": knob.spec.default,
    }


def _clamp(value: float, lo: float, hi: float, kind: str) -> float:
    bounded = min(max(value, lo), hi)
    return float(int(bounded)) if kind == "int" else bounded


def _filter(knobs: HarnessKnobs) -> list[_Draft]:
    if knobs.filter_file is None or knobs.filter_source.strip() == KEEP_LIVE_FILTER.strip():
        return []
    from skills.seeds import STD_GROUP_FILTER

    out = [
        _Draft(
            probe_id="filter:keep-live",
            knob="@group_filter",
            factor="filter",
            slug="filter-keep-live",
            ops=[{"op": "replace_file", "file": "@group_filter", "content": KEEP_LIVE_FILTER}],
            params={},
            effects=("filter_keep_live", "more_signal"),
            what="replace the group filter with one that keeps every group whose rewards vary",
            why="every group with reward variance carries GRPO signal; dropping them starves the update",
        )
    ]
    if not knobs.filter_noop and knobs.filter_source.strip() != STD_GROUP_FILTER.strip():
        out.append(
            _Draft(
                probe_id="filter:std",
                knob="@group_filter",
                factor="filter",
                slug="filter-std",
                ops=[{"op": "replace_file", "file": "@group_filter", "content": STD_GROUP_FILTER}],
                params={},
                effects=("filter_std",),
                what="replace the group filter with the standard StdGroupFilter (paper App. C)",
                why="StdGroupFilter drops dead and low-information groups but keeps at least half of the live ones",
            )
        )
    return out


_ENTRY = re.compile(r"[^a-z0-9]+")


def _data(knobs: HarnessKnobs, metrics: Metrics) -> list[_Draft]:
    """Data-selection probes: zero the positive-weight entry whose training groups are most often dead
    (per-source table), or set the mix to the held-out set's (when the two mixes differ)."""
    if knobs.data_file is None:
        return []
    return [*_data_drop(knobs, metrics), *_data_cover(metrics)]


# Below this total-variation distance between the training and held-out mixes there is nothing to cover.
MIN_COVER_GAP = 0.05


def _data_cover(metrics: Metrics) -> list[_Draft]:
    gap = metrics.get("source_mix_gap")
    heldout = any(k.startswith(HELDOUT_SOURCE_SHARE) for k in metrics)
    if not heldout or not isinstance(gap, int | float) or not gap > MIN_COVER_GAP:
        return []
    return [
        _Draft(
            probe_id="data:match-heldout",
            knob="@data_selection",
            factor="data",
            slug="data-match-heldout",
            ops=[{"op": "match_heldout_sources", "file": "@data_selection", "key": "weights"}],
            params={},
            effects=("data_cover",),
            what=f"set the training mix of data sources to the held-out set's ({gap:.0%} apart now)",
            why="the policy improves on what it practises, and the held-out set measures another mix",
        )
    ]


def _data_drop(knobs: HarnessKnobs, metrics: Metrics) -> list[_Draft]:
    weights = knobs.data_weights
    if sum(1 for w in weights.values() if w > 0) < 2:
        return []
    ratios = {
        entry: float(v)
        for entry, w in weights.items()
        if w > 0 and isinstance(v := metrics.get(f"source_dead_ratio/{entry}"), int | float) and v == v
    }
    if not ratios:
        return []
    worst = max(ratios, key=lambda e: ratios[e])
    slug = "data-drop-" + _ENTRY.sub("-", worst.lower()).strip("-")[-24:]
    return [
        _Draft(
            probe_id=f"data:drop:{worst}",
            knob="@data_selection",
            factor="data",
            slug=slug,
            ops=[
                {
                    "op": "reweight_sources",
                    "file": "@data_selection",
                    "key": "weights",
                    "dead_at": "{{ dead_at }}",
                    "min_groups": "{{ min_groups }}",
                }
            ],
            params={"dead_at": round(max(min(ratios[worst], 1.0), 1e-3), 4), "min_groups": 8},
            effects=("data_drop",),
            what=f"set the weight of data entry {worst!r} to 0 ({ratios[worst]:.0%} of its groups dead), the others "
            "sharing its weight",
            why="a source whose groups are mostly dead spends the batch without signal",
        )
    ]


def _reward(knobs: HarnessKnobs) -> list[_Draft]:
    """Train on the reward component that agrees best with the strict score, when another one does not."""
    comps = [c for c in knobs.components if not math.isnan(c.strict_corr)]
    if len(knobs.components) < 2 or not comps:
        return []
    best = max(comps, key=lambda c: c.strict_corr)
    if best.strict_corr < ALIGNED_CORR:
        return []
    others = ", ".join(c.name for c in knobs.components if c.name != best.name)
    return [
        _Draft(
            probe_id=f"reward:only:{best.name}",
            knob="@reward",
            factor="reward",
            slug="reward-only-" + _ENTRY.sub("-", best.name.lower()).strip("-")[:24],
            ops=[{"op": "score_from_component", "file": "@reward", "component": best.name}],
            params={},
            effects=("reward_component",),
            what=f"train on the reward component {best.name!r} alone (corr. with strict {best.strict_corr:+.2f}); "
            f"drop {others} from the score (still logged)",
            why="a component unrelated to correctness moves samples within a group at random",
        )
    ]


def _name(draft: _Draft) -> str:
    """The probe's skill name and branch slug (the skill-name pattern: lower-case letters, digits, hyphens)."""
    return "probe-" + _ENTRY.sub("-", draft.slug.lower()).strip("-")[:100]


def _proposal(draft: _Draft, found: Sequence[Abnormal], signature: str, metrics: Metrics) -> Proposal:
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
