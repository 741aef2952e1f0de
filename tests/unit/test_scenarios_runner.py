"""The scenario runner reads budgets, invalid promotions and paired CIs from a session honestly."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from diagnostics.schema import Rollout, write_rollouts
from store import repository
from store.engine import make_engine, session_scope, upgrade

ROOT = Path(__file__).resolve().parents[2]


def _runner():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("run_scenarios_under_test", ROOT / "benchmarks" / "run_scenarios.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _val(run_dir: Path, correct: int, n: int = 10) -> None:
    rows = [
        Rollout("r", 5, "val", f"p{i}", f"p{i}", 0, "1+1=>", "x", "2", 0.0, strict_score=float(i < correct))
        for i in range(n)
    ]
    write_rollouts(run_dir / "rollouts" / "val" / "step_5.jsonl", rows)


def test_overlapping_run_intervals_are_counted_once() -> None:
    rs = _runner()
    assert rs._union_length([(0, 10), (5, 12), (20, 25), (21, 22)]) == pytest.approx(17)


def test_invalid_promotions_count_strict_drops_and_hack_alerts(tmp_path: Path) -> None:
    rs = _runner()
    url = f"sqlite:///{tmp_path / 'evo.db'}"
    upgrade(url)
    engine = make_engine(url)
    strict = {"v0": 0.5, "i1": 0.1, "i2": 0.6, "i3": 0.7}  # i1 drops significantly; i2 trips a hack alert
    with session_scope(engine) as db:
        repository.create_session(
            db, session_id="s", harness_path="h", repo_path="r", max_iterations=3, max_train_steps=99, main_branch="m"
        )
        parent, prev_dir = None, tmp_path
        for i, (name, score) in enumerate(strict.items()):
            run_id = f"s-{name}-control" if name != "v0" else "s-v0"
            run_dir = tmp_path / run_id
            _val(run_dir, int(score * 10))
            init = None if name == "v0" else str(prev_dir / "checkpoints" / "last.pt")
            spec = {"steps": 10 if name == "v0" else 5, "init_checkpoint": init}
            (run_dir / "spec.json").write_text(json.dumps(spec))
            prev_dir = run_dir
            repository.add_run(
                db,
                run_id=run_id,
                session_id="s",
                backend="local",
                kind="full" if name == "v0" else "pilot",
                steps=10 if name == "v0" else 5,
                artefact_dir=str(run_dir),
            )
            repository.finish_run(db, run_id, outcome="ok", strict_acc=score, train_reward=0.9, wall_time_s=2.0)
            v = repository.add_version(
                db, session_id="s", branch="m", commit_sha=f"c{i}", parent_id=parent, run_id=run_id
            )
            if name != "v0":
                decision = "keep" if name == "i3" else "merge"
                repository.record_decision(
                    db, v.id, decision=decision, outcome="improvement", rationale="r", strict_score=score
                )
            else:
                v.strict_score = score
            parent = v.id
        hack = {"findings": [{"alert_id": "score.reward_hacking", "severity": "warning"}]}
        (tmp_path / "s-i2-control" / "health_report.json").write_text(json.dumps(hack))
    row = rs.Row("x", "evotrainer", 0, True, "")
    with session_scope(engine) as db:
        rs._read_session(db, row, 100.0)
    engine.dispose()
    assert (row.merges, row.invalid_promotions, row.below_parent_ns) == (2, 1 + 1, 0)
    assert row.lineage_steps == 10 + 3 * 5 and row.total_train_steps == 25
    assert row.final_run_dir == str(tmp_path / "s-i3-control")

    static = rs.Row("x", "static", 0, True, "", final_run_dir=str(tmp_path / "s-v0"))
    rs.add_strict([static, row])
    assert static.strict == pytest.approx(0.5) and row.strict == pytest.approx(0.7)
    assert row.delta_vs_static == pytest.approx(0.2) and row.ci_low <= 0.2 <= row.ci_high
    assert "| x | evotrainer | 0 | 0.700 | +0.200 [" in rs.markdown(
        [static, row],
        {
            "budget": 25, "base_steps": 10, "pilot_steps": 5, "iterations": 3, "candidates": 1, "seeds": [0],
            "sandbox": "process", "command": "c", "machine": "m", "date": "d",
        },
    )  # fmt: skip


def test_policy_lineage_follows_init_checkpoints_and_a_rollback_to_start_adds_nothing(tmp_path: Path) -> None:
    rs = _runner()

    def run(name: str, steps: int, init: Path | None) -> Path:
        (tmp_path / name).mkdir()
        spec = {"steps": steps, "init_checkpoint": None if init is None else str(init)}
        (tmp_path / name / "spec.json").write_text(json.dumps(spec))
        return tmp_path / name

    v0 = run("v0", 40, None)
    control = run("i1-control", 40, v0 / "checkpoints" / "last.pt")
    restarted = run("i1-k1", 40, v0 / "checkpoints" / "start.pt")  # a rollback: v0's 40 steps are not behind it
    later = run("i2-control", 40, restarted / "checkpoints" / "last.pt")
    assert [rs.policy_lineage_steps(r) for r in (v0, control, restarted, later)] == [40, 80, 40, 80]


def test_a_merge_below_its_parent_within_noise_is_counted_apart(tmp_path: Path) -> None:
    from types import SimpleNamespace

    rs = _runner()
    runs = {}
    for name, correct in {"parent": 6, "small_drop": 5, "big_drop": 0}.items():
        _val(tmp_path / name, correct, n=20)
        runs[name] = SimpleNamespace(artefact_dir=str(tmp_path / name))
    assert not rs._significantly_below(runs["small_drop"], runs["parent"])  # one prompt of 20
    assert rs._significantly_below(runs["big_drop"], runs["parent"])
    assert rs._significantly_below(None, runs["parent"])  # a drop that cannot be tested counts as real
    row = rs.Row("x", "evotrainer", 0, True, "", invalid_promotions=0, below_parent_ns=1)
    assert rs._invalid(row) == "0 (1 n.s.)" and rs._invalid(rs.Row("x", "static", 0, True, "")) == "—"


def test_the_table_shows_the_sealed_score_of_the_version_used(tmp_path: Path) -> None:
    runner = _runner()
    rows = []
    for mode, correct in (("static", 4), ("oracle", 8)):
        run_dir = tmp_path / mode
        _val(run_dir, correct)
        sealed = [
            Rollout("r", 5, "val", f"s{i}", f"s{i}", 0, "1+1=>", "x", "2", 0.0, strict_score=float(i < correct - 1))
            for i in range(10)
        ]
        write_rollouts(run_dir / "rollouts" / "sealed" / "step_5.jsonl", sealed)
        rows.append(runner.Row("demo", mode, 0, True, "", final_run_dir=str(run_dir), sealed_run_dir=str(run_dir)))
    runner.add_strict(rows)
    assert [r.strict for r in rows] == [0.4, 0.8] and [r.sealed for r in rows] == [0.3, 0.7]
    meta = {"base_steps": 1, "iterations": 1, "pilot_steps": 1, "budget": 2, "seeds": [0], "candidates": 1,
            "sandbox": "process", "command": "x", "machine": "m", "date": "d"}  # fmt: skip
    table = runner.markdown(rows, meta)
    assert "| demo | oracle | 0 | 0.800 |" in table and "| 0.700 [" in table
