"""The symptom table: abnormal health metrics an exploration probe addresses.

- `SYMPTOMS` is the table: a symptom is a trigger-language predicate over documented metric names
  (`skills/triggers.py`; a metric the report lacks leaves it unknown, i.e. not abnormal), a weight, the
  knob effects that address it (`trainer_backend.knobs.Effect`, or a filter/data/reward probe kind) and
  the effects it forbids (no probe makes updates bigger while they already jump);
- a trainer setting outside its documented safe range is a symptom of its own (`OUT_OF_RANGE`, built per
  setting by `agent/policies/probe_drafts.py`);
- `PINPOINTING` symptoms name one knob; they and `OUT_OF_RANGE` (`UNPROMPTED`) are acted on without a stall;
  the probes of a `BLOCKING` one (nothing else can show an effect while it holds) come before matching skills;
- `STALL`: held-out strict accuracy stalled or fell within the incumbent's run (`stalled`);
- `abnormal` evaluates the table on a report's metrics (with the comparisons that held as evidence),
  `symptom_key` is the signature case memory files a probe under, and `component_variables` derives the
  trigger variables of the reward's components the table reads.

Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agent.decisions.knobs import ComponentEvidence
from agent.policies.heuristic import Metrics, Proposal
from diagnostics.env_replay import CHANGED_WARNING
from diagnostics.groups import BIASED_REWARD_GAP
from diagnostics.score import MISRANKED_GROUP_CRITICAL, REWARDED_WRONG_CRITICAL, UNREWARDED_CORRECT_CRITICAL
from diagnostics.sources import MIX_GAP_WARNING
from diagnostics.tool_results import REFUSED_WARNING
from skills.triggers import evaluate, matched_terms

# Held-out strict accuracy stalls or falls: its gain within the incumbent's run is below this (a healthy
# 40-step run of the demo's fixed harness gains +0.08; later runs +0.01 to +0.04, so late runs probe too,
# and only a replicated improvement of at least --min-effect merges).
STALL_GAIN = 0.03
STALL = f"strict_acc_delta < {STALL_GAIN}"

# A reward component that moves the reward within groups but not with the strict score ("a reward
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
    # Cut after the answer was written: the policy does not stop at its end of turn, and a longer budget only
    # buys more trailing text (the wrong stop: no end-of-turn token); nothing a trainer knob moves addresses it.
    # The policy the run started from never writes the answer format (an instruct model as it ships): no
    # trainer knob that continues it can create the reward variance GRPO needs; a warm start can.
    # It outweighs an out-of-range setting (3.0): until some response is well-formed, nothing else trains.
    Symptom("format_never_written", "answer_written_rate_first_steps < 0.01", 4.0, ("teach_format",), (),
            "the policy the run started from never writes the answer format, so every group is flat"),
    Symptom("runs_past_answer", "runs_past_answer_rate > 0.15", 1.0, (), ("longer_responses",),
            "responses write their answer and run on to the token cap"),
    Symptom("far_from_reference", "kl_to_ref > 0.05", 1.0, ("unanchor",), ("anchor",),
            "the KL pull toward the reference policy is large"),
    Symptom("component_dominates", f"{COMPONENT_MISALIGNED} > {MISALIGNED_SHARE} and {COMPONENT_ALIGNED} >= "
            f"{ALIGNED_CORR}", 3.0, ("reward_component",), (),
            "a reward component moves the reward within groups without moving with the strict score"),
    # The reward and the protected evaluator disagree on the training rollouts at the critical level: the reward
    # pays wrong responses (or ranks a group's wrong samples above its right ones), or withholds pay from right
    # ones. A knob of the reward's code that pays fewer wrong / more right ones addresses it, or training on the
    # component that agrees with the strict score.
    Symptom("reward_pays_wrong", f"rewarded_wrong_rate > {REWARDED_WRONG_CRITICAL} or misranked_group_rate > "
            f"{MISRANKED_GROUP_CRITICAL}", 2.0, ("reward_component", "pay_fewer_wrong"), (),
            "the reward pays wrong responses (the strict evaluator fails them)"),
    Symptom("reward_misses_right", f"unrewarded_correct_rate > {UNREWARDED_CORRECT_CRITICAL}", 2.0,
            ("reward_component", "pay_more_right"), (),
            "the reward withholds pay from right responses (the strict evaluator passes them)"),
    Symptom("dead_sources", "dead_source_share >= 0.3", 1.0, ("data_drop",), (),
            "a share of the batch comes from data sources whose groups are mostly dead"),
    Symptom("filter_biased", f"filter_reward_bias > {BIASED_REWARD_GAP}", 3.0, ("filter_std",), (),
            "of the groups that carry signal, the filter keeps those the policy already does well on and drops "
            "the hard ones"),
    Symptom("heldout_uncovered", f"source_mix_gap > {MIX_GAP_WARNING}", 3.0, ("data_cover",), (),
            "training practises another mix of data sources than the held-out set measures"),
    Symptom("env_carries_state", f"env_replay_changed_rate > {CHANGED_WARNING}", 3.0, ("env_isolate",), (),
            "replayed in another order against fresh environments, the environment answers recorded calls "
            "otherwise: state leaks from one episode into the next"),
    Symptom("env_refuses_calls", f"refused_known_call_rate > {REFUSED_WARNING}", 3.0, ("env_allows_more",), (),
            "the environment refuses well-formed calls it answers in other episodes (a limit of its code binds)"),
)  # fmt: skip
SYMPTOM_NAMES = frozenset(s.name for s in SYMPTOMS)
# Symptoms whose evidence names one knob (the filter's kept groups, the data mix against the held-out set, one
# reward component against the strict score), not a general state of training: the probes they support rank
# above any probe supported by general symptoms only (however many), and are proposed without a stall too
# (`UNPROMPTED`). On greedy-filter seed 1 the temperature and group-size probes (no diversity, low spread, dead
# groups: 4.0) outranked the std-filter probe (filter_biased: 3.0) and the filter was never changed.
PINPOINTING = frozenset({"filter_drops_signal", "filter_keeps_dead", "filter_biased", "heldout_uncovered",
                         "component_dominates", "format_never_written", "env_refuses_calls",
                         "env_carries_state"})  # fmt: skip
# Symptoms under which no other change can show an effect (no response is well-formed, so every group is flat
# whatever the reward, filter, data or step size): the probes that address them take the first candidate
# slots, ahead of the skills that match (agent/nodes/propose.py).
BLOCKING = frozenset({"format_never_written"})
OUT_OF_RANGE = "out_of_range"
OUT_OF_RANGE_WEIGHT = 3.0
# A setting outside the range its backend documents is a misconfiguration whether or not held-out accuracy
# stalled yet (the cold-sampling scenario gained +0.03 in its first 40 steps at temperature 0.1, then fell
# 0.13 behind the oracle): its probe is proposed without a stall, and ranks like a pinpointing symptom's.
# A gate of the reward's code (`if COND: return 0`) whose payout most of the strict-right responses the reward
# fails carry (`agent/decisions/reward_gates.py`): the evidence names the gate, so its probe is proposed
# without a stall and ranks like a pinpointing symptom's (synth-format-gate: a character check paid 0 to
# every program with `%` or a call, and no declared knob could answer it).
GATE_FAILS_RIGHT = "gate_fails_right"
GATE_WEIGHT = 3.0
# A reward that pays wrong responses while its code never reads the reference answer (ground_truth): it judges
# against something else (`harness/code_reference.py`); the code names where (synth-shown-tests: the examples
# the prompt shows), so its probes are proposed without a stall too.
REFERENCE_UNREAD = "reference_unread"
UNPROMPTED = frozenset({OUT_OF_RANGE, GATE_FAILS_RIGHT, REFERENCE_UNREAD, *PINPOINTING})
# Probes that repair a reward defect the evidence names in its code. Aimed at a disagreement alert, their
# backtest must show that disagreement fall on the cached rollouts (`diagnostics/backtest.py: MUST_FALL`),
# the hack corpus holding: that is prior evidence the old code is wrong, as a documented range is for a setting,
# so their pilot is held to non-inferiority (`agent.decisions.evidence.classify_restoration`). (synth-format-gate
# seed 1: the gate's pilot gained +0.071, CI [+0.000, +0.142], and was pruned for thin evidence.)
PROVEN_REPAIRS = frozenset({GATE_FAILS_RIGHT, REFERENCE_UNREAD})
# Evidence that names one faulty place of the harness's own code: a proven repair, an env limit that refuses
# calls the env answers elsewhere (env-lookup-limit: two generic seed skills took both slots of iteration 1
# while the refusals named the env's declared limit), and, for a constant of the harness's code (never a trainer
# setting, whose documented range is the backend's, not the harness's), its value outside its declared range.
# The best such probe takes a slot before the matching skills (`agent/nodes/propose.py`).
NAMED = frozenset({*PROVEN_REPAIRS, "env_refuses_calls", "env_carries_state"})


@dataclass(frozen=True)
class Abnormal:
    """A symptom that holds on the metrics, with the comparisons that held (the evidence)."""

    symptom: Symptom
    evidence: tuple[str, ...]


def names_its_fault(proposal: Proposal) -> bool:
    """True for a probe whose evidence names the faulty place of the harness's own code (`NAMED`)."""
    probe = proposal.probe
    if probe is None:
        return False
    code = not probe.probe_id.startswith("trainer:")
    return bool(set(probe.symptoms) & NAMED) or (code and OUT_OF_RANGE in probe.symptoms)


def stalled(metrics: Metrics) -> bool:
    """Return True when held-out accuracy stalled or fell within the incumbent's run (unknown: not stalled)."""
    return evaluate(STALL, metrics)


def abnormal(metrics: Metrics, symptoms: Sequence[Symptom] = SYMPTOMS) -> list[Abnormal]:
    """The symptoms whose predicate holds on `metrics` (a missing metric never makes one hold)."""
    return [Abnormal(s, tuple(matched_terms(s.predicate, metrics))) for s in symptoms if evaluate(s.predicate, metrics)]


def symptom_key(found: Iterable[Abnormal]) -> str:
    """The symptom signature case memory files a probe under: the abnormal symptoms' names, sorted."""
    return "+".join(sorted({a.symptom.name for a in found})) or "none"


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
