"""How many training runs a session starts side by side: no more than the machine's memory holds.

A session's fan-out (a control and its candidates, replicates, backtests) may start several local trainers
at once; three SmolLM2 trainers of several GB each fill a small machine and the kernel kills one. Every
local run therefore takes a slot of the process-wide `GATE` before it starts. A run's peak is estimated
from the largest peak a finished run of this controller process measured (summary.json's ``peak_rss_gb``,
written by the trainer), with a margin: conservative when one process drives sessions of different models
(a LangGraph server). A run whose peak is not yet known starts only when no other run is running (a
session's first run, the base run, always measures one). Runs that do not fit wait for a running one
to finish, and the session says so once. The memory on offer is measured whenever no run is running:
MemAvailable of /proc/meminfo, capped by the cgroup's limit; ``EVOTRAINER_MEMORY_GB`` overrides it (a
machine shared with other jobs, or a test). Runs on a Ray cluster skip the gate: the cluster places them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

MEMORY_ENV = "EVOTRAINER_MEMORY_GB"
MARGIN = 1.15  # a run's estimate over the largest peak measured so far (settings differ between candidates)
_MEMINFO = Path("/proc/meminfo")
_CGROUP_V2 = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory.current"))
_CGROUP_V1 = (Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"), Path("/sys/fs/cgroup/memory/memory.usage_in_bytes"))

log = logging.getLogger(__name__)


def available_gb() -> float:
    """The memory this machine offers new processes now, in GB: `MEMORY_ENV`, else MemAvailable and cgroup.

    Raises:
        ValueError: `MEMORY_ENV` is set but is not a positive number.
    """
    override = os.environ.get(MEMORY_ENV, "").strip()
    if override:
        try:
            value = float(override)
        except ValueError:
            value = -1.0
        if value <= 0:
            raise ValueError(f"{MEMORY_ENV}={override!r}: expected the memory runs may use, in GB (e.g. 8)")
        return value
    offers = [_meminfo_available_gb()]
    for limit_path, usage_path in (_CGROUP_V2, _CGROUP_V1):
        free = _cgroup_free_gb(limit_path, usage_path)
        if free is not None:
            offers.append(free)
    return min(o for o in offers if o is not None) if any(o is not None for o in offers) else float("inf")


def _meminfo_available_gb() -> float | None:
    with contextlib.suppress(OSError, ValueError):
        for line in _MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20  # kB
    return None


def _cgroup_free_gb(limit_path: Path, usage_path: Path) -> float | None:
    with contextlib.suppress(OSError, ValueError):
        limit = limit_path.read_text().strip()
        if limit == "max" or int(limit) >= 2**60:  # no limit (v1 writes a huge number)
            return None
        return (int(limit) - int(usage_path.read_text().strip())) / 2**30
    return None


class MemoryGate:
    """Slots for runs, sized by their estimated peak memory (thread-safe; one per controller process)."""

    def __init__(self, available: Callable[[], float] = available_gb) -> None:
        self._available = available
        self._cond = threading.Condition()
        self._running: dict[str, float] = {}  # run id -> the memory it was admitted with (inf: unknown)
        self._offered = 0.0  # measured when the last run started with none running
        self._peak: float | None = None  # the largest peak a finished run measured
        self._said = False

    def measured(self, peak_gb: float | None) -> None:
        """A finished run's measured peak (None: it measured none): later estimates grow to it."""
        if peak_gb is not None and peak_gb > 0:
            with self._cond:
                self._peak = max(self._peak or 0.0, peak_gb)

    def estimate_gb(self) -> float | None:
        """The memory the next run is expected to take at peak (None until a run measured one)."""
        return None if self._peak is None else self._peak * MARGIN

    @contextlib.contextmanager
    def slot(self, run_id: str, *, wait: bool = True) -> Iterator[None]:
        """Hold a slot for `run_id` while it runs; wait first until it fits (`wait=False`: an adopted run)."""
        with self._cond:
            while wait and not self._fits():
                self._say_queued()
                self._cond.wait()
            if not self._running:
                self._offered = self._available()
            self._running[run_id] = self.estimate_gb() or float("inf")
        try:
            yield
        finally:
            with self._cond:
                self._running.pop(run_id, None)
                self._cond.notify_all()

    def _fits(self) -> bool:
        if not self._running:
            return True
        need = self.estimate_gb()
        return need is not None and sum(self._running.values()) + need <= self._offered

    def _say_queued(self) -> None:
        if self._said:
            return
        self._said = True
        need = self.estimate_gb()
        about = f"about {need:.1f} GB at peak" if need is not None else "a peak not yet measured"
        log.warning(
            "memory: a run needs %s and %d run(s) already hold %.1f of the %.1f GB this machine offers; further "
            "runs wait for a slot and start as runs finish (set %s to the GB runs may use to change the offer)",
            about,
            len(self._running),
            sum(v for v in self._running.values() if v != float("inf")),
            self._offered,
            MEMORY_ENV,
        )


GATE = MemoryGate()
