"""A pretrained model's run on a CPU says, before any work, what it costs and (sized for a GPU) what to use instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.manifest import load_harness
from trainer_backend.local.plugin import cost_line

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(autouse=True)
def _on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVOTRAINER_DEVICE", "cpu")


def _hours(line: str) -> float:
    amount, unit = line.split("takes about ")[1].split()[:2]
    return float(amount) / {"s": 3600, "min": 60, "h": 1}[unit]


def test_the_gpu_sized_example_on_a_cpu_names_hours_and_the_cpu_profile() -> None:
    line = cost_line(load_harness(EXAMPLES / "arithmetic-smollm2"), 60)
    assert line is not None and "sized for a GPU" in line and "warm start 200 x 64" in line, line
    assert _hours(line) > 2, line  # a 200 x 64 warm start alone is hours on 2 cores
    assert f"--harness {EXAMPLES / 'arithmetic-smollm2-cpu'}" in line, line
    assert "\n" not in line


def test_the_cpu_profile_fits_a_cpu_and_says_so() -> None:
    line = cost_line(load_harness(EXAMPLES / "arithmetic-smollm2-cpu"), 20)
    assert line is not None and line.startswith("CPU-sized settings on the cpu"), line
    assert _hours(line) < 0.5, line  # a 20-step run: minutes, not hours


def test_nothing_is_said_for_the_tiny_model_or_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cost_line(load_harness(EXAMPLES / "arithmetic"), 60) is None
    monkeypatch.setenv("EVOTRAINER_DEVICE", "cuda")
    assert cost_line(load_harness(EXAMPLES / "arithmetic-smollm2"), 60) is None
