"""Live progress of a session for the CLI: what runs, how far, how fast, and the best version.

`SessionProgress` is the `agent.session.Observer` that `evotrainer run|resume|approve` pass to the graph.
It hears the graph's task and update events (iteration, phase, versions) and, on a background thread,
reads the run folders the trainers write (`spec.json`, `metrics.jsonl`, `train.log`, `summary.json`):
never the store, never the trainer processes. Three forms:

- ``live`` (a terminal): a rich live panel redrawn twice a second: iteration, phase, each active run with
  its step / total, training reward, last held-out score and ETA, the best version so far;
- ``plain`` (no terminal: CI, logs): one line per node update, and a progress line per active run every
  `plain_every_s` seconds when it advanced;
- ``quiet``: nothing until the end.

`PlainLines` makes the plain form's run lines; `evotrainer train` prints its one run's progress with it too.

Every value reaches rich as `Text` (never parsed as markup), so `v1.2 [proposed]` prints as it is.
ETAs come from measured step times: the wall-clock rate at which the display saw a run's step counter
advance, else the trainer's own `timing_s/step`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from diagnostics.schema import SPEC_FILE, STRICT_METRIC, TRAIN_REWARD_METRIC
from trainer_backend.base import LOG_FILE, METRICS_FILE, SUMMARY_FILE

Form = Literal["live", "plain", "quiet"]
REWARD, HELDOUT, STEP_TIME = TRAIN_REWARD_METRIC, STRICT_METRIC, "timing_s/step"
LIVE_REFRESH_S = 0.5
TAIL_BYTES = 4096  # of train.log: enough for the latest warm-start line
HEARTBEAT_S = 60.0  # plain form: repeat an unchanged run's line this often, so a log shows it is alive
WARM = "#warmstart"  # step-clock key suffix of a run's warm-start counter


@dataclass(frozen=True)
class RunProgress:
    """How far one run is, read from its folder."""

    run_id: str
    total: int | None  # steps it was asked for
    step: int | None  # last step in metrics.jsonl (0: the initial validation)
    reward: float | None  # training reward of the last step
    heldout: float | None  # last held-out strict accuracy
    warmstart: tuple[int, int] | None  # (done, total) while the warm start runs
    outcome: str | None  # from summary.json once the run ended
    trainer_s_per_step: float | None  # the trainer's own timing of recent steps


def read_run(run_dir: Path) -> RunProgress:
    """Read a run folder's progress; missing or half-written files read as 'not yet'."""
    total = _spec_steps(run_dir / SPEC_FILE)
    step = reward = heldout = None
    times: list[float] = []
    metrics = run_dir / METRICS_FILE
    if metrics.is_file():
        for raw in metrics.read_bytes().splitlines():
            try:
                row = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue  # a line the trainer is writing right now
            data = row.get("data") if isinstance(row, dict) else None
            if not isinstance(data, dict) or not isinstance(row.get("step"), int):
                continue
            step = row["step"]
            reward = _num(data.get(REWARD), reward)
            heldout = _num(data.get(HELDOUT), heldout)
            if isinstance(data.get(STEP_TIME), (int, float)):
                times = [*times[-4:], float(data[STEP_TIME])]
    outcome = None
    summary = run_dir / SUMMARY_FILE
    if summary.is_file():
        try:
            outcome = str(orjson.loads(summary.read_bytes()).get("outcome", "done"))
        except orjson.JSONDecodeError:
            outcome = None
    warm = _warmstart(run_dir / LOG_FILE) if step is None and outcome is None else None
    per_step = sum(times) / len(times) if times else None
    return RunProgress(run_dir.name, total, step, reward, heldout, warm, outcome, per_step)


def _num(value: Any, default: float | None) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def _spec_steps(path: Path) -> int | None:
    try:
        steps = orjson.loads(path.read_bytes()).get("steps")
    except (OSError, orjson.JSONDecodeError, AttributeError):
        return None
    return steps if isinstance(steps, int) else None


