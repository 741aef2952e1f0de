"""What the session display reads from run folders and how it prints it.

Run folders are fabricated in the layout the trainers write (spec.json, metrics.jsonl, train.log,
summary.json); printing goes to a recording rich console, so markup handling is what users get.
"""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path

from rich.console import Console

from agent.commands.progress import (
    SessionProgress,
    SessionView,
    StepClock,
    choose_form,
    describe_run,
    duration,
    eta_s,
    read_run,
)
from agent.commands.run import _describe


def _run_dir(root: Path, name: str, steps: int, done: int, *, summary: str | None = None) -> Path:
    run = root / name
    run.mkdir(parents=True)
    (run / "spec.json").write_text(json.dumps({"run_id": name, "steps": steps}))
    lines = [json.dumps({"step": 0, "data": {"val/strict_acc": 0.25}})]
    for step in range(1, done + 1):
        data = {"critic/score/mean": 0.1 * step, "timing_s/step": 2.0}
        if step == 2:
            data["val/strict_acc"] = 0.5
        lines.append(json.dumps({"step": step, "data": data}))
    (run / "metrics.jsonl").write_text("\n".join(lines) + '\n{"step": 9, "data": {"critic')  # half-written line
    if summary is not None:
        (run / "summary.json").write_text(json.dumps({"outcome": summary}))
    return run


def test_read_run_takes_step_total_reward_last_heldout_and_skips_a_half_written_line(tmp_path: Path) -> None:
    run = read_run(_run_dir(tmp_path, "r1", steps=10, done=3))
    assert (run.total, run.step, run.heldout, run.outcome) == (10, 3, 0.5, None)
    assert run.reward is not None and abs(run.reward - 0.3) < 1e-9
    assert run.trainer_s_per_step == 2.0


def test_a_warm_start_shows_its_own_counter_before_the_first_step(tmp_path: Path) -> None:
    run_dir = tmp_path / "r2"
    run_dir.mkdir()
    (run_dir / "train.log").write_text("warmstart step 0/1000 loss 3.2\nwarmstart step 250/1000 loss 1.1\n")
    run = read_run(run_dir)
    assert run.step is None and run.warmstart == (251, 1000)
    assert describe_run(run, StepClock()) == "warm start 251/1000"


def test_eta_comes_from_measured_step_times_then_the_trainers_own_timing(tmp_path: Path) -> None:
    run = read_run(_run_dir(tmp_path, "r3", steps=10, done=3))
    clock = StepClock()
    assert eta_s(run, clock) == 7 * 2.0  # no observation yet: the trainer's timing_s/step
    clock.saw("r3", 1, 100.0)
    clock.saw("r3", 3, 101.0)  # two steps in one second as the display saw them
    assert eta_s(run, clock) == 7 * 0.5
    assert duration(3.5) == "4s" and duration(125) == "2m05s" and duration(7300) == "2h01m" and duration(None) == "—"
    assert describe_run(run, clock) == "step 3/10 · reward 0.300 · held-out 0.500 · ETA 4s"


def test_session_view_tracks_iteration_versions_best_and_phase() -> None:
    view = SessionView("s1", max_iterations=4, max_steps=100)
    view.heard({"version": {"index": 0, "strict_acc": 0.4}, "iteration": 1, "steps_used": 20})
    view.heard({"history": [{"version": 1, "strict_acc": 0.6}], "version": {"index": 1, "strict_acc": 0.6}})
    view.heard({"history": [{"version": 2, "strict_acc": 0.5}], "version": {"index": 2, "strict_acc": 0.5}})
    assert view.best() == (1, 0.6) and view.current == 2 and view.steps_used == 20
    view.running = {"train": 3}
    assert view.phase() == "train ×3"


def _display(tmp_path: Path, form: str = "plain") -> tuple[SessionProgress, Console]:
    console = Console(record=True, width=200, force_terminal=False, color_system=None)
    view = SessionView("s1", max_iterations=2, max_steps=100)
    describe = functools.partial(_describe, "s1")
    return SessionProgress(console, view, tmp_path, form, describe=describe), console  # type: ignore[arg-type]


def test_printed_values_keep_their_brackets(tmp_path: Path) -> None:
    display, console = _display(tmp_path)
    update = {"candidates": [
        {"id": "s1-v1.1-fix", "iteration": 1, "status": "proposed", "reason": ""},
        {"id": "s1-v1.2-spam", "iteration": 1, "status": "refused", "reason": "touches [bold]eval/[/bold]"},
    ]}  # fmt: skip
    display.update("propose", update)
    _run_dir(tmp_path, "s1-i1-k1.1-[x]", steps=10, done=2)
    display.wall_start = display.phase_start = time.time() - 60
    console.print(display.render())
    text = console.export_text()
    assert "v1.1-fix [proposed]" in text and "v1.2-spam [refused] touches [bold]eval/[/bold]" in text, text
    assert "s1-v1.1-fix" not in text, "candidates print by their one name, without the session"
    assert "s1-i1-k1.1-[x]" in text and "step 2/10" in text, text


def test_plain_lines_print_a_run_only_when_it_advanced(tmp_path: Path) -> None:
    display, _ = _display(tmp_path)
    run_dir = _run_dir(tmp_path, "r1", steps=10, done=2)
    display.wall_start = time.time() - 60
    first = display.plain_lines(display.active_runs())
    assert [line.plain.split(": ", 1)[1].startswith("step 2/10") for line in first] == [True]
    assert display.plain_lines(display.active_runs()) == []
    with open(run_dir / "metrics.jsonl", "a") as fh:
        fh.write("\n" + json.dumps({"step": 3, "data": {"critic/score/mean": 0.3}}) + "\n")
    assert len(display.plain_lines(display.active_runs())) == 1


def test_finished_runs_leave_the_view_when_the_next_phase_starts(tmp_path: Path) -> None:
    display, _ = _display(tmp_path)
    _run_dir(tmp_path, "done", steps=4, done=4, summary="ok")
    display.wall_start = display.phase_start = time.time() - 60
    assert [r.run_id for r in display.active_runs()] == ["done"]
    display.task("evaluate", {"iteration": 1}, done=False)  # a new phase: nothing was running
    assert display.active_runs() == []


def test_the_form_follows_the_terminal_and_quiet() -> None:
    assert choose_form(Console(force_terminal=True), quiet=False) == "live"
    assert choose_form(Console(force_terminal=False), quiet=False) == "plain"
    assert choose_form(Console(force_terminal=True), quiet=True) == "quiet"


def test_an_unchanged_run_is_printed_again_after_the_heartbeat(tmp_path: Path) -> None:
    import agent.commands.progress as progress

    display, _ = _display(tmp_path)
    _run_dir(tmp_path, "slow", steps=10, done=1)
    display.wall_start = time.time() - 60
    assert len(display.plain_lines(display.active_runs())) == 1
    assert display.plain_lines(display.active_runs()) == []
    display._plain._printed["slow"] = (display._plain._printed["slow"][0], time.monotonic() - progress.HEARTBEAT_S - 1)
    assert len(display.plain_lines(display.active_runs())) == 1


def test_the_warm_start_gets_an_eta_once_its_counter_moved(tmp_path: Path) -> None:
    run_dir = tmp_path / "w"
    run_dir.mkdir()
    (run_dir / "train.log").write_text("warmstart step 250/1000 loss 1.1\n")
    clock = StepClock()
    clock.saw("w#warmstart", 1, 0.0)
    clock.saw("w#warmstart", 251, 25.0)  # 0.1 s per warm-start step
    assert describe_run(read_run(run_dir), clock) == "warm start 251/1000 · ETA 1m15s"
