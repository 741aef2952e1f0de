"""A session starts no more training runs side by side than the machine's memory holds (agent/adapters/memory.py)."""

from __future__ import annotations

import threading
import time

import pytest

from agent.adapters import memory
from agent.adapters.memory import MemoryGate


def _hold(gate: MemoryGate, run_id: str, events: list[tuple[str, str]], hold_s: float) -> None:
    with gate.slot(run_id):
        events.append(("start", run_id))
        time.sleep(hold_s)
        events.append(("end", run_id))


def _most_at_once(events: list[tuple[str, str]]) -> int:
    now = most = 0
    for kind, _ in events:
        now += 1 if kind == "start" else -1
        most = max(most, now)
    return most


def _fan_out(gate: MemoryGate, n: int) -> list[tuple[str, str]]:
    events: list[tuple[str, str]] = []
    threads = [threading.Thread(target=_hold, args=(gate, f"r{i}", events, 0.2)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(events) == 2 * n, events
    return events


def test_as_many_runs_start_together_as_the_offered_memory_holds() -> None:
    gate = MemoryGate(available=lambda: 10.0)
    gate.measured(4.0)  # 4.6 GB each with the margin: two fit in 10 GB, not three
    assert _most_at_once(_fan_out(gate, 3)) == 2


def test_runs_start_one_after_another_when_one_fills_the_memory(caplog: pytest.LogCaptureFixture) -> None:
    gate = MemoryGate(available=lambda: 5.0)
    gate.measured(4.0)
    assert _most_at_once(_fan_out(gate, 3)) == 1
    queued = [r.getMessage() for r in caplog.records if r.getMessage().startswith("memory:")]
    assert len(queued) == 1 and "about 4.6 GB at peak" in queued[0] and memory.MEMORY_ENV in queued[0]


def test_a_run_whose_peak_is_unknown_runs_alone() -> None:
    assert _most_at_once(_fan_out(MemoryGate(available=lambda: 1000.0), 2)) == 1


def test_an_adopted_run_takes_its_slot_without_waiting() -> None:
    gate = MemoryGate(available=lambda: 1.0)
    entered = []
    with gate.slot("first"), gate.slot("adopted", wait=False):  # would wait forever if it queued
        entered.append("adopted")  # a run an earlier controller started is already running: it takes a slot
    assert entered == ["adopted"]
    assert gate._running == {}  # both slots were released on leaving


def test_the_offered_memory_can_be_set_and_a_bad_value_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(memory.MEMORY_ENV, "6.5")
    assert memory.available_gb() == 6.5
    monkeypatch.setenv(memory.MEMORY_ENV, "lots")
    with pytest.raises(ValueError, match=memory.MEMORY_ENV):
        memory.available_gb()
    monkeypatch.delenv(memory.MEMORY_ENV)
    assert 0 < memory.available_gb() < float("inf")  # this machine's MemAvailable (and cgroup limit)
