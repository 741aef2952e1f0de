"""`evotrainer backtest` returns a report for every reward value, and a pilot classifies it too.

Before the fix a reward returning `10**400` made `evotrainer backtest` exit 1 with an `OverflowError`
traceback and no report, and a `1e300` reward turned float32 inf in the trainer, the policy NaN, and the
run was recorded `infra_error`. Now each value is a `candidate_error` naming the file, the value and the
range, through the CLI (child process, process sandbox; a few in Docker), in-process (`--sandbox none`)
and in a training run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from llm_session import copy_demo, fabricate_run

from harness.failures import Outcome
from sandboxes.backtest import run_backtest
from trainer_backend import BACKENDS
from trainer_backend.base import RunSpec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SIG = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
# reward body -> what the report's reasons must say (besides the file)
HOSTILE = {
    "huge_int": ("    return 10**400\n", "10^400"),
    "huge_int_dict": ("    return {'score': 10**400}\n", "10^400"),
    "huge_extra": ("    return {'score': 0.5, 'x': 10**400}\n", "extra"),
    "unprintable_int": ("    return 10**5000\n", "harness/reward.py"),
    "huge_float": ("    return 1e300\n", "1e+300"),
    "some_huge": ("    return 1e300 if '7' in solution_str else 0.0\n", "1e+300"),
    "nan": ("    return float('nan')\n", "non-finite score (nan)"),
    "neg_inf": ("    return float('-inf')\n", "non-finite score (-inf)"),
    "above_range": ("    return 2.0e6\n", "[-1e+06, 1e+06]"),
    "string": ("    return '1.0'\n", "not a number"),
    "none": ("    return None\n", "not a number"),
    "sys_exit": ("    import sys\n    sys.exit(0)\n", "SystemExit"),
    "overflow_raised": ("    raise OverflowError('int too large to convert to float')\n", "OverflowError"),
    "deep_nesting": ("    x = []\n    for _ in range(100000):\n        x = [x]\n    return x\n", "harness/reward.py"),
}
DOCKER_SUBSET = ("huge_int", "huge_float", "sys_exit")


@pytest.fixture(scope="module")
def rollouts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("base")
    harness = copy_demo(base / "h")
    run_dir = base / "run"
    fabricate_run(run_dir, "v0", harness)
    return run_dir


def _candidate(tmp_path: Path, body: str) -> Path:
    harness = copy_demo(tmp_path / "cand")
    (harness / "harness" / "reward.py").write_text(SIG + body)
    return harness


def _cli_backtest(harness: Path, rollouts: Path, out: Path, sandbox: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "backtest",
            "--harness",
            str(harness),
            "--rollouts",
            str(rollouts),
            "--out",
            str(out),
            "--sandbox",
            sandbox,
            "--json",
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _assert_classified(report: dict[str, object], expected: str) -> None:
    assert report["outcome"] == Outcome.CANDIDATE_ERROR.value, report
    assert report["verdict"] == "fail"
    reasons = " ".join(report["reasons"])  # type: ignore[arg-type]
    assert "harness/reward.py" in reasons and expected in reasons, reasons
    assert len(reasons) < 4000


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_the_backtest_cli_reports_every_reward_value(case: str, tmp_path: Path, rollouts: Path) -> None:
    body, expected = HOSTILE[case]
    harness = _candidate(tmp_path, body)
    done = _cli_backtest(harness, rollouts, tmp_path / "out", "process")
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]  # verdict fail, not a crash
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert json.loads(done.stdout) == report
    _assert_classified(report, expected)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_in_process_backtests_classify_every_reward_value(case: str, tmp_path: Path, rollouts: Path) -> None:
    body, expected = HOSTILE[case]
    result = run_backtest(_candidate(tmp_path, body), rollouts, tmp_path / "out", mode="none")
    _assert_classified(result.to_json(), expected)


@pytest.mark.docker
@pytest.mark.parametrize("case", DOCKER_SUBSET)
def test_docker_backtests_classify_hostile_reward_values(
    case: str, tmp_path: Path, rollouts: Path, docker_client: object
) -> None:
    from sandboxes.image import ensure_image

    ensure_image(docker_client)
    body, expected = HOSTILE[case]
    done = _cli_backtest(_candidate(tmp_path, body), rollouts, tmp_path / "out", "docker")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    _assert_classified(json.loads((tmp_path / "out" / "report.json").read_text()), expected)


TINY = (
    "lr: 1.0e-3\ngroup_size: 4\nprompts_per_step: 4\nmax_new_tokens: 16\nval_every: 2\nsave_every: 2\n"
    "n_layers: 1\nhidden: 32\nwarmstart_steps: 20\n"
)
# only training rollouts get the huge value (extra_info carries the split): a backtest on other data would miss it
PILOT_REWARDS = {
    "huge_float_in_training": "    return 1e300 if extra_info.get('split') == 'train' else 0.0\n",
    "huge_int_in_training": "    return 10**400 if extra_info.get('split') == 'train' else 0.0\n",
}


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["none", "process"])
@pytest.mark.parametrize("case", sorted(PILOT_REWARDS))
def test_a_pilot_with_a_hostile_reward_is_a_candidate_error(
    case: str, sandbox: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVOTRAINER_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "h"
    shutil.copytree(EXAMPLES / "arithmetic-oracle", root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "harness" / "trainer.yaml").write_text(TINY)
    val = (root / "data" / "val.jsonl").read_text().splitlines()
    (root / "data" / "val.jsonl").write_text("\n".join(val[::20]) + "\n")
    (root / "harness" / "reward.py").write_text(SIG + PILOT_REWARDS[case])
    spec = RunSpec(run_id="hostile", harness_dir=root, out_dir=tmp_path / "run", steps=2, sandbox=sandbox)
    result = BACKENDS["local"].run(spec)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert result.outcome is Outcome.CANDIDATE_ERROR, summary
    assert "harness/reward.py" in result.message and "reward_range" in result.message, result.message
    assert "Traceback" not in (tmp_path / "run" / "train.log").read_text()


@pytest.mark.slow
def test_a_sandboxed_pilot_without_a_group_filter_keeps_every_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A harness without a filter failed every sandboxed run as infra_error."""
    monkeypatch.setenv("EVOTRAINER_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "h"
    shutil.copytree(EXAMPLES / "arithmetic-oracle", root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "harness" / "trainer.yaml").write_text(TINY)
    manifest = root / "evotrainer.yaml"
    manifest.write_text("".join(line for line in manifest.read_text().splitlines(True) if "group_filter" not in line))
    spec = RunSpec(run_id="nofilter", harness_dir=root, out_dir=tmp_path / "run", steps=2, sandbox="process")
    result = BACKENDS["local"].run(spec)
    assert result.outcome is Outcome.OK, result.message
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    kept = [m["data"]["rollout/kept_group_ratio"] for m in metrics if "rollout/kept_group_ratio" in m["data"]]
    assert kept == [1.0, 1.0]
