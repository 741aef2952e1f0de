"""Replay a run's recorded tool calls against fresh environments in a fresh sandbox worker: the I/O of the
episode-contract check (`diagnostics/env_replay.py` plans, compares and grades).

The environment is candidate code, so every replay runs in a new sandbox worker (`sandboxes.calls.open_calls`:
Docker, or the process sandbox; a session without a sandbox replays in the process sandbox, since the check
needs a process no episode has touched yet). Episodes are replayed one after another (open, its calls in
order, close), in the reverse of the run's order; each replay costs one worker start plus the calls.

- `run_evidence`: the health-report evidence of a run (two replays in the same reversed order, compared with
  the run and with each other), written once to the run folder's `ENV_REPLAY_FILE` and read back after (not
  written when no sandbox could start: a later diagnosis tries again);
- `isolation_backtest`: a candidate's environment, as it declares its isolation, replayed in reverse against
  environments built each in a fresh module (the repair's backtest).

A fault of the environment during a replay (it raises, hangs, returns something off the contract) makes the
verdict inconclusive with the fault as its problem; it never raises.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from diagnostics.env_replay import (
    Answer,
    ReplayEpisode,
    ReplayVerdict,
    compare_replays,
    isolation_verdict,
    plan_replay,
    replay_findings,
)
from diagnostics.findings import Finding, LayerOutput
from diagnostics.schema import ENV_REPLAY_FILE, ReadResult, read_rollout_file, rollout_files
from harness.atomic import write_atomic
from harness.env import EnvContractError, Isolation, validate_env_result
from harness.failures import CandidateCodeError, InfraError, Outcome
from harness.manifest import Harness
from harness.rows import RowError, read_rows
from sandboxes.calls import open_calls

REPLAY_STEP_FILES = 3  # the latest training step files a replay samples its episodes from
Answers = list[list[Answer]]


def harness_rows(harness: Harness) -> dict[str, dict[str, Any]]:
    """The training and held-out rows by prompt id, without their ground truth (what `make_env` gets)."""
    rows: dict[str, dict[str, Any]] = {}
    for rel in (harness.manifest.data.train, harness.manifest.data.val):
        for row in read_rows(harness.path(str(rel))):
            rows[str(row["prompt_id"])] = {k: v for k, v in row.items() if k != "ground_truth"}
    return rows


def run_plan(harness: Harness, run_dir: Path) -> list[ReplayEpisode]:
    """The episodes of `run_dir`'s latest training steps to replay (`diagnostics.env_replay.plan_replay`)."""
    assert harness.manifest.env is not None, "a replay of a single-turn harness"
    read = ReadResult()
    for path in rollout_files(run_dir, "train")[-REPLAY_STEP_FILES:]:
        read_rollout_file(path, read)
    return plan_replay(read.rollouts, harness_rows(harness), harness.manifest.env)


def replay(
    harness: Harness,
    plan: Sequence[ReplayEpisode],
    mode: str,
    *,
    reverse: bool = True,
    isolation: Isolation | None = None,
) -> Answers:
    """Replay `plan` in a new sandbox worker, one episode after another; return the answers in `plan`'s order.

    `isolation` overrides the env module's declaration (``fresh_module``: the reference environments).

    Raises:
        CandidateCodeError: the environment failed (raised, hung, answered off the contract).
        InfraError: no sandbox could start.
    """
    entry = str(harness.env)
    rows = harness_rows(harness)
    answers: Answers = [[] for _ in plan]
    order = list(range(len(plan)))[::-1] if reverse else list(range(len(plan)))
    calls = open_calls(harness, "process" if mode == "none" else mode)
    try:
        for i in order:
            episode = plan[i]
            [env_id] = calls.open_episodes([rows[episode.prompt_id]], isolation)
            values = calls.env_calls([(env_id, c.tool, dict(c.arguments)) for c in episode.calls])
            calls.close_episodes([env_id])
            try:
                checked = [validate_env_result(v, entry) for v in values]
            except EnvContractError as exc:
                raise CandidateCodeError(Outcome.CANDIDATE_ERROR, str(exc), entry.partition(":")[0]) from exc
            answers[i] = [Answer(r.result, r.success) for r in checked]
    finally:
        calls.close()
    return answers


INFRA_PROBLEM = "the replay could not run: InfraError"


def _problem(exc: Exception) -> str:
    message = exc.message if isinstance(exc, CandidateCodeError | InfraError) else str(exc)
    return f"the replay could not run: {type(exc).__name__}: {message[:300]}"


def replay_run(harness: Harness, run_dir: Path, mode: str) -> ReplayVerdict:
    """Replay a sample of `run_dir`'s calls twice (same reversed order, a new worker each) and compare."""
    try:
        plan = run_plan(harness, run_dir)
        if not plan:
            return ReplayVerdict(0, 0, (), (), "no recorded call the environment ran")
        first, second = replay(harness, plan, mode), replay(harness, plan, mode)
    except (CandidateCodeError, InfraError, RowError, KeyError) as exc:
        return ReplayVerdict(0, 0, (), (), _problem(exc))
    return compare_replays(plan, first, second)


def run_evidence(harness: Harness, run_dir: Path, mode: str) -> LayerOutput:
    """The replay findings of `run_dir` (an agentic harness only; empty otherwise), computed once per run."""
    if harness.manifest.env is None:
        return LayerOutput((), {})
    path = run_dir / ENV_REPLAY_FILE
    if path.is_file():
        raw = orjson.loads(path.read_bytes())
        metrics = {k: math.nan if v is None else float(v) for k, v in raw["metrics"].items()}
        return LayerOutput(tuple(Finding.from_json(f) for f in raw["findings"]), metrics)
    verdict = replay_run(harness, run_dir, mode)
    out = replay_findings(verdict)
    if verdict.problem.startswith(INFRA_PROBLEM):
        return out  # no sandbox this time: a later diagnosis tries again
    body = {"findings": [f.to_json() for f in out.findings], "metrics": dict(out.metrics)}
    write_atomic(path, orjson.dumps(body, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    return out


def isolation_backtest(candidate: Harness, run_dir: Path, mode: str) -> ReplayVerdict:
    """The repair's backtest: `candidate`'s environment as it declares its isolation, replayed in reverse, must
    answer every sampled call of `run_dir` the way environments built each in a fresh module do."""
    try:
        plan = run_plan(candidate, run_dir)
        if not plan:
            return ReplayVerdict(0, 0, (), (), "no recorded call the environment ran")
        fresh = replay(candidate, plan, mode, reverse=False, isolation="fresh_module")
        declared = replay(candidate, plan, mode)
    except (CandidateCodeError, InfraError, RowError, KeyError) as exc:
        return ReplayVerdict(0, 0, (), (), _problem(exc))
    return isolation_verdict(plan, declared, fresh)
