"""Does an episode's environment depend on its row only? The replay check of the episode contract.

The contract (`harness/env.py`): what an episode's tools answer depends on its data row (and the seed the row
carries) only, never on the episodes that ran before it in the same process. Rollouts alone cannot show a
breach (a stale answer looks like any wrong answer), so the check replays: a bounded sample of a run's recorded
tool calls (`plan_replay`, at most `MAX_REPLAY_CALLS`) is run again against fresh environments built for the
same rows, in a fresh sandbox process, episode after episode in another order than the run's (the adapter:
`sandboxes/env_replay.py`), twice. Then, call by call (`compare_replays`):

- the two replays disagree: the environment is **nondeterministic** (`agentic.env_nondeterministic`): a
  random stream nobody seeds, the clock, the order of a set;
- they agree with each other but not with what the run recorded: the answer changed with the episodes that
  ran before it, so the environment **carries state across episodes** (`agentic.env_carries_state`): a
  module-level cache, a shared random stream, a list that grows, a file left behind.

The repair's backtest is the same replay (`isolation_verdict`): the candidate's environment, as it declares
its isolation, replayed in another order, must answer every call the way environments built each in a fresh
module answer it.

Pure: typed records in, findings out; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from diagnostics.agentic_docs import ENV_CARRIES_STATE, ENV_NONDETERMINISTIC
from diagnostics.findings import HealthReport, Layer, LayerOutput, graded, rollout_ref
from diagnostics.schema import Rollout
from harness.env import MAX_RESULT_CHARS, EnvSpec, parse_arguments

# The replay's bound: calls per replay (a few hundred: seconds in a process sandbox) and episodes per replay.
MAX_REPLAY_CALLS = 300
MAX_REPLAY_EPISODES = 128
# The trainer keeps at most this many characters of a call's arguments; a recorded call that long may be cut,
# so it is not replayed.
RECORDED_ARGUMENT_CHARS = 500
# Shares of the replayed calls whose answer changed. A contract-abiding environment changes none (0.0 on the
# lookup examples and the five agentic scenarios), so one changed call in a hundred is a warning already;
# below MIN_REPLAY_CALLS replayed calls the rules are inconclusive. EvoTrainer's thresholds.
CHANGED_WARNING = 0.01
CHANGED_CRITICAL = 0.05
NONDETERMINISTIC_WARNING = 0.01
NONDETERMINISTIC_CRITICAL = 0.05
MIN_REPLAY_CALLS = 20
EVIDENCE_MAX = 5
CALLS_NAMED = 3  # changed calls a finding's message spells out


@dataclass(frozen=True, slots=True)
class Answer:
    """What a call got: the result text (as the trainer records it: cut to `MAX_RESULT_CHARS`) and success."""

    result: str
    success: bool


@dataclass(frozen=True, slots=True)
class ReplayCall:
    """One recorded call the environment ran: the tool, its parsed arguments, the raw text and the answer."""

    tool: str
    arguments: Mapping[str, Any]
    raw_arguments: str
    recorded: Answer


@dataclass(frozen=True, slots=True)
class ReplayEpisode:
    """One recorded episode to replay: its evidence id, the prompt id of its row, and its calls in order."""

    ref: str
    prompt_id: str
    calls: tuple[ReplayCall, ...]


@dataclass(frozen=True, slots=True)
class ChangedCall:
    """A replayed call whose answer differs: where, which call, what the run got and what the replay got."""

    ref: str
    tool: str
    raw_arguments: str
    before: Answer
    after: Answer

    def line(self) -> str:
        """The call in a few words: `lookup a in run/3/p-7/1: '4' -> '9'`."""
        return f"{self.tool} {self.raw_arguments[:40]} in {self.ref}: {self.before.result[:20]!r} -> " + (
            f"{self.after.result[:20]!r}" + ("" if self.after.success else " (failed)")
        )


@dataclass(frozen=True)
class ReplayVerdict:
    """The comparison of a replay with the run (or with a reference replay)."""

    calls: int
    episodes: int
    changed: tuple[ChangedCall, ...]  # order-dependent: both replays agree, the run's answer differs
    nondeterministic: tuple[ChangedCall, ...]  # the two replays disagree
    problem: str = ""  # why the replay could not run ("" when it ran)

    @property
    def changed_episodes(self) -> list[str]:
        """The evidence ids of the episodes with a changed answer, in replay order, once each."""
        return list(dict.fromkeys(c.ref for c in self.changed))


def plan_replay(
    rollouts: Sequence[Rollout],
    rows: Mapping[str, Mapping[str, Any]],
    spec: EnvSpec,
    max_calls: int = MAX_REPLAY_CALLS,
    max_episodes: int = MAX_REPLAY_EPISODES,
) -> list[ReplayEpisode]:
    """The episodes to replay, latest steps first, whole episodes while the call budget lasts.

    A call is replayed when the environment ran it (a tool, a recorded success) and its arguments read back
    (`harness.env.parse_arguments`); an episode whose row `rows` lacks (by `prompt_id`) is skipped, as is one
    with a call the trainer may have cut (`RECORDED_ARGUMENT_CHARS`). The order returned is the run's
    (step, then prompt, then sample); the adapter replays it reversed.
    """
    picked: list[ReplayEpisode] = []
    total = 0
    ordered = sorted(rollouts, key=lambda r: (-r.step, r.prompt_id, r.sample_index))
    for r in ordered:
        if len(picked) >= max_episodes or total >= max_calls:
            break
        if r.prompt_id not in rows:
            continue
        calls = _env_calls(r, spec)
        if not calls or total + len(calls) > max_calls:
            continue
        picked.append(ReplayEpisode(rollout_ref(r.run_id, r.step, r.prompt_id, r.sample_index), r.prompt_id, calls))
        total += len(calls)
    return sorted(picked, key=lambda e: _order_key(e.ref))


def _order_key(ref: str) -> tuple[int, str, int]:
    _, step, prompt_id, sample = ref.rsplit("/", 3)
    return int(step), prompt_id, int(sample)


def _env_calls(r: Rollout, spec: EnvSpec) -> tuple[ReplayCall, ...]:
    out: list[ReplayCall] = []
    for turn in r.turns:
        if turn.tool is None or turn.success is None:
            continue
        if len(turn.arguments) >= RECORDED_ARGUMENT_CHARS:
            return ()
        call = parse_arguments(turn.tool, turn.arguments, spec)
        if call.arguments is None:
            continue  # the trainer answered the parse problem itself; the environment never saw it
        out.append(ReplayCall(turn.tool, call.arguments, turn.arguments, Answer(turn.result, turn.success)))
    return tuple(out)


def compare_replays(
    plan: Sequence[ReplayEpisode], first: Sequence[Sequence[Answer]], second: Sequence[Sequence[Answer]]
) -> ReplayVerdict:
    """Compare two replays of `plan` (one list of answers per episode, in `plan`'s order) with the run.

    A call the two replays answer differently is nondeterministic; one they agree on and the run got otherwise
    changed with the episodes before it.
    """
    if len(first) != len(plan) or len(second) != len(plan):
        raise ValueError(f"replays of {len(first)} and {len(second)} episodes for a plan of {len(plan)}")
    changed: list[ChangedCall] = []
    noisy: list[ChangedCall] = []
    for episode, a, b in zip(plan, first, second, strict=True):
        for call, x, y in zip(episode.calls, a, b, strict=True):
            if x != y:
                noisy.append(ChangedCall(episode.ref, call.tool, call.raw_arguments, x, y))
            elif x != call.recorded:
                changed.append(ChangedCall(episode.ref, call.tool, call.raw_arguments, call.recorded, x))
    return ReplayVerdict(sum(len(e.calls) for e in plan), len(plan), tuple(changed), tuple(noisy))


def isolation_verdict(
    plan: Sequence[ReplayEpisode], candidate: Sequence[Sequence[Answer]], fresh: Sequence[Sequence[Answer]]
) -> ReplayVerdict:
    """The repair's backtest: `candidate` (its declared isolation, another order) against `fresh` (each episode
    in a fresh module). Every call `candidate` answers otherwise is `changed` (`before` the fresh answer)."""
    reference = [
        ReplayEpisode(e.ref, e.prompt_id, tuple(ReplayCall(c.tool, c.arguments, c.raw_arguments, ans)
                                                for c, ans in zip(e.calls, answers, strict=True)))
        for e, answers in zip(plan, fresh, strict=True)
    ]  # fmt: skip
    return compare_replays(reference, candidate, candidate)


def cut_result(text: str) -> str:
    """A result text as the trainer records it (`harness.env.validate_env_result` cuts and marks it)."""
    return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + " [... cut]"


def with_replay_evidence(report: HealthReport, replayed: LayerOutput) -> HealthReport:
    """`report` with the replay's findings and metrics (replacing any it carries already)."""
    if not replayed.findings:
        return report
    ids = {f.alert_id for f in replayed.findings}
    findings = (*(f for f in report.findings if f.alert_id not in ids), *replayed.findings)
    metrics = {**report.metrics, **replayed.metrics}
    return HealthReport(report.run_id, report.run_dir, findings, metrics, report.problems, report.notes)