def _warmstart(log: Path) -> tuple[int, int] | None:
    """The latest `warmstart step N/M` line of train.log, as (N + 1, M)."""
    try:
        with open(log, "rb") as fh:
            fh.seek(max(0, log.stat().st_size - TAIL_BYTES))
            tail = fh.read().decode(errors="replace")
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        if line.startswith("warmstart step "):
            done, _, total = line.split()[2].partition("/")
            if done.isdigit() and total.isdigit():
                return int(done) + 1, int(total)
    return None


@dataclass
class StepClock:
    """Seconds per step of each run, measured from when the display saw its step counter move."""

    window: int = 8
    samples: dict[str, list[tuple[float, int]]] = field(default_factory=dict)

    def saw(self, run_id: str, step: int, now: float) -> None:
        """Record that `run_id` was at `step` at time `now` (only changes are kept)."""
        seen = self.samples.setdefault(run_id, [])
        if not seen or seen[-1][1] != step:
            seen.append((now, step))
            del seen[: -self.window]

    def seconds_per_step(self, run_id: str) -> float | None:
        """Wall seconds per step over the recent window, or None with fewer than two observations."""
        seen = self.samples.get(run_id, [])
        if len(seen) < 2 or seen[-1][1] <= seen[0][1]:
            return None
        return (seen[-1][0] - seen[0][0]) / (seen[-1][1] - seen[0][1])


def observe(run: RunProgress, clock: StepClock, now: float) -> None:
    """Feed `run`'s step counter (its warm-start counter while that runs) to the step clock."""
    if run.step is not None:
        clock.saw(run.run_id, run.step, now)
    elif run.warmstart is not None:
        clock.saw(run.run_id + WARM, run.warmstart[0], now)


class PlainLines:
    """Plain progress lines (no terminal): one per run that advanced since its last line, else every HEARTBEAT_S.

    Each line: seconds since `started_at`, `progress`, the run id and `describe_run`'s text.
    """

    def __init__(self, clock: StepClock, started_at: float) -> None:
        self.clock, self.started_at = clock, started_at
        self._printed: dict[str, tuple[str, float]] = {}  # run id -> (line without ETA, when printed)

    def lines(self, runs: Iterable[RunProgress]) -> list[Text]:
        """The lines to print now for `runs` (finished runs get none)."""
        lines = []
        now = time.monotonic()
        for run in runs:
            if run.outcome is not None:
                continue
            text = describe_run(run, self.clock)
            key = text.split(" · ETA")[0]
            last = self._printed.get(run.run_id)
            if last is not None and last[0] == key and now - last[1] < HEARTBEAT_S:
                continue
            self._printed[run.run_id] = (key, now)
            stamp = f"{now - self.started_at:7.1f}s "
            lines.append(Text.assemble((stamp, "dim"), f"{'progress':<20} ", run.run_id, ": ", text))
        return lines


def eta_s(run: RunProgress, clock: StepClock) -> float | None:
    """Seconds left for `run` (its warm start, while that runs) from measured step times; None while unknown."""
    if run.outcome is not None:
        return 0.0
    if run.step is None and run.warmstart is not None:
        rate = clock.seconds_per_step(run.run_id + WARM)
        return None if rate is None else max(0, run.warmstart[1] - run.warmstart[0]) * rate
    if run.total is None or run.step is None:
        return None
    rate = clock.seconds_per_step(run.run_id) or run.trainer_s_per_step
    return None if rate is None else max(0, run.total - run.step) * rate


def duration(seconds: float | None) -> str:
    """`45s`, `3m05s`, `1h02m`; `—` when unknown."""
    if seconds is None:
        return "—"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def describe_run(run: RunProgress, clock: StepClock) -> str:
    """One line: `step 12/60 · reward 0.412 · held-out 0.530 · ETA 1m05s`."""
    if run.outcome is not None:
        held = f" · held-out {run.heldout:.3f}" if run.heldout is not None else ""
        return f"{run.outcome}{held}"
    if run.step is None:
        if run.warmstart is not None:
            eta = eta_s(run, clock)
            tail = f" · ETA {duration(eta)}" if eta is not None else ""
            return f"warm start {run.warmstart[0]}/{run.warmstart[1]}{tail}"
        return "starting (warm start / first validation)"
    total = "?" if run.total is None else str(run.total)
    parts = [f"step {run.step}/{total}"]
    if run.reward is not None and run.step > 0:
        parts.append(f"reward {run.reward:.3f}")
    if run.heldout is not None:
        parts.append(f"held-out {run.heldout:.3f}")
    parts.append(f"ETA {duration(eta_s(run, clock))}")
    return " · ".join(parts)


