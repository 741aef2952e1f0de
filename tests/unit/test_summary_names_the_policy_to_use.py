"""The end-of-run summary names the final and the best version, which policy to use and why, and the
final checkpoint; it reports the final version's alerts (not those of the last diagnosed run).

`choose_version` is pure; `session_summary` is checked over a real migrated SQLite store with run folders.
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from agent.reporting.summary import (
    VersionLine,
    choose_version,
    session_summary,
    summary_lines,
    summary_renderables,
)
from diagnostics.findings import Finding, HealthReport, Layer, Severity
from diagnostics.schema import Rollout, write_rollouts
from diagnostics.stats import PairedComparison
from store import repository
from store.engine import make_engine, session_scope, upgrade


def _line(index: int, strict: float, steps: int, how: str = "merged v1.1-x") -> VersionLine:
    return VersionLine(index, how, strict, steps, f"/runs/v{index}", ())


def _cmp(delta: float, low: float, high: float) -> PairedComparison:
    return PairedComparison(0.89, 0.89 + delta, delta, low, high, 0.5, 300)


def test_final_version_wins_when_the_earlier_higher_score_is_noise() -> None:
    final, best = _line(4, 0.840, 300), _line(3, 0.890, 240)
    choice = choose_version(final, best, _cmp(-0.05, -0.11, 0.01), min_effect=0.05)
    assert choice.use == 4
    assert "300 training steps" in choice.reason and "seed noise" in choice.reason and "CI spans zero" in choice.reason
    assert "v3 0.890 vs v4 0.840" in choice.reason


def test_earlier_version_wins_only_on_a_significant_material_drop() -> None:
    final, best = _line(4, 0.700, 300), _line(3, 0.890, 240)
    assert choose_version(final, best, _cmp(-0.19, -0.25, -0.13), min_effect=0.05).use == 3
    small = choose_version(final, best, _cmp(-0.03, -0.05, -0.01), min_effect=0.05)
    assert small.use == 4 and "noise floor" in small.reason  # significant but below the noise floor
    assert choose_version(final, best, None, min_effect=0.05).use == 3  # no paired evidence: the gap is large
    assert choose_version(_line(4, 0.87, 300), best, None, min_effect=0.05).use == 4


def test_final_version_that_is_also_best_is_used() -> None:
    final = _line(2, 0.9, 36)
    assert choose_version(final, final, None, 0.05).use == 2


def _run_dir(root: Path, name: str, correct: set[int], alerts: list[str]) -> Path:
    folder = root / name
    rollouts = [
        Rollout(name, 12, "val", f"p{i}", f"p{i}", 0, "q", "a", "a", 0.0, strict_score=1.0 if i in correct else 0.0)
        for i in range(100)
    ]
    write_rollouts(folder / "rollouts" / "val" / "step_12.jsonl", rollouts)
    findings = tuple(Finding(a, Layer.SIGNAL, Severity.WARNING, a, 0.5, 0.3, "x > 0.3") for a in alerts)
    report = HealthReport(run_id=name, run_dir=str(folder), findings=findings, metrics={})
    (folder / "health_report.json").write_text(json.dumps(report.to_json()))
    # what a finished local run leaves: its handle (which backend trained it) and its last checkpoint
    (folder / "handle.json").write_text(json.dumps({"backend": "local", "run_id": name, "out_dir": str(folder)}))
    (folder / "checkpoints").mkdir()
    (folder / "checkpoints" / "last.pt").write_bytes(b"")
    return folder


def test_session_summary_reads_the_final_versions_alerts_and_checkpoint(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    engine = make_engine(url)
    # v2 loses 9 prompts v1 solved and solves 4 it missed: 0.89 -> 0.84, a paired CI that spans zero
    runs = {  # version -> (run id, prompts solved of 100, alerts, candidate)
        0: ("s-v0", set(range(60)), ["signal.dead_groups", "score.rewarded_wrong"], None),
        1: ("s-v1.1-fix", set(range(89)), ["signal.dead_groups"], "s-v1.1-fix"),
        2: ("s-v2.0-control", set(range(80)) | {89, 90, 91, 92}, ["behaviour.truncation"], None),
    }
    with session_scope(engine) as db:
        repository.create_session(
            db, session_id="s", harness_path="h", repo_path=str(tmp_path), max_iterations=2, max_train_steps=100,
            main_branch="evo/s/main",
        )  # fmt: skip
        parent = None
        for index, (run_id, correct, alerts, cand) in runs.items():
            if cand:
                repository.add_candidate(
                    db, candidate_id=cand, session_id="s", parent_version_id=parent.id, iteration=1, slug="fix",  # type: ignore[union-attr]
                    branch="evo/s/v1.1-fix", worktree_path="w", hypothesis="h", factor="reward", success_criterion="c",
                )  # fmt: skip
            folder = _run_dir(tmp_path / "runs", run_id, correct, alerts)
            repository.add_run(
                db, run_id=run_id, session_id="s", backend="local", kind="pilot" if index else "full", steps=12,
                artefact_dir=str(folder), candidate_id=cand,
            )  # fmt: skip
            parent = repository.add_version(
                db, session_id="s", branch="evo/s/main", commit_sha=f"{index:040d}", run_id=run_id,
                parent_id=parent.id if parent else None,
            )  # fmt: skip
            parent.strict_score = len(correct) / 100
        summary = session_summary(db, "s", min_effect=0.05, stop_reason="iteration budget reached (2)")
    engine.dispose()
    assert [v.how for v in summary.versions] == ["starting harness", "merged v1.1-fix", "v1 harness trained on"]
    assert [v.lineage_steps for v in summary.versions] == [12, 24, 36]
    assert summary.versions[-1].alerts == ("behaviour.truncation",)
    assert summary.choice is not None and summary.choice.use == 2, summary.choice
    assert "CI spans zero" in summary.choice.reason
    text = "\n".join(summary_lines(summary))
    assert "final v2: strict 0.840" in text and "best v1: strict 0.890" in text and "use v2:" in text
    assert f"final checkpoint (v2): {tmp_path / 'runs' / 's-v2.0-control' / 'checkpoints' / 'last.pt'}" in text
    assert "alerts of the final version v2: behaviour.truncation" in text
    assert "signal.dead_groups" not in text  # an earlier version's alert is not the final one's


def test_summary_prints_names_as_written_not_as_rich_markup() -> None:
    from agent.reporting.summary import Choice, SessionSummary

    line = VersionLine(1, "merged v1.1-[bold]x[/bold]", 0.5, 10, "/r", ("[red]a",))
    summary = SessionSummary("s[x]", "finished", "budget [done]", [line], Choice(1, "because [y]"), 10, 20)
    console = Console(record=True, width=200)
    for item in summary_renderables(summary):
        console.print(item)
    text = console.export_text()
    assert "merged v1.1-[bold]x[/bold]" in text and "because [y]" in text and "budget [done]" in text