def replay_findings(verdict: ReplayVerdict) -> LayerOutput:
    """Grade a replay: `agentic.env_carries_state` and `agentic.env_nondeterministic` with their metrics."""
    n = verdict.calls
    inconclusive = verdict.problem or (f"{n} calls replayed (< {MIN_REPLAY_CALLS})" if n < MIN_REPLAY_CALLS else "")
    changed_rate = len(verdict.changed) / n if n else math.nan
    noisy_rate = len(verdict.nondeterministic) / n if n else math.nan
    metrics = {
        "env_replay_calls": float(n),
        "env_replay_changed_calls": float(len(verdict.changed)),
        "env_replay_changed_rate": math.nan if inconclusive else changed_rate,
        "env_replay_nondeterministic_rate": math.nan if inconclusive else noisy_rate,
    }
    numbers = {"calls_replayed": float(n), "episodes_replayed": float(verdict.episodes)}
    what = "replayed in another order against fresh environments, calls get other answers than the run recorded"
    episodes = verdict.changed_episodes
    if verdict.changed:
        named = "; ".join(c.line() for c in verdict.changed[:CALLS_NAMED])
        what += (
            f": {len(verdict.changed)} of {n} answers changed in {len(episodes)} of {verdict.episodes} episodes "
            f"(the environment carries state across episodes), e.g. {named}"
        )
    carries = graded(ENV_CARRIES_STATE, Layer.BEHAVIOUR, changed_rate, metric="env_replay_changed_rate",
                     warning=CHANGED_WARNING, critical=CHANGED_CRITICAL, what=what,
                     evidence=episodes[:EVIDENCE_MAX], inconclusive=inconclusive,
                     numbers={**numbers, "changed_calls": float(len(verdict.changed)),
                              "changed_episodes": float(len(episodes))})  # fmt: skip
    what = "two identical replays of the same calls get different answers (the environment is nondeterministic)"
    noisy_refs = list(dict.fromkeys(c.ref for c in verdict.nondeterministic))
    if verdict.nondeterministic:
        what += f": {len(verdict.nondeterministic)} of {n} calls, e.g. {verdict.nondeterministic[0].line()}"
    noisy = graded(ENV_NONDETERMINISTIC, Layer.BEHAVIOUR, noisy_rate, metric="env_replay_nondeterministic_rate",
                   warning=NONDETERMINISTIC_WARNING, critical=NONDETERMINISTIC_CRITICAL, what=what,
                   evidence=noisy_refs[:EVIDENCE_MAX], inconclusive=inconclusive,
                   numbers={**numbers, "nondeterministic_calls": float(len(verdict.nondeterministic))})  # fmt: skip
    return LayerOutput((carries, noisy), metrics)