@dataclass
class SessionView:
    """What the graph told the display so far."""

    session_id: str
    max_iterations: int
    max_steps: int
    iteration: int = 0
    running: dict[str, int] = field(default_factory=dict)  # node name -> tasks running
    versions: dict[int, float] = field(default_factory=dict)  # version index -> strict held-out score
    current: int | None = None
    steps_used: int = 0

    def phase(self) -> str:
        """The running nodes, e.g. `train ×3`, or `between steps`."""
        if not self.running:
            return "between steps"
        return ", ".join(name if n == 1 else f"{name} ×{n}" for name, n in self.running.items())

    def best(self) -> tuple[int, float] | None:
        """(index, strict score) of the best version so far (the earliest on ties)."""
        if not self.versions:
            return None
        index = max(sorted(self.versions), key=lambda i: self.versions[i])
        return index, self.versions[index]

    def heard(self, values: dict[str, Any]) -> None:
        """Take iteration, versions and budget from state values or a node's update."""
        if isinstance(values.get("iteration"), int):
            self.iteration = values["iteration"]
        version = values.get("version")
        if isinstance(version, dict) and isinstance(version.get("index"), int):
            self.current = version["index"]
            self.versions[version["index"]] = float(version.get("strict_acc", 0.0))
        for h in values.get("history") or []:
            if isinstance(h, dict) and isinstance(h.get("version"), int):
                self.versions[h["version"]] = float(h.get("strict_acc", 0.0))
        if isinstance(values.get("steps_used"), int):
            self.steps_used = values["steps_used"]


