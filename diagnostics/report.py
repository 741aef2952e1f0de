"""Assemble a run's health report from its artefact folder (the one place diagnostics read a run).

`build_report(run_dir, answer=...)` reads `metrics.jsonl` through the tolerant schema reader and the rollout
files once, column-wise, into a run table (`diagnostics/table.py`; a corrupt or half-written line becomes a
`ReadProblem` with file and line, the rest is still reported), runs the four layers over the table and
returns a `HealthReport`. `report_from_table` does the same for a table the caller already holds (the
session shares one table per run between its steps).

Which rollouts feed which layer: the signal and behaviour layers use the training rollouts (validation
rollouts when a run has none); the score layer uses both (strict scores come from validation first); the
per-source table (`diagnostics/sources.py`) uses the training rollouts only, since it judges the training
data selection. The agentic layer (`diagnostics/agentic.py`) reads the same rows as the behaviour layer and
adds nothing to a run without agentic episodes. The format and answer rules read the harness's declared
answer protocol; without one they are not evaluated and the report's `notes` say so.

No silent blind spots: every rule that could not be evaluated (its value is NaN: no rollouts, no
strict scores, a metric the trainer does not log, too few groups) is listed in `notes` with the reason, the
layer's own where it knows one (`LayerOutput.notes`), else which input had no data. A rule that declared
itself inconclusive for the run (`diagnostics.findings`, "Applicability") is listed with its reason too, and
the metric it grades reads as unknown (NaN) in `metrics`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from diagnostics.agentic import diagnose_agentic
from diagnostics.agentic_docs import AGENTIC_METRIC_DOCS, REPLAY_METRIC_DOCS
from diagnostics.behaviour import NO_ANSWER_PROTOCOL, diagnose_behaviour
from diagnostics.findings import Finding, HealthReport, LayerOutput, rule_metric
from diagnostics.groups import diagnose_groups
from diagnostics.schema import METRICS_FILE, ROLLOUTS_DIR, MetricRow, ReadProblem, read_metrics
from diagnostics.score import diagnose_score
from diagnostics.signal import diagnose_signal
from diagnostics.sources import diagnose_coverage, diagnose_sources
from diagnostics.table import RunTable, read_run_table
from diagnostics.tool_roles import DEFAULT_ROLES, ToolRoles
from diagnostics.updates import diagnose_updates
from diagnostics.version import compare_siblings, diagnose_version
from harness.answers import AnswerProtocol

# What the headline metrics mean; the controller and skill triggers read these keys.
METRIC_DOCS = {
    "strict_acc": "mean strict score at the last step that has one (validation first)",
    "strict_acc_delta": "strict score: last-window mean - first-window mean within this run",
    "train_reward_mean": "training reward at the last step (critic/score/mean, else rollouts)",
    "train_reward_delta": "training reward: last-window mean - first-window mean within this run",
    "reward_hacking": "1 when reward rose while the strict score stayed flat/down (within run or vs parent); NaN, "
    "with a note, when neither trend could be checked (fewer than 2 steps with strict scores or rewards)",
    "rewarded_wrong_rate": "share of strict-wrong rollouts rewarded like correct ones",
    "shared_reward/<metric>": "the largest reward_hacking, rewarded_wrong_rate, unrewarded_correct_rate or "
    "misranked_group_rate over the last iteration's arms that trained this run's reward code (added by the "
    "session's diagnose step, diagnostics/shared_reward.py; score.shared.<rule> fires when the rule fired there "
    "and not here); skill triggers read the larger of it and the run's own value",
    "dead_group_ratio": "share of GRPO groups whose reward std < 1e-6",
    "dead_source_share": "share of training groups from dead data sources (>= 50% of their groups dead)",
    "source_mix_gap": "total-variation distance between the training and the held-out rollouts' data-source mix "
    "(signal.source_mix_gap: > 0.3 warning; NaN when either names no data_source)",
    "source_dead_ratio/<data_source>": "dead-group ratio of one training data source (also source_groups/, "
    "source_reward_mean/, source_strict_acc/, source_truncation_rate/)",
    "reward_spread": "mean within-group reward std",
    "truncation_rate": "share of responses cut at the length cap",
    "length_reward_corr": "Pearson corr(response length, reward)",
    "degenerate_rate": "share of repetitive/degenerate responses",
    "format_failure_rate": "share of single-turn responses without an answer the declared protocol reads "
    "(NaN, with a note, when the harness declares no answer protocol)",
    "answer_written_rate": "share of single-turn responses holding at least one match of the declared answer "
    "pattern (behaviour.format_never_written: < 0.01 critical, from 16 responses of which 8 ended before the "
    "token cap; NaN without a protocol)",
    "answer_written_rate_first_steps": "share of the single-turn responses that ended on their own (not at the "
    "token cap) in the run's first steps holding 8 of them that hold an answer: whether the policy the run "
    "started from writes the answer format at all (NaN below 8 such responses)",
    "runs_past_answer_rate": "share of single-turn responses that wrote an answer, went on writing after it and ran "
    "to the token cap (behaviour.runs_past_answer: > 0.15 warning, > 0.5 critical: the policy is not stopped at its "
    "end of turn)",
    "vs_parent/<metric>": "current - parent for the compared metrics",
    # Reward against the protected evaluator on the training rollouts (diagnostics/score.py).
    "unrewarded_correct_rate": "share of strict-correct training rollouts paid below half the top reward "
    "(score.unrewarded_correct: > 0.05 warning, > 0.20 critical)",
    "mixed_groups": "training groups holding both strict-right and strict-wrong samples (every sample scored)",
    "rank_pairs": "(strict-wrong, strict-right) sample pairs inside mixed groups",
    "rank_violations": "pairs whose wrong sample the reward pays strictly above the right one (the backtest's count)",
    "rank_violation_rate": "rank_violations / rank_pairs (NaN below 5 mixed groups)",
    "misranked_group_rate": "share of mixed groups where some strict-wrong sample is rewarded at least as much as "
    "some strict-right one (score.misranked_groups: > 0.10 warning, > 0.30 critical; NaN below 5 mixed groups)",
    "reward_rank_agreement": "share of rank pairs the reward orders like the evaluator, ties half (1 = agrees, "
    "0.5 = chance)",
    # What the group filter kept and dropped, within-group diversity (diagnostics/groups.py).
    "dead_group_ratio_after_filter": "mean over steps of the dead share among the groups the filter kept "
    "(the trainer's rollout/dead_kept_group_ratio, else the rollouts' kept flags); graded instead of "
    "dead_group_ratio when present",
    "kept_group_ratio": "share of training groups the filter kept for the update (NaN without kept flags)",
    "kept_live_ratio": "kept samples in groups with reward variance / samples in such groups (signal."
    "filter_drops_signal: < 0.5 warning, < 0.2 critical)",
    "reward_spread_after_filter": "mean within-group reward std of the kept groups (reward_spread: all groups)",
    "reward_spread_dropped": "mean within-group reward std of the dropped groups",
    "filter_spread_gap": "reward_spread_dropped - reward_spread_after_filter (signal.filter_inverted: > 0.02 "
    "warning; NaN below 5 kept or 5 dropped groups)",
    "filter_reward_bias": "mean reward of the kept groups with reward variance - that of the dropped ones (signal."
    "filter_biased: > 0.2 warning; NaN below 5 of each)",
    "train_strict_acc": "mean strict score of all training rollouts (before the filter)",
    "train_strict_acc_after_filter": "mean strict score of the training rollouts in kept groups",
    "distinct_response_ratio": "mean over training groups of distinct responses / samples",
    "identical_group_ratio": "share of training groups whose samples are all one response (signal."
    "identical_groups: > 0.5 warning, > 0.8 critical)",
    "dead_identical_share": "of the dead groups, the share that are identical (high: a collapsed sampler; low: a "
    "reward too coarse to tell different responses apart)",
    "reward_discrete": "1 when the training reward takes at most 8 distinct values (rounded to 1e-6), else 0",
    "dead_solved_share": "of the dead groups, the share whose samples the strict evaluator all scores right (solved "
    "prompts; a new critical signal.dead_groups that is not critical without them does not block a candidate)",
    # The update the trainer applied (diagnostics/updates.py, from metrics.jsonl).
    "update_norm_mean": "mean L2 norm of the per-step parameter change (actor/update_norm)",
    "update_norm_max": "largest per-step parameter change",
    "no_update_share": "share of steps whose update changed no parameter (signal.no_update: > 0.25 warning, "
    "> 0.5 critical)",
    "ref_distance": "L2 distance of the last policy from the lineage's reference policy (actor/ref_param_distance)",
    "kl_to_ref": "mean actor/kl_loss (k3 KL to the reference) over the last 5 steps; 0 when the run has no KL "
    "term (kl_coef = 0)",
    # Built-in analyzers of the upgrade_diagnostics step (diagnostics/analyzers.py): merged into the report's
    # metrics only once they separate the session's kept versions from its rejected ones.
    "group_text_distance": "mean pairwise Jaccard distance of the responses' character 3-grams inside a group "
    "(latest 200 groups)",
    "distinct_answer_ratio": "mean over groups of distinct extracted answers / samples (latest 200 groups)",
    # Agentic episodes only (diagnostics/agentic.py): absent from single-turn reports.
    **AGENTIC_METRIC_DOCS,
    # The episode-contract replay (diagnostics/env_replay.py), added by the diagnose step to agentic runs.
    **REPLAY_METRIC_DOCS,
}


def build_report(
    run_dir: Path,
    parent: HealthReport | None = None,
    siblings: Sequence[HealthReport] = (),
    answer: AnswerProtocol | None = None,
    roles: ToolRoles = DEFAULT_ROLES,
) -> HealthReport:
    """Read a run folder and return its health report; never raises on bad lines (they become problems).

    `answer` is the harness's declared answer protocol (`harness.manifest.answer`): the format and answer
    rules read it, and are not evaluated without it. `roles` classifies an agentic harness's tools
    (`ToolRoles.from_env(manifest.env)`; by tool name when not given).
    """
    return report_from_table(run_dir, read_run_table(run_dir, answer), parent, siblings, roles)


def report_from_table(
    run_dir: Path,
    table: RunTable,
    parent: HealthReport | None = None,
    siblings: Sequence[HealthReport] = (),
    roles: ToolRoles = DEFAULT_ROLES,
) -> HealthReport:
    """The health report of a run whose rollouts were already read into `table` (metrics are read here)."""
    problems: list[ReadProblem] = []
    metric_rows: list[MetricRow] = read_metrics(run_dir / METRICS_FILE, problems)
    problems.extend(table.problems)
    train, val = table.train, table.val
    if not table.height:
        problems.append(ReadProblem(str(run_dir / ROLLOUTS_DIR), 0, "no readable rollout records"))
    signal_input = train if train.height else val
    parts = [
        diagnose_score(metric_rows, train, val),
        diagnose_signal(signal_input, metric_rows),
        diagnose_groups(signal_input),
        diagnose_behaviour(signal_input, table.answer is not None),
        diagnose_agentic(signal_input, roles),
        diagnose_sources(train),
        diagnose_coverage(train, val),
        diagnose_updates(metric_rows),
    ]
    base = LayerOutput.merge(parts)
    metrics = dict(base.metrics)
    findings = list(base.findings)
    if parent is not None:
        version = diagnose_version(metrics, findings, parent)
        findings.extend(version.findings)
        metrics.update(version.metrics)
        # within the run or against the parent (Kleene or: a hacking parent comparison decides an unknown trend)
        if version.metrics["version_reward_hacking"] >= 1:
            metrics["reward_hacking"] = 1.0
    if siblings:
        metrics.update(compare_siblings(metrics, siblings).metrics)
    for f in findings:  # an inconclusive rule's metric means nothing for this run: unknown, never a number
        if f.inconclusive:
            metrics[rule_metric(f.rule)] = math.nan
    run_id = table.run_id or run_dir.name
    notes = (
        []
        if table.answer is not None
        else [
            f"format_failure_rate, multi_answer_rate, answer_written_rate, runs_past_answer_rate: {NO_ANSWER_PROTOCOL}"
        ]
    )
    notes = unevaluated_notes(findings, [*notes, *base.notes])
    return HealthReport(
        run_id=run_id,
        run_dir=str(run_dir),
        findings=tuple(findings),
        metrics=metrics,
        problems=tuple(problems),
        notes=tuple(notes),
    )


def unevaluated_notes(findings: Sequence[Finding], notes: Sequence[str]) -> list[str]:
    """`notes` (deduplicated) plus one for every finding whose value is NaN that no note names yet.

    A note names the rules it covers before its first `": "` (`"a, b: not evaluated: why"`); a finding whose
    own message already says why (it ends with `NO_ANSWER_PROTOCOL`) counts as covered.
    """
    out = list(dict.fromkeys(notes))
    covered = {name for note in out for name in note.split(": ", 1)[0].split(", ")}
    for f in findings:
        if not math.isnan(f.value) or f.alert_id in covered or f.message.endswith(NO_ANSWER_PROTOCOL):
            continue
        if f.inconclusive:
            out.append(f"{f.alert_id}: not evaluated: inconclusive for this run: {f.inconclusive}")
        else:
            out.append(f"{f.alert_id}: not evaluated: no data for {rule_metric(f.rule)} (rule: {f.rule})")
        covered.add(f.alert_id)
    return out
