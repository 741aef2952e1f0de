"""Every critical alert gets a candidate or a reason.

A critical alert on the incumbent's report is evidence enough to act: the heuristic policy does not wait for
held-out accuracy to stall before it tries a move aimed at one (`agent/nodes/propose.py`). What a move is
aimed at is read from the evidence vocabulary, never from an alert's name alone:

- an alert grades one metric (the first name of its rule, e.g. `dead_group_ratio` of `signal.dead_groups`);
  the symptoms of the probe table (`agent/policies/symptoms.py`) whose predicates read that metric are aimed
  at it, and `AIMS` names them where the alert grades another metric than the symptom reads (the answer rate
  of the first steps, say, or a rule over several metrics);
- a probe is aimed at the alert when the symptoms supporting it include one of those; a stored skill when its
  trigger reads the alert's metric or a metric those symptoms read;
- the alert is the probe's evidence (`as_evidence`): the symptom counts as held whatever its own threshold;
- `NO_PROBE` lists the alerts no change of the harness can answer, with the reason the report prints.

When nothing aimed at a critical alert is proposed, the session records one line saying why (no symptom or
knob reaches it, every move aimed at it was tried or is forbidden, or the iteration's slots were taken), and
the session report shows it next to the iteration's candidates. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agent.policies.heuristic import Metrics, Proposal
from agent.policies.symptoms import SYMPTOMS, Abnormal, Symptom
from diagnostics.findings import Finding, Severity
from skills.triggers import parse

# The case-memory signature key under which an iteration records what answers its critical alerts.
ALERT_ANSWERS = "critical_alerts"

# Alerts whose rule grades another metric than the symptoms aimed at them read (or several metrics).
AIMS: Mapping[str, tuple[str, ...]] = {
    "behaviour.format_never_written": ("format_never_written",),
    "behaviour.exploration_collapse": ("exploration_collapse", "no_diversity"),
    # graded on the groups that reached the update where the trainer logs them (after the filter)
    "signal.dead_groups": ("dead_groups", "filter_keeps_dead"),
    "signal.dead_training": ("dead_groups", "tiny_updates"),
    "signal.coarse_reward": ("dead_groups", "low_spread"),
    "signal.advantage_extreme": ("big_updates", "unstable"),
    "score.reward_hacking": ("reward_pays_wrong", "component_dominates"),
    "score.rewarded_wrong": ("reward_pays_wrong", "component_dominates"),
    "score.unrewarded_correct": ("reward_misses_right", "component_dominates"),
    "score.misranked_groups": ("reward_pays_wrong", "component_dominates"),
    "score.strict_regression": ("unstable", "big_updates"),
    "version.reward_hacking": ("reward_pays_wrong", "component_dominates"),
}

# Rollout ids (`run_id/step/prompt_id/sample_index`) of the alert's evidence a probe's hypothesis cites.
EVIDENCE_IDS = 3

# Alerts no single change of the harness answers, and why.
NO_PROBE: Mapping[str, str] = {
    "score.no_strict_score": "the run has no strict score, so no change can be judged: make the harness's "
    "evaluator score the held-out prompts first",
    "version.new_critical": "it counts the critical alerts this version added over its parent; each of those "
    "is answered on its own",
    "version.strict_regression": "it compares this version with its parent: a rollback (the decision's move), "
    "not a probe, answers it",
    "agentic.env_nondeterministic": "no isolation of episodes makes a random stream or a clock repeat itself: "
    "seed what the environment draws from its row (an `env` candidate may edit that code)",
    "agentic.tool_result_misleads": "no declared knob says which answer of the environment's code is wrong: check "
    "the tool's answers to the call its evidence episodes made (an `env` candidate may edit that code)",
}


@dataclass(frozen=True)
class CriticalAlert:
    """A critical alert of the incumbent's report and what may be aimed at it."""

    alert_id: str
    metric: str  # the metric its rule grades ("" when the rule names none the report has)
    symptoms: tuple[Symptom, ...]  # the probe table's symptoms aimed at it
    reads: frozenset[str]  # the metric names a skill trigger is aimed at it through
    evidence: str  # the alert's comparison, with its value and a few evidence rollout ids
    no_probe: str = ""  # why no change of the harness answers it ("" when one may)

    def as_evidence(self) -> list[Abnormal]:
        """The symptoms aimed at this alert, held on the alert's evidence."""
        return [Abnormal(s, (self.evidence,)) for s in self.symptoms]


@dataclass(frozen=True)
class AlertAnswer:
    """What answers one critical alert in one iteration: candidate ids, or the reason there is none."""

    alert_id: str
    candidates: tuple[str, ...]
    reason: str

    def line(self) -> str:
        """The answer in one line."""
        if self.candidates:
            return f"{self.alert_id}: {', '.join(self.candidates)}"
        return f"{self.alert_id}: no candidate, because {self.reason}"


def critical_alerts(
    findings: Sequence[Finding], metrics: Metrics, symptoms: Sequence[Symptom] = SYMPTOMS
) -> list[CriticalAlert]:
    """The fired critical findings, each with the symptoms aimed at it (in the report's order)."""
    by_name = {s.name: s for s in symptoms}
    out: list[CriticalAlert] = []
    for f in findings:
        if f.severity is not Severity.CRITICAL or f.inconclusive or any(a.alert_id == f.alert_id for a in out):
            continue
        head = f.rule.split(" ", 1)[0]
        metric = head if head in metrics else ""
        if f.alert_id in AIMS:
            aimed = tuple(by_name[n] for n in AIMS[f.alert_id] if n in by_name)
        else:
            aimed = tuple(s for s in symptoms if metric and metric in parse(s.predicate).names)
        reads = frozenset({metric} - {""}) | frozenset(n for s in aimed for n in parse(s.predicate).names)
        value = f" ({f.value:.3g})" if math.isfinite(f.value) else ""
        ids = f"; e.g. {', '.join(f.evidence_rollout_ids[:EVIDENCE_IDS])}" if f.evidence_rollout_ids else ""
        out.append(
            CriticalAlert(
                alert_id=f.alert_id,
                metric=metric,
                symptoms=aimed,
                reads=reads,
                evidence=f"critical alert {f.alert_id}: {f.rule}{value}{ids}",
                no_probe=NO_PROBE.get(f.alert_id, ""),
            )
        )
    return out


def aims(proposal: Proposal, alerts: Sequence[CriticalAlert]) -> list[str]:
    """The ids of the alerts `proposal` is aimed at (see the module docstring)."""
    if proposal.probe is not None:
        held = set(proposal.probe.symptoms)
        return [a.alert_id for a in alerts if held & {s.name for s in a.symptoms}]
    hit = {a for spec in proposal.skills for a in trigger_aims(spec.trigger, alerts)}
    return [a.alert_id for a in alerts if a.alert_id in hit]


def trigger_aims(trigger: str, alerts: Sequence[CriticalAlert]) -> list[str]:
    """The ids of the alerts a skill with this trigger is aimed at: those whose metrics it reads."""
    reads = parse(trigger).names
    return [a.alert_id for a in alerts if reads & a.reads]


def unaimed_reason(alert: CriticalAlert, probe_gap: str) -> str:
    """Why no probe is aimed at `alert`, given the probe table's answer (`explore.why_no_probe`)."""
    if alert.no_probe:
        return alert.no_probe
    if not alert.symptoms:
        what = f"its metric {alert.metric}" if alert.metric else "its rule"
        return f"no symptom of the probe table reads {what}, and no stored skill aimed at it matched"
    return probe_gap