class SessionProgress:
    """The CLI's observer of a running graph: node lines plus a live (or plain) view of its runs."""

    def __init__(
        self,
        console: Console,
        view: SessionView,
        runs_dir: Path,
        form: Form,
        *,
        plain_every_s: float = 10.0,
        describe: Any = None,
    ) -> None:
        self.console, self.view, self.runs_dir, self.form = console, view, runs_dir, form
        self.plain_every_s = plain_every_s
        self.describe = describe or (lambda node, update: "")
        self.clock = StepClock()
        self.started_at = time.monotonic()
        self.wall_start = time.time()
        self.phase_start = time.time()
        self._lock = threading.Lock()  # the view: written by graph events, read by the renderer
        self._scan_lock = threading.Lock()  # run folder scans (they feed the step clock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._live: Live | None = None
        self._plain = PlainLines(self.clock, self.started_at)

    # --- agent.session.Observer -------------------------------------------------------------------
    def started(self, values: dict[str, Any]) -> None:
        """Initialise from the thread's saved state and start the background view."""
        with self._lock:
            self.view.heard(values)
        if self.form == "live":
            self._live = Live(self.render(), console=self.console, refresh_per_second=4, transient=False)
            self._live.start()
        if self.form != "quiet":
            self._thread = threading.Thread(target=self._loop, name="evotrainer-progress", daemon=True)
            self._thread.start()

    def task(self, name: str, payload: Any, *, done: bool) -> None:
        """Track which nodes run (the phase) and the iteration they work on."""
        with self._lock:
            running = self.view.running
            if done:
                running[name] = running.get(name, 1) - 1
                if running[name] <= 0:
                    del running[name]
            else:
                if not running:
                    self.phase_start = time.time()
                running[name] = running.get(name, 0) + 1
                if isinstance(payload, dict) and isinstance(payload.get("iteration"), int):
                    self.view.iteration = payload["iteration"]

    def update(self, node: str, update: Any) -> None:
        """Print the node's one-line outcome and note new versions."""
        if isinstance(update, dict):
            with self._lock:
                self.view.heard(update)
        if self.form == "quiet":
            return
        line = Text.assemble((f"{time.monotonic() - self.started_at:7.1f}s ", "dim"), (f"{node:<20} ", "bold"))
        line.append(self.describe(node, update))
        self.console.print(line, soft_wrap=self.form == "plain")  # plain: one log line per event, never wrapped

    # --- the background view ----------------------------------------------------------------------
    def stop(self) -> None:
        """Stop the background thread and leave the last frame on screen."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._live is not None:
            self._live.update(self.render())
            self._live.stop()
            self._live = None

    def _loop(self) -> None:
        last_plain = time.monotonic()
        while not self._stop.wait(LIVE_REFRESH_S):
            try:
                runs = self.active_runs()
            except OSError:  # a folder changed under the scan: the next tick reads it again
                continue
            if self._live is not None:
                self._live.update(self.render(runs))
            elif time.monotonic() - last_plain >= self.plain_every_s:
                last_plain = time.monotonic()
                for line in self.plain_lines(runs):
                    self.console.print(line, soft_wrap=True)

    def active_runs(self) -> list[RunProgress]:
        """Runs training now, and those that ended during the current phase, oldest first."""
        if not self.runs_dir.is_dir():
            return []
        with self._scan_lock:
            return self._scan()

    def _scan(self) -> list[RunProgress]:
        now = time.monotonic()
        found = []
        for run_dir in sorted(self.runs_dir.iterdir(), key=lambda p: p.stat().st_mtime):
            summary = run_dir / SUMMARY_FILE
            if summary.exists():
                if summary.stat().st_mtime < self.phase_start:
                    continue
            elif _last_touched(run_dir) < self.wall_start - 5:
                continue  # a run no controller follows now (e.g. left by a killed session)
            run = read_run(run_dir)
            observe(run, self.clock, now)
            found.append(run)
        return found

    def plain_lines(self, runs: Iterable[RunProgress]) -> list[Text]:
        """Progress lines for runs that advanced since they were last printed (or every `HEARTBEAT_S`)."""
        return self._plain.lines(runs)

    def render(self, runs: list[RunProgress] | None = None) -> Group:
        """The live panel: header, best version, one row per active run."""
        runs = self.active_runs() if runs is None else runs
        with self._lock:
            view = self.view
            elapsed = duration(time.monotonic() - self.started_at)
            head = Text.assemble(
                ("EvoTrainer ", "bold"),
                view.session_id,
                f" · iteration {min(view.iteration, view.max_iterations)}/{view.max_iterations} · phase ",
                (view.phase(), "cyan"),
                f" · elapsed {elapsed}",
            )
            best = view.best()
            second = Text(f"steps {view.steps_used}/{view.max_steps}")
            if best is not None:
                second.append(f" · best v{best[0]} (held-out {best[1]:.3f})")
            if view.current is not None and view.current in view.versions:
                second.append(f" · incumbent v{view.current} ({view.versions[view.current]:.3f})")
        table = Table(box=None, pad_edge=False, show_edge=False, expand=False)
        table.add_column("run", no_wrap=True)
        table.add_column("progress")
        etas = [eta_s(r, self.clock) for r in runs if r.outcome is None]
        for run in runs:
            table.add_row(Text(run.run_id), Text(describe_run(run, self.clock)))
        parts: list[Any] = [head, second]
        if runs:
            known = [e for e in etas if e is not None]
            if known:
                parts.append(Text(f"phase ETA {duration(max(known))} (slowest active run)", style="dim"))
            parts.append(table)
        return Group(*parts)


def _last_touched(run_dir: Path) -> float:
    times = [p.stat().st_mtime for p in (run_dir / LOG_FILE, run_dir / METRICS_FILE, run_dir / SPEC_FILE) if p.exists()]
    return max(times, default=run_dir.stat().st_mtime)


def choose_form(console: Console, quiet: bool) -> Form:
    """`quiet` when asked; `live` on a real terminal; otherwise plain lines."""
    if quiet:
        return "quiet"
    return "live" if console.is_terminal and not console.is_dumb_terminal else "plain"
