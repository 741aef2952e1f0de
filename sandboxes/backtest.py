"""Run a candidate's reward (and group filter) on cached rollouts in a sandbox and grade it: the backtest adapter.

`run_backtest(candidate_dir, rollouts_run_dir, out_dir, mode)` loads the candidate harness manifest, reads the
cached rollouts of a finished run (train split by default), calls the candidate's reward on every cached
rollout plus every hack-corpus exemplar (and its filter on every step's groups) through
`sandboxes.worker.SandboxCalls` (Docker or child process) or `harness.calls.InProcessCalls`
(mode "none", trusted code), grades the numbers with the pure `diagnostics.backtest.grade_backtest`, and
writes `out_dir/report.json`.

Idempotent artefact directory: when a whole `out_dir/report.json` exists it is returned without
running anything. Candidate failures (import error, exception, hang, contract violation, forged channel) are
classified results that are written too; an infrastructure failure (no Docker engine) is returned but not
written, so a retry runs again. The hack corpus and this grading code are never mounted into the sandbox:
only the harness folder is, read-only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml

from diagnostics.agentic_docs import ENV_CARRIES_STATE
from diagnostics.backtest import BacktestResult, Verdict, failed_backtest, grade_backtest, step_batches
from diagnostics.hack_corpus import build_hack_corpus, corpus_batch, pick_problems, score_hack_corpus
from diagnostics.schema import CONFIG_FILE, Rollout, Split, read_run_rollouts
from diagnostics.signal import GroupKey
from harness.atomic import read_json, write_atomic
from harness.calls import HarnessCalls, RewardContractError, validate_reward
from harness.failures import CandidateCodeError, InfraError, Outcome
from harness.manifest import MANIFEST_NAME, Harness, HarnessError, load_harness
from sandboxes.calls import open_calls
from sandboxes.modes import SANDBOX_MODES, SandboxMode

REPORT_FILE = "report.json"
# Keys that hold the generation length budget in a trainer config (local: max_new_tokens; verl:
# data.max_response_length / rollout.response_length).
LENGTH_KEYS = ("max_new_tokens", "max_response_length", "response_length")
REWARD_CHUNK = 512  # items per sandbox call, to stay well inside the per-call timeout


def rollout_batch(rollouts: Sequence[Rollout]) -> list[dict[str, Any]]:
    """Return the reward inputs (verl `compute_score` kwargs) of cached rollouts."""
    return [
        {
            "data_source": r.data_source,
            "solution_str": r.response,
            "ground_truth": r.ground_truth,
            "extra_info": {
                "prompt": r.prompt,
                "prompt_id": r.prompt_id,
                "response_tokens": r.response_tokens,
                "truncated": r.truncated,
                "num_turns": r.num_turns,
                "tool_calls": r.tool_calls,
            },
        }
        for r in rollouts
    ]


def find_length_budget(config: object) -> int | None:
    """Return the first length-budget value (see `LENGTH_KEYS`) found in a nested config, or None."""
    if isinstance(config, Mapping):
        for key in LENGTH_KEYS:
            value = config.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        for value in config.values():
            found = find_length_budget(value)
            if found is not None:
                return found
    return None


def _read_config(path: Path) -> object:
    if not path.is_file():
        return None
    text = path.read_text()
    return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)


def read_report(out_dir: Path) -> BacktestResult | None:
    """Return the backtest report written in `out_dir`; None when there is none or it is empty or malformed
    (a full disk, a crash): such a report is run again, never trusted."""
    raw = read_json(out_dir / REPORT_FILE)
    if not isinstance(raw, dict):
        return None
    try:
        return BacktestResult.from_json(raw)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _write_report(out_dir: Path, result: BacktestResult) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(out_dir / REPORT_FILE, orjson.dumps(result.to_json(), option=orjson.OPT_INDENT_2))


def _call_candidate(
    calls: HarnessCalls, harness: Harness, batch: list[dict[str, Any]], rollouts: Sequence[Rollout]
) -> tuple[list[float], dict[GroupKey, bool] | None]:
    raw: list[object] = []
    for start in range(0, len(batch), REWARD_CHUNK):
        raw.extend(calls.compute_rewards(batch[start : start + REWARD_CHUNK]))
    entry = str(harness.reward)
    scores = [validate_reward(value, entry, harness.manifest.reward_range)[0] for value in raw]
    if harness.group_filter is None:
        return scores, None
    keep: dict[GroupKey, bool] = {}
    state: dict[str, Any] = {}
    for sb in step_batches(rollouts, scores[: len(rollouts)]):
        flags, state = calls.filter_groups([list(g) for g in sb.group_rewards], state)
        keep.update(zip(sb.keys, flags, strict=True))
    return scores, keep


def run_backtest(
    candidate_dir: Path,
    rollouts_run_dir: Path,
    out_dir: Path,
    mode: SandboxMode = "docker",
    split: Split = "train",
    base_dir: Path | None = None,
    must_fall: Sequence[str] = (),
) -> BacktestResult:
    """Backtest the candidate harness at `candidate_dir` on the cached rollouts of `rollouts_run_dir`.

    `base_dir` is the incumbent harness the candidate branched from: when its reward (filter) file is
    identical to the candidate's, a hack-corpus exposure (a low kept ratio) is reported as pre-existing
    rather than failing the candidate: a backtest judges the change, not what the incumbent already had.
    `must_fall`: the alerts an exploration probe is aimed at (`diagnostics.backtest.MUST_FALL`).

    Returns the existing `out_dir/report.json` unchanged when there is one. Raises nothing for candidate
    faults (they become the result's `outcome`); raises `ValueError` for an unknown mode.
    """
    if mode not in SANDBOX_MODES:
        raise ValueError(f"unknown sandbox mode {mode!r}; use docker, process or none")
    cached = read_report(out_dir)
    if cached is not None:
        return cached
    name = candidate_dir.name
    try:
        harness = load_harness(candidate_dir)
    except HarnessError as exc:
        result = failed_backtest(name, Outcome.CANDIDATE_ERROR, str(exc), MANIFEST_NAME)
        _write_report(out_dir, result)
        return result
    name = harness.manifest.name
    read = read_run_rollouts(rollouts_run_dir, [split])
    rollouts = read.rollouts
    # Exploits written for problems of these rollouts with the harness's declared answer protocol.
    answer = harness.manifest.answer
    items = build_hack_corpus(harness.manifest.domain, answer, pick_problems(rollouts, answer))
    calls: HarnessCalls | None = None
    try:
        calls = open_calls(harness, mode)
        scores, keep = _call_candidate(calls, harness, rollout_batch(rollouts) + corpus_batch(items), rollouts)
    except CandidateCodeError as exc:
        result = failed_backtest(name, exc.outcome, exc.message, exc.path)
        _write_report(out_dir, result)
        return result
    except RewardContractError as exc:
        result = failed_backtest(name, Outcome.CANDIDATE_ERROR, str(exc), harness.reward.path)
        _write_report(out_dir, result)
        return result
    except InfraError as exc:
        return failed_backtest(name, Outcome.INFRA_ERROR, exc.message)
    finally:
        if calls is not None:
            calls.close()
    hack = score_hack_corpus(scores[len(rollouts) :], items) if items else None
    before = find_length_budget(_read_config(rollouts_run_dir / CONFIG_FILE))
    after = find_length_budget(_read_config(harness.path(harness.manifest.trainer.config)))
    result = grade_backtest(
        name,
        rollouts,
        scores[: len(rollouts)],
        keep=keep,
        max_new_tokens_before=before,
        max_new_tokens_after=after,
        hack=hack,
        reward_changed=_changed(harness, harness.reward.path, base_dir),
        filter_changed=harness.group_filter is not None and _changed(harness, harness.group_filter.path, base_dir),
        must_fall=must_fall,
    )
    notes = [f"{len(rollouts)} cached {split} rollouts from {rollouts_run_dir} (sandbox: {mode})"]
    if ENV_CARRIES_STATE in must_fall and harness.manifest.env is not None:
        result, note = _isolation_check(result, harness, rollouts_run_dir, mode)
        notes.append(note)
    if read.problems:
        notes.append(f"{len(read.problems)} unreadable rollout lines skipped, first: {read.problems[0]}")
    result = BacktestResult(
        result.candidate, result.outcome, result.verdict, (*result.reasons, *notes), result.metrics, result.hack
    )
    _write_report(out_dir, result)
    return result


def _isolation_check(result: BacktestResult, harness: Harness, run_dir: Path, mode: str) -> tuple[BacktestResult, str]:
    """A probe aimed at an environment that carries state across episodes: its environment, replayed in another
    order, must answer the run's sampled calls as environments built each in a fresh module do."""
    from dataclasses import replace

    from sandboxes.env_replay import isolation_backtest

    verdict = isolation_backtest(harness, run_dir, mode)
    if verdict.problem:
        return replace(result, verdict=Verdict.FAIL), f"episode isolation not shown: {verdict.problem}"
    if verdict.changed:
        shown = "; ".join(c.line() for c in verdict.changed[:3])
        why = f"episode isolation fails: {len(verdict.changed)} of {verdict.calls} replayed calls differ from fresh "
        return replace(result, verdict=Verdict.FAIL), why + f"environments ({shown})"
    return (
        result,
        f"episode isolation holds: {verdict.calls} replayed calls in {verdict.episodes} episodes answer as fresh",
    )


def _changed(harness: Harness, rel: str, base_dir: Path | None) -> bool:
    """Return False only when `base_dir` holds a byte-identical copy of the candidate's file `rel`."""
    if base_dir is None:
        return True
    base = base_dir / rel
    return not base.is_file() or base.read_bytes() != harness.path(rel).read_bytes()
