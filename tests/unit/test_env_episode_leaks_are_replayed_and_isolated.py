"""An environment that carries state from one episode into the next is found by replaying, and isolated.

The evidence is real: the lookup harnesses' own environments, run in the process sandbox the way the local
trainer runs them (`env_recordings.record`: one batch of episodes, one `env_calls` request per turn), their
recorded calls replayed in fresh sandbox workers in another order (`sandboxes/env_replay.py`). The rule reads
the answers, never the scenario's name: the env-episode-leak scenario (a module-level cache) is one leak;
a shared random stream, a list that grows, and a `make_env` that keeps the previous row are others, and a
reset hook that clears what it keeps (or only part of it) is the declared way to reuse an environment.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from env_recordings import record, rows_of, write_run
from scenario_cache import scenario_dir

from agent.decisions.knobs import harness_knobs
from agent.nodes.propose import probe_metrics
from agent.policies.alert_aims import critical_alerts
from agent.policies.explore import propose_probes
from diagnostics.agentic_docs import ENV_CARRIES_STATE, ENV_NONDETERMINISTIC
from diagnostics.env_replay import replay_findings, with_replay_evidence
from diagnostics.findings import Severity
from diagnostics.report import build_report
from diagnostics.schema import ENV_REPLAY_FILE
from harness.calls import InProcessCalls
from harness.manifest import Harness, load_harness
from sandboxes.env_replay import isolation_backtest, replay_run, run_evidence
from skills.patches import apply_skill

ROOT = Path(__file__).resolve().parents[2]
AGENTIC = ["env-lookup-limit", "one-turn-collapse", "tool-spam", "turn-budget", "turn-token-cap"]
ENV = "harness/env.py"


def _copy(src: Path, dest: Path) -> Harness:
    shutil.copytree(src, dest)
    return load_harness(dest)


def _edit(harness: Harness, old: str, new: str) -> Harness:
    path = harness.path(ENV)
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))
    return load_harness(harness.root)


FRESH = 'MAX_FAILED_LOOKUPS = 2\nEVOTRAINER_ENV_ISOLATION = "fresh_module"\n'
RETURN = "            return str(self.table[key])\n"
# Other kinds of leak than the scenario's cache, each written into the fixed lookup env.
LEAKS = {
    # a random stream the module shares: a lookup is refused ("busy") when the stream says so
    "shared random stream": (
        "import random\n\n_RNG = random.Random(0)",
        "            if _RNG.random() < 0.3:\n                return {'result': 'busy', 'success': False}\n" + RETURN,
    ),
    # a list that grows with every lookup of every episode: after a while it answers a shifted value
    "growing list": (
        "_SEEN: list[str] = []",
        "            _SEEN.append(key)\n            return str((self.table[key] + len(_SEEN) // 16) % 10)\n",
    ),
    # make_env keeps the previous episode's table and answers from it
    "previous row": ("_LAST: list[dict] = []", RETURN),
}


def _leaky(kind: str, tmp_path: Path) -> Harness:
    harness = _copy(ROOT / "examples" / "lookup-agent-oracle", tmp_path / kind.replace(" ", "-"))
    header, body = LEAKS[kind]
    harness = _edit(harness, "\n\n\nclass LookupEnv:", f"\n\n\n{header}\n\n\nclass LookupEnv:")
    harness = _edit(harness, RETURN, body)
    if kind == "previous row":
        keep = '    table = _LAST[-1] if _LAST else row["table"]\n    _LAST.append(row["table"])\n'
        keep += "    return LookupEnv(table)"
        harness = _edit(harness, '    return LookupEnv(row["table"])', keep)
    return harness


@pytest.fixture
def leak(tmp_path: Path) -> Harness:
    return _copy(scenario_dir("env-episode-leak", "defective"), tmp_path / "leak")


def test_the_replay_finds_the_scenario_leak_naming_calls_episodes_and_how_many_changed(
    leak: Harness, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    write_run(leak, run)
    verdict = replay_run(leak, run, "process")
    assert not verdict.problem and verdict.calls >= 20 and not verdict.nondeterministic, verdict
    assert len(verdict.changed) >= verdict.calls // 4, (len(verdict.changed), verdict.calls)
    [carries, noisy] = replay_findings(verdict).findings
    assert carries.alert_id == ENV_CARRIES_STATE and carries.severity is Severity.CRITICAL, carries
    assert f"{len(verdict.changed)} of {verdict.calls} answers changed" in carries.message
    assert "lookup" in carries.message and carries.evidence_rollout_ids[0].startswith("rec/")
    assert noisy.alert_id == ENV_NONDETERMINISTIC and noisy.severity is Severity.OK


@pytest.mark.parametrize("source", [*AGENTIC, "lookup-agent", "lookup-agent-oracle"])
def test_the_replay_is_silent_on_the_agentic_scenarios_and_the_examples(source: str, tmp_path: Path) -> None:
    folders = (
        [ROOT / "examples" / source]
        if source.startswith("lookup")
        else [scenario_dir(source, "defective"), scenario_dir(source, "oracle")]
    )
    for n, folder in enumerate(folders):
        harness = _copy(folder, tmp_path / f"h{n}")
        write_run(harness, tmp_path / f"run{n}", steps=1)
        verdict = replay_run(harness, tmp_path / f"run{n}", "process")
        assert verdict.calls >= 20 and not verdict.changed and not verdict.nondeterministic, verdict
        assert all(f.severity is Severity.OK for f in replay_findings(verdict).findings)


@pytest.mark.parametrize("kind", sorted(LEAKS))
def test_other_kinds_of_leak_are_found_and_a_fresh_module_per_episode_isolates_them(kind: str, tmp_path: Path) -> None:
    harness = _leaky(kind, tmp_path)
    write_run(harness, tmp_path / "run")
    verdict = replay_run(harness, tmp_path / "run", "process")
    assert verdict.changed and not verdict.nondeterministic, (kind, verdict)
    assert replay_findings(verdict).findings[0].severity is Severity.CRITICAL
    assert isolation_backtest(harness, tmp_path / "run", "process").changed  # as it is, it still leaks
    fixed = _edit(harness, "MAX_FAILED_LOOKUPS = 2\n", FRESH)
    backtest = isolation_backtest(fixed, tmp_path / "run", "process")
    assert backtest.calls >= 20 and not backtest.changed and not backtest.problem, backtest


def test_a_random_stream_nobody_seeds_is_nondeterministic_not_a_leak(tmp_path: Path) -> None:
    harness = _copy(ROOT / "examples" / "lookup-agent-oracle", tmp_path / "noisy")
    harness = _edit(harness, RETURN, "            import os\n\n            return str(os.urandom(1)[0] % 10)\n")
    write_run(harness, tmp_path / "run", steps=1)
    verdict = replay_run(harness, tmp_path / "run", "process")
    [carries, noisy] = replay_findings(verdict).findings
    assert carries.alert_id == ENV_CARRIES_STATE
    assert noisy.severity is Severity.CRITICAL and len(verdict.nondeterministic) > len(verdict.changed), verdict
    assert "nondeterministic" in noisy.message and noisy.evidence_rollout_ids


def test_a_declared_reset_is_checked_by_the_replay(tmp_path: Path) -> None:
    # An environment module that keeps what make_env read (the previous rows) and declares the reset the worker
    # calls before every make_env: a complete reset passes the replay, one that keeps the last row does not.
    kept = _leaky("previous row", tmp_path)
    declared = (
        'MAX_FAILED_LOOKUPS = 2\nEVOTRAINER_ENV_RESET = "reset_env"\n\n\ndef reset_env() -> None:\n'
        '    """Forget the rows of earlier episodes."""\n    _LAST.clear()\n'
    )
    complete = _edit(kept, "MAX_FAILED_LOOKUPS = 2\n", declared)
    write_run(complete, tmp_path / "run")
    verdict = replay_run(complete, tmp_path / "run", "process")
    assert verdict.calls >= 20 and not verdict.changed, verdict
    partial = _edit(complete, "    _LAST.clear()\n", "    del _LAST[:-1]\n")
    write_run(partial, tmp_path / "run2")
    assert replay_run(partial, tmp_path / "run2", "process").changed


def test_the_isolation_probe_is_drafted_for_the_alert_and_its_backtest_is_the_replay(
    leak: Harness, tmp_path: Path
) -> None:
    from sandboxes.backtest import run_backtest

    run = tmp_path / "run"
    write_run(leak, run)
    report = with_replay_evidence(build_report(run), run_evidence(leak, run, "process"))
    assert (run / ENV_REPLAY_FILE).is_file()
    again = run_evidence(leak, run, "process")  # read back from the run folder, not replayed again
    assert again.metrics["env_replay_changed_calls"] == report.metrics["env_replay_changed_calls"] > 0
    knobs = harness_knobs(leak, "local")
    assert knobs.env_isolation == "shared"
    metrics = probe_metrics(dict(report.metrics), leak, knobs)
    [alert] = [a for a in critical_alerts(report.findings, metrics) if a.alert_id == ENV_CARRIES_STATE]
    ranked = propose_probes(knobs, metrics, tried=(), blocked={}, max_candidates=2,
                            only=frozenset(s.name for s in alert.symptoms), evidence=alert.as_evidence())  # fmt: skip
    first = ranked[0]
    assert first.probe is not None and first.probe.probe_id == "env:isolation:fresh_module", [p.slug for p in ranked]
    assert first.skill.factor == "env" and "env_carries_state" in first.probe.symptoms
    candidate = _copy(leak.root, tmp_path / "candidate")
    apply_skill(first.skill, candidate.root, candidate)
    assert 'EVOTRAINER_ENV_ISOLATION = "fresh_module"\n' in candidate.path(ENV).read_text()
    assert harness_knobs(load_harness(candidate.root), "local").env_isolation == "fresh_module"
    passed = run_backtest(candidate.root, run, tmp_path / "bt-pass", mode="process", base_dir=leak.root,
                          must_fall=[ENV_CARRIES_STATE])  # fmt: skip
    assert passed.verdict.value != "fail" and any("isolation holds" in r for r in passed.reasons), passed.reasons
    failed = run_backtest(leak.root, run, tmp_path / "bt-fail", mode="process", base_dir=leak.root,
                          must_fall=[ENV_CARRIES_STATE])  # fmt: skip
    assert failed.verdict.value == "fail" and any("isolation fails" in r for r in failed.reasons), failed.reasons


def test_the_in_process_calls_honour_a_fresh_module_per_episode(leak: Harness) -> None:
    rows = [{k: v for k, v in r.items() if k != "ground_truth"} for r in rows_of(leak, 8)]
    shared = InProcessCalls(leak)
    fresh = InProcessCalls(_edit(leak, "MAX_FAILED_LOOKUPS = 2\n", FRESH))
    truth = [str(r["table"]["a"]) for r in rows]  # type: ignore[index]
    for calls, right in ((shared, False), (fresh, True)):
        ids = calls.open_episodes(rows)
        answers = calls.env_calls([(i, "lookup", {"key": "a"}) for i in ids])
        assert (answers == truth) is right, (answers, truth)


def test_recorded_answers_match_a_fresh_replay_only_for_the_first_episode_of_a_leak(leak: Harness) -> None:
    # The cache answers every later episode's `a` with the first episode's value: the recording shows it.
    rows = [r for r in rows_of(leak, 40) if "a" in str(r["prompt"])]
    recorded = record(leak, rows, size=1)
    seen = [next(t.result for t in r.turns if t.arguments == "a") for r in recorded]
    truth = [str(r["table"]["a"]) for r in rows]  # type: ignore[index]
    assert len(set(seen)) == 1 and seen != truth, (seen, truth)


def test_the_diagnose_step_carries_the_replay_into_the_sessions_report(leak: Harness, tmp_path: Path) -> None:
    from types import SimpleNamespace
    from typing import Any

    from agent.adapters import ledger
    from agent.context import Context
    from agent.nodes.diagnose import diagnose
    from diagnostics.findings import HealthReport
    from sandboxes.git_revisions import verified_commit
    from sandboxes.git_worktree import init_session_repo
    from store import engine as store_engine
    from store import repository as repo

    url = f"sqlite:///{tmp_path / 'store.db'}"
    store_engine.upgrade(url)
    ctx = Context(workdir=str(tmp_path), db_url=url, sandbox="process", mode="evotrainer")
    root = tmp_path / "repo"  # the session's repository, as the store records it (nodes check state against it)
    init_session_repo(leak.root, root)
    with ledger.db(url) as db:
        repo.create_session(db, session_id="s", harness_path=str(leak.root), repo_path=str(root), max_iterations=1,
                            max_train_steps=1, main_branch="main")  # fmt: skip
        repo.add_run(db, run_id="rec", session_id="s", backend="local", kind="pilot", steps=2, artefact_dir="/a")
    run = ctx.session_dir("s") / "runs" / "rec"
    write_run(leak, run)
    commit = verified_commit(root, "HEAD", "version.commit")
    state: Any = {"session_id": "s", "harness_dir": str(root), "iteration": 0,
                  "version": {"index": 0, "commit": commit, "run_id": "rec", "run_dir": str(run)}}  # fmt: skip
    out = diagnose(state, SimpleNamespace(context=ctx))  # type: ignore[arg-type]
    report = HealthReport.from_json(out["report"])
    found = report.finding(ENV_CARRIES_STATE)
    assert found is not None and found.severity is Severity.CRITICAL, found
    assert report.metrics["env_replay_changed_rate"] > 0.05 and (run / ENV_REPLAY_FILE).is_file()
