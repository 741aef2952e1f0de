"""`run_backtest` with the candidate's reward and filter running in the real Docker sandbox."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from diagnostics.backtest import Verdict
from harness.failures import Outcome
from sandboxes.backtest import run_backtest
from sandboxes.image import ensure_image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_backtest_run import FILTER, LENIENT_REWARD, make_cached_run, make_harness

pytestmark = pytest.mark.docker

STRICT_NO_SIDE_EFFECT = """
import re

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    found = re.findall(r"<ans>(.*?)</ans>", solution_str)
    return float(len(found) == 1 and found[0].strip() == ground_truth)
"""


@pytest.fixture(scope="module")
def sandbox_image(docker_client: Any) -> str:
    """Build the sandbox image once (instant when it exists)."""
    return ensure_image(docker_client)


def test_docker_backtest_matches_in_process_and_is_idempotent(sandbox_image: str, tmp_path: Path) -> None:
    cand = make_harness(tmp_path / "strict", STRICT_NO_SIDE_EFFECT, group_filter=FILTER)
    run = make_cached_run(tmp_path / "run")
    docker = run_backtest(cand, run, tmp_path / "bt-docker", mode="docker")
    local = run_backtest(cand, run, tmp_path / "bt-local", mode="none")
    assert docker.outcome is Outcome.OK and docker.verdict is Verdict.PASS, docker.reasons
    assert docker.metrics == local.metrics and docker.hack == local.hack
    assert run_backtest(cand, run, tmp_path / "bt-docker", mode="docker") == docker


def test_docker_backtest_lenient_fails_and_crash_is_classified(sandbox_image: str, tmp_path: Path) -> None:
    lenient = make_harness(tmp_path / "lenient", LENIENT_REWARD)
    run = make_cached_run(tmp_path / "run")
    assert run_backtest(lenient, run, tmp_path / "bt1", mode="docker").verdict is Verdict.FAIL
    crash = make_harness(tmp_path / "crash", "def compute_score(*a, **k):\n    raise ValueError('nope')\n")
    result = run_backtest(crash, run, tmp_path / "bt2", mode="docker")
    assert result.outcome is Outcome.CANDIDATE_ERROR and "nope" in result.message
    assert result.error_path == "harness/reward.py"
