"""A server's usage report cannot talk a budget around, and an unenforceable cost budget is refused.

Reported token counts are clamped (negative, NaN, text, 10**30) and never recorded below a local count of
what was sent and received; `--max-cost` for a model without a price and without `--price-per-1k` is
refused at start, naming `--price-per-1k`.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from agent.context import Context
from agent.llm import accounting

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("reported", "clamped"),
    [
        (120, 120),
        (0, 0),
        (-5_000_000, 0),
        (-1, 0),
        (10**30, accounting.MAX_TOKENS_PER_CALL),
        (1.5e300, accounting.MAX_TOKENS_PER_CALL),
        (math.inf, accounting.MAX_TOKENS_PER_CALL),
        (-math.inf, 0),
        (math.nan, 0),
        (12.7, 12),
        ("9999", 0),
        (None, 0),
        (True, 0),
        ([5], 0),
    ],
)
def test_reported_usage_is_clamped(reported: object, clamped: int) -> None:
    assert accounting.clamp_tokens(reported) == clamped


def test_the_local_count_rounds_up_and_is_capped() -> None:
    assert accounting.estimate_tokens(0) == 0
    assert accounting.estimate_tokens(1) == 1
    assert accounting.estimate_tokens(4 * 1000 + 1) == 1001
    assert accounting.estimate_tokens(10**12) == accounting.MAX_TOKENS_PER_CALL


def test_a_cost_budget_needs_a_price() -> None:
    with pytest.raises(ValueError, match="--price-per-1k"):
        Context(policy="llm", llm_model="my-local-model", max_cost_usd=1.0)
    Context(policy="llm", llm_model="my-local-model", max_cost_usd=1.0, price_per_1k=0.002)
    Context(policy="llm", llm_model="gpt-4o-mini", max_cost_usd=1.0)  # in the price table
    Context(policy="llm", llm_model="my-local-model")  # no cost budget: nothing to enforce


@pytest.mark.parametrize("field", ["max_cost_usd", "price_per_1k"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0])
def test_budgets_and_prices_must_be_finite(field: str, value: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        Context(policy="llm", llm_model="gpt-4o", **{field: value})


def test_run_refuses_an_unenforceable_cost_budget_before_anything_is_written(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "run", "--llm", "my-local-model", "--max-cost", "1", "--sandbox", "none"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "unused", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "--price-per-1k" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / ".evotrainer").exists() and not (tmp_path / "evotrainer-demo").exists()
