"""Health report and backtests on real pilots of the demo harnesses.

Trains the defective and the oracle harness for one pilot each (from the shared, cached warm start) and
checks that the report raises the reward-hacking, truncation and dead-group alerts on the first and none
of the three on the second; then backtests the fixed reward and the lenient one on the defective run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnostics.backtest import Verdict
from diagnostics.report import build_report
from sandboxes.backtest import run_backtest
from trainer_backend import BACKENDS
from trainer_backend.base import RunSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
THREE = ("score.reward_hacking", "behaviour.truncation", "signal.dead_groups")
HACK_ALARM = ("score.reward_hacking", "score.rewarded_wrong")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("demo-runs")
    made = {}
    for name in ("arithmetic", "arithmetic-oracle"):
        spec = RunSpec(run_id=name, harness_dir=EXAMPLES / name, out_dir=out / name, steps=60, seed=0)
        result = BACKENDS["local"].run(spec)
        assert result.outcome.value == "ok", result.message
        made[name] = out / name
    return made


def _fired(run: Path) -> set[str]:
    return {f.alert_id for f in build_report(run).alerts()}


def test_defective_run_raises_hacking_truncation_and_dead_group_alerts(runs: dict[str, Path]) -> None:
    fired = _fired(runs["arithmetic"])
    assert fired & set(HACK_ALARM), fired
    assert {"behaviour.truncation", "signal.dead_groups"} <= fired, fired


def test_fixed_run_raises_none_of_the_three(runs: dict[str, Path]) -> None:
    fired = _fired(runs["arithmetic-oracle"])
    assert not fired & {*THREE, *HACK_ALARM}, fired


def test_fixed_reward_backtest_on_defective_rollouts(runs: dict[str, Path], tmp_path: Path) -> None:
    fixed = run_backtest(EXAMPLES / "arithmetic-oracle", runs["arithmetic"], tmp_path / "fixed", mode="none")
    assert fixed.hack is not None and fixed.hack.passed
    assert fixed.metrics is not None and fixed.metrics.rank_violations_after == 0
    lenient = run_backtest(EXAMPLES / "arithmetic", runs["arithmetic"], tmp_path / "lenient", mode="none")
    assert lenient.verdict is Verdict.FAIL and lenient.hack is not None and not lenient.hack.passed
