"""The episode-contract replay on short real runs of the local backend (tiny model, process sandbox).

A run of the env-episode-leak scenario (a module-level cache in its env) records stale lookups; the replay of
its recorded calls in fresh sandbox workers, in another order, finds them and names them. A run of the fixed
harness replays exactly: the trainer's recorded arguments and results read back as the environment got and
gave them. The repaired scenario (every episode from a fresh module) trains with the right answers.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from scenario_cache import scenario_dir

from diagnostics.env_replay import replay_findings
from diagnostics.findings import Severity
from harness.env import declare_isolation
from harness.failures import Outcome
from harness.manifest import load_harness
from sandboxes.env_replay import replay_run
from trainer_backend import BACKENDS
from trainer_backend.base import RunSpec

TINY = """lr: 1.0e-3
group_size: 4
prompts_per_step: 8
val_every: 100
save_every: 100
n_layers: 1
hidden: 32
warmstart_steps: 150
max_turns: 4
max_turn_tokens: 16
"""

pytestmark = pytest.mark.slow


def _run(form: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolate: bool = False) -> tuple[Path, Path]:
    monkeypatch.setenv("EVOTRAINER_CACHE", str(tmp_path.parent / "warm-cache"))
    root = tmp_path / form
    shutil.copytree(scenario_dir("env-episode-leak", form), root)
    (root / "harness" / "trainer.yaml").write_text(TINY)
    val = (root / "data" / "val.jsonl").read_text().splitlines()
    (root / "data" / "val.jsonl").write_text("\n".join(val[::30]) + "\n")
    if isolate:
        env = root / "harness" / "env.py"
        env.write_text(declare_isolation(env.read_text(), "fresh_module")[0])
    out = tmp_path / f"run-{form}"
    spec = RunSpec(run_id=form, harness_dir=root, out_dir=out, steps=2, sandbox="process")
    result = BACKENDS["local"].run(spec)
    assert result.outcome is Outcome.OK, result.message
    return root, out


def test_the_replay_finds_the_leak_of_a_real_run_and_is_silent_on_the_fixed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, run = _run("defective", tmp_path, monkeypatch)
    verdict = replay_run(load_harness(root), run, "process")
    assert verdict.calls >= 20 and len(verdict.changed) >= verdict.calls // 4 and not verdict.nondeterministic
    assert replay_findings(verdict).findings[0].severity is Severity.CRITICAL
    root, run = _run("oracle", tmp_path, monkeypatch)
    verdict = replay_run(load_harness(root), run, "process")
    assert verdict.calls >= 20 and not verdict.changed and not verdict.nondeterministic, verdict
    root, run = _run("defective", tmp_path / "isolated", monkeypatch, isolate=True)
    verdict = replay_run(load_harness(root), run, "process")
    assert verdict.calls >= 20 and not verdict.changed and not verdict.nondeterministic, verdict
