"""Defect-scenario benchmark: static vs score-only vs evotrainer vs oracle on equal budgets.

For each scenario of `benchmarks/scenarios/` (see its README; each is built on demand by
`scenario_cache.scenario_dir`) and each seed:

- static:     the defective harness trained once for the whole budget (`evotrainer train`);
- score-only: `evotrainer run --mode score-only` on the defective harness (keep/revert on training reward);
- evotrainer: `evotrainer run` on the defective harness (heuristic policy, no LLM);
- oracle:     the fixed harness trained once for the whole budget (`evotrainer train`).

Equal budget: the FINAL POLICY'S LINEAGE STEPS, B = base_steps + iterations * pilot_steps. Static and oracle
train B steps in one run. A session's final version has been trained base_steps (v0) plus pilot_steps per
iteration (the merged candidate's pilot, or the control run when nothing was merged), so at most B (fewer
when the session stops early; the table reports the actual number). The sessions also spend compute on
losing pilots and control runs: that total is reported separately (`train steps, all runs`).

Measured per row: strict held-out accuracy of the final policy (mean of per-prompt strict scores at its last
validation step) and, against static on the same seed, a paired bootstrap 95% CI over prompts
(`diagnostics.stats.paired_bootstrap`, B = 10,000, seed 42); invalid promotions (a merged version whose
strict score is significantly below its parent's: the paired bootstrap 95% CI over the prompts both were
validated on lies below 0, or they cannot be compared; or whose run trips a hack alert; a merged version
below its parent within noise is counted apart, shown as "0 (1 n.s.)"); iterations; wall time; controller
overhead = share of wall time covered by neither a training run ([finished_at - wall_time_s, finished_at]
of every run, overlaps merged) nor a backtest phase; backtest vs pilot cost per session, as phase wall
times from store timestamps (backtest phase: last candidate row -> last backtest row of an iteration; pilot
phase: first pilot row -> last pilot finish) — backtests record no duration of their own, so this is an
approximation that includes scheduling.

Usage (a smoke run takes minutes once the warm-start cache is filled):

    python benchmarks/run_scenarios.py --scenarios hackable-reward --modes static,evotrainer \\
        --iterations 1 --base-steps 10 --pilot-steps 10 --candidates 2 --out bench-out
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import select

from agent.decisions.evidence import final_strict_scores, paired
from agent.decisions.rollback import START_CHECKPOINT_FILE
from agent.reporting.summary import sealed_score, session_summary
from diagnostics.findings import HACK_ALERT_IDS
from diagnostics.schema import HEALTH_REPORT_FILE, SPEC_FILE, SUMMARY_FILE
from diagnostics.stats import paired_bootstrap
from diagnostics.table import read_run_table
from store import models
from store.engine import make_engine, session_scope

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "scenarios"))  # scenario_cache and its generators: no package
import make_model_scenarios  # noqa: E402
from scenario_cache import scenario_dir, scenario_names  # noqa: E402

# Scenarios of a real pretrained model (SmolLM2): left out unless named, since they need the model from the
# models cache and, at the scenarios' budget, a GPU.
MODEL_SCENARIOS = frozenset(r.scenario.name for r in make_model_scenarios.recipes())

MODES = ("static", "score-only", "evotrainer", "oracle")
HEALTH_REPORT = HEALTH_REPORT_FILE


@dataclass
class Row:
    """One (scenario, mode, seed) result; None where a number does not apply or could not be measured."""

    scenario: str
    mode: str
    seed: int
    ok: bool
    message: str
    strict: float | None = None
    delta_vs_static: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n_prompts: int | None = None
    lineage_steps: int | None = None
    total_train_steps: int | None = None
    iterations: int | None = None
    merges: int | None = None
    invalid_promotions: int | None = None
    below_parent_ns: int | None = None  # merged versions below their parent's strict score within noise
    wall_s: float | None = None
    train_s: float | None = None
    overhead_pct: float | None = None
    backtest_phase_s: float | None = None
    pilot_phase_s: float | None = None
    session_id: str | None = None
    final_run_dir: str | None = None
    # the sealed test split (harness/splits.py) of the version a session recommends (static/oracle: their run)
    use_version: int | None = None
    sealed: float | None = None
    sealed_ci: tuple[float, float] | None = None
    sealed_run_dir: str | None = None


def _cli() -> list[str]:
    exe = Path(sys.executable).parent / "evotrainer"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "agent.cli"]


def _run(cmd: list[str], cwd: Path, log: Path, timeout_s: float) -> tuple[int, float]:
    cwd.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with open(log, "w") as fh:
        try:
            rc = subprocess.run(cmd, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout_s, check=False)
            code = rc.returncode
        except subprocess.TimeoutExpired:
            code = 124
    return code, time.time() - t0


def strict_scores(run_dir: Path) -> dict[str, float]:
    """Per-prompt strict scores of a run's last validation step."""
    return final_strict_scores(read_run_table(run_dir, splits=("val",)).val)


def run_static(harness: Path, budget: int, seed: int, work: Path, timeout_s: float, mode: str) -> Row:
    """Train one harness for the whole budget with `evotrainer train`."""
    out = work / "run"
    cmd = [*_cli(), "train", "--harness", str(harness), "--steps", str(budget), "--seed", str(seed), "--out", str(out)]
    rc, wall = _run(cmd, work, work / "cli.log", timeout_s)
    row = Row(harness.parent.name, mode, seed, rc == 0, "" if rc == 0 else f"exit {rc}; see {work / 'cli.log'}")
    row.wall_s, row.lineage_steps, row.total_train_steps, row.iterations = wall, budget, budget, 0
    summary = out / SUMMARY_FILE
    if summary.is_file():
        data = json.loads(summary.read_text())
        row.train_s = data.get("wall_time_s")
        row.ok = row.ok and data.get("outcome") == "ok"
        row.message = row.message or data.get("message", "")
    row.final_run_dir = row.sealed_run_dir = str(out)
    if row.train_s is not None and wall > 0:
        row.overhead_pct = 100.0 * max(0.0, wall - row.train_s) / wall
    return row


def run_session(harness: Path, args: argparse.Namespace, seed: int, work: Path, mode: str) -> Row:
    """Run one `evotrainer run` session on the defective harness and read its outcome from the store."""
    db_url = f"sqlite:///{work / 'evo.db'}"
    # Enough for every pilot, the control and the merge's fresh-seed replicates in each iteration.
    max_steps = args.base_steps + args.iterations * (args.candidates + 1 + 2 * args.replicates) * args.pilot_steps
    cmd = [
        *_cli(), "run", "--harness", str(harness), "--repo", str(work / "repo"), "--mode", mode,
        "--sandbox", args.sandbox, "--iterations", str(args.iterations), "--max-steps", str(max_steps),
        "--base-steps", str(args.base_steps), "--pilot-steps", str(args.pilot_steps),
        "--candidates", str(args.candidates), "--seed", str(seed), "--db", db_url,
        "--replicates", str(args.replicates), "--escalate-after", "0",
    ]  # fmt: skip
    rc, wall = _run(cmd, work, work / "cli.log", args.timeout_s)
    row = Row(harness.parent.name, mode, seed, rc == 0, "" if rc == 0 else f"exit {rc}; see {work / 'cli.log'}")
    row.wall_s = wall
    if not (work / "evo.db").is_file():
        row.ok, row.message = False, row.message or "no store written"
        return row
    engine = make_engine(db_url)
    try:
        with session_scope(engine) as db:
            _read_session(db, row, wall)
    finally:
        engine.dispose()
    if args.reports and row.session_id:
        out = work / "report.html"
        _run([*_cli(), "report", row.session_id, "--out", str(out), "--db", db_url], work, work / "report.log", 600)
    return row


def _hack_alerted(db: Any, run: models.Run) -> bool:
    """True when the run's health report (store or artefact file) holds a warning+ hack alert."""
    query = select(models.Finding).join(models.HealthReport).where(models.HealthReport.run_id == run.id)
    ids = {(f.alert_id, f.severity) for f in db.scalars(query)}
    path = Path(run.artefact_dir) / HEALTH_REPORT
    if path.is_file():
        ids |= {(f["alert_id"], f["severity"]) for f in orjson.loads(path.read_bytes()).get("findings", [])}
    return any(alert in HACK_ALERT_IDS and severity != "ok" for alert, severity in ids)


def _significantly_below(run: models.Run | None, parent: models.Run | None) -> bool:
    """True when `run`'s final strict scores are below `parent`'s with the paired 95% CI under 0, or either
    run's scores cannot be read (an untestable drop counts as real)."""
    if run is None or parent is None:
        return True
    try:
        a, b = paired(strict_scores(Path(parent.artefact_dir)), strict_scores(Path(run.artefact_dir)))
    except (OSError, ValueError):
        return True
    return not a or paired_bootstrap(a, b).ci_high < 0


def policy_lineage_steps(run_dir: Path) -> int:
    """Training steps behind a run's final policy: its own, plus those of the checkpoint chain it started from
    (`spec.json` `init_checkpoint`; a root run's `checkpoints/start.pt`, the target of a rollback, adds none)."""
    steps, seen = 0, set()
    current: Path | None = run_dir
    while current is not None and current not in seen:
        seen.add(current)
        spec = json.loads((current / SPEC_FILE).read_text())
        steps += int(spec["steps"])
        init = spec.get("init_checkpoint")
        current = Path(init).parent.parent if init and Path(init).name != Path(START_CHECKPOINT_FILE).name else None
    return steps


def _read_session(db: Any, row: Row, wall: float) -> None:
    session = db.scalars(select(models.EvoSession).order_by(models.EvoSession.created_at.desc())).first()
    if session is None:
        row.ok, row.message = False, row.message or "no session in the store"
        return
    row.session_id = session.id
    versions = list(db.scalars(select(models.Version).where(models.Version.session_id == session.id)))
    runs = {r.id: r for r in db.scalars(select(models.Run).where(models.Run.session_id == session.id))}
    by_id = {v.id: v for v in versions}
    final = max(versions, key=lambda v: v.index) if versions else None
    if final is None or final.run_id not in runs:
        row.ok, row.message = False, row.message or "session has no trained version"
        return
    row.final_run_dir = runs[final.run_id].artefact_dir
    choice = session_summary(db, session.id).choice  # the version the session tells its user to use
    use = next((v for v in versions if choice is not None and v.index == choice.use), final)
    row.use_version = use.index
    row.sealed_run_dir = runs[use.run_id].artefact_dir if use.run_id in runs else None
    row.lineage_steps = policy_lineage_steps(Path(row.final_run_dir))
    row.total_train_steps = sum(r.steps for r in runs.values() if r.status == "finished")
    candidates = list(db.scalars(select(models.Candidate).where(models.Candidate.session_id == session.id)))
    row.iterations = max((c.iteration for c in candidates), default=0)  # the store keeps no iteration counter
    merged = [v for v in versions if v.decision == "merge"]
    row.merges = len(merged)
    row.invalid_promotions, row.below_parent_ns = 0, 0
    for v in merged:
        parent = by_id.get(v.parent_id) if v.parent_id is not None else None
        below = (
            parent is not None
            and v.strict_score is not None
            and parent.strict_score is not None
            and v.strict_score < parent.strict_score
        )
        significant = below and _significantly_below(runs.get(v.run_id), runs.get(parent.run_id))  # type: ignore[union-attr]
        if significant or (v.run_id in runs and _hack_alerted(db, runs[v.run_id])):
            row.invalid_promotions += 1
        elif below:
            row.below_parent_ns += 1
    train = [
        (r.finished_at.timestamp() - r.wall_time_s, r.finished_at.timestamp())
        for r in runs.values()
        if r.finished_at is not None and r.wall_time_s is not None
    ]
    backtests = list(
        db.scalars(select(models.Backtest).where(models.Backtest.candidate_id.in_([c.id for c in candidates])))
    )
    bt_phases, pilot_s = [], 0.0
    for it in sorted({c.iteration for c in candidates}):
        mine = [c for c in candidates if c.iteration == it]
        bts = [b for b in backtests if b.candidate_id in {c.id for c in mine}]
        if bts:
            start = max(c.created_at for c in mine).timestamp()
            bt_phases.append((start, max(start, max(b.created_at for b in bts).timestamp())))
        prefixes = (f"{session.id}-v{it}.", f"{session.id}-i{it}-")  # pilot run ids now, and in older sessions
        pilots = [r for r in runs.values() if r.kind == "pilot" and r.id.startswith(prefixes)]
        done = [r.finished_at for r in pilots if r.finished_at is not None]
        if pilots and done:
            pilot_s += max(done).timestamp() - min(r.created_at for r in pilots).timestamp()
    row.train_s = sum(r.wall_time_s or 0.0 for r in runs.values())
    row.backtest_phase_s = sum(b - a for a, b in bt_phases)
    row.pilot_phase_s = pilot_s
    covered = _union_length(train + bt_phases)
    row.overhead_pct = 100.0 * max(0.0, wall - covered) / wall if wall > 0 else None


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def add_strict(rows: list[Row]) -> None:
    """Fill strict accuracy and the paired CI against static (same scenario and seed), and the sealed score of
    the recommended version (static and oracle: of their run), on the same sealed prompts for every mode."""
    for r in rows:
        sealed = sealed_score(r.sealed_run_dir) if r.sealed_run_dir else None
        if sealed is not None and sealed.mean is not None:
            r.sealed, r.sealed_ci = sealed.mean, (sealed.ci_low, sealed.ci_high)
    scores = {
        (r.scenario, r.mode, r.seed): strict_scores(Path(r.final_run_dir)) if r.final_run_dir else {} for r in rows
    }
    for r in rows:
        mine = scores[(r.scenario, r.mode, r.seed)]
        if not mine:
            r.ok, r.message = False, r.message or "no strict validation scores"
            continue
        r.strict, r.n_prompts = sum(mine.values()) / len(mine), len(mine)
        static = scores.get((r.scenario, "static", r.seed), {})
        a, b = paired(static, mine)
        if r.mode != "static" and a:
            cmp = paired_bootstrap(a, b)
            r.delta_vs_static, r.ci_low, r.ci_high = cmp.delta, cmp.ci_low, cmp.ci_high


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "—" if value is None else format(value, spec)


def _invalid(r: Row) -> str:
    extra = f" ({r.below_parent_ns} n.s.)" if r.below_parent_ns else ""
    return _fmt(r.invalid_promotions, "d") + extra


def markdown(rows: list[Row], meta: dict[str, Any]) -> str:
    """The results table plus the budget definition and the command that produced it."""
    lines = [
        f"Budget: final-policy lineage steps B = base {meta['base_steps']} + {meta['iterations']} iterations x "
        f"pilot {meta['pilot_steps']} = {meta['budget']} (static and oracle: one run of B steps). "
        f"Seeds: {meta['seeds']}. Candidates per iteration: {meta['candidates']}; fresh-seed replicates before a "
        f"merge: {meta.get('replicates', 0)}. Sandbox: {meta['sandbox']}.",
        "",
        "| scenario | mode | seed | strict (selection) | Δ vs static [95% CI] | sealed test, version used [95% CI] | "
        "lineage steps | train steps (all runs) | "
        "iterations with candidates | merges | invalid promotions | wall (s) | controller overhead | "
        "backtest / pilot phase (s) | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ci = "—" if r.delta_vs_static is None else f"{r.delta_vs_static:+.3f} [{r.ci_low:+.3f}, {r.ci_high:+.3f}]"
        used = f" (v{r.use_version})" if r.use_version is not None else ""
        sealed = (
            "—"
            if r.sealed is None or r.sealed_ci is None
            else (f"{r.sealed:.3f}{used} [{r.sealed_ci[0]:.3f}, {r.sealed_ci[1]:.3f}]")
        )
        cost = "—" if r.pilot_phase_s is None else f"{r.backtest_phase_s:.0f} / {r.pilot_phase_s:.0f}"
        note = r.message.replace("|", "/")
        lines.append(
            f"| {r.scenario} | {r.mode} | {r.seed} | {_fmt(r.strict)} | {ci} | {sealed} | "
            f"{_fmt(r.lineage_steps, 'd')} | {_fmt(r.total_train_steps, 'd')} | {_fmt(r.iterations, 'd')} | "
            f"{_fmt(r.merges, 'd')} | "
            f"{_invalid(r)} | {_fmt(r.wall_s, '.0f')} | "
            f"{_fmt(r.overhead_pct, '.1f')}{'%' if r.overhead_pct is not None else ''} | {cost} | {note} |"
        )
    lines += ["", *summary(rows)]
    lines += ["", f"Command: `{meta['command']}`", f"Machine: {meta['machine']}; date {meta['date']}."]
    return "\n".join(lines) + "\n"


def summary(rows: list[Row]) -> list[str]:
    """Per mode: mean gain over static across scenarios (bootstrap over prompts, stratified by scenario and
    seed), and evotrainer's gap to the oracle per scenario (paired bootstrap)."""
    scores = {(r.scenario, r.mode, r.seed): strict_scores(Path(r.final_run_dir)) for r in rows if r.final_run_dir}
    out = []
    for mode in ("score-only", "evotrainer", "oracle"):
        a: list[float] = []
        b: list[float] = []
        strata: list[str] = []
        for (scenario, m, seed), mine in scores.items():
            static = scores.get((scenario, "static", seed), {})
            if m != mode or not static or not mine:
                continue
            x, y = paired(static, mine)
            a, b, strata = a + x, b + y, strata + [f"{scenario}/{seed}"] * len(x)
        if a:
            cmp = paired_bootstrap(a, b, strata=strata)
            n = len(set(strata))
            out.append(
                f"- {mode} vs static, mean over {n} scenario run(s): {cmp.delta:+.3f} "
                f"[{cmp.ci_low:+.3f}, {cmp.ci_high:+.3f}] (bootstrap over prompts, stratified by scenario)"
            )
    for (scenario, m, seed), evo in scores.items():
        oracle = scores.get((scenario, "oracle", seed), {})
        if m == "evotrainer" and evo and oracle:
            cmp = paired_bootstrap(*paired(evo, oracle))
            gap = f"{cmp.delta:+.3f} [{cmp.ci_low:+.3f}, {cmp.ci_high:+.3f}]"
            out.append(f"- {scenario} (seed {seed}): oracle − evotrainer {gap}")
    return out


def render(paths: list[Path], out: Path) -> str:
    """Merge results.json files (a later file's row replaces an earlier one for the same scenario, mode and
    seed), then rewrite results.json and results.md under `out`; meta comes from the first file."""
    merged: dict[tuple[str, str, int], Row] = {}
    meta: dict[str, Any] = {}
    for path in paths:
        data = json.loads(path.read_text())
        meta = meta or data["meta"]
        for raw in data["rows"]:
            row = Row(**raw)
            if path != paths[0]:
                row.message = (row.message + "; " if row.message else "") + f"from {path.parent.name}"
            merged[(row.scenario, row.mode, row.seed)] = row
    order = {m: i for i, m in enumerate(MODES)}
    rows = sorted(merged.values(), key=lambda r: (r.scenario, r.seed, order.get(r.mode, 9)))
    add_strict(rows)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"meta": meta, "rows": [asdict(r) for r in rows]}, indent=2))
    table = markdown(rows, meta)
    (out / "results.md").write_text(table)
    return table


def main(argv: list[str] | None = None) -> int:
    """Run the selected scenarios x modes x seeds; write results.json and results.md under --out."""
    names = scenario_names()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sel = parser.add_argument_group("selection")
    default = [n for n in names if n not in MODEL_SCENARIOS]
    sel.add_argument(
        "--scenarios",
        default=",".join(default),
        help=f"comma-separated subset of {names} (default: all but {sorted(MODEL_SCENARIOS)}, which need the "
        "SmolLM2 model and a GPU)",
    )
    sel.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of {MODES}")
    sel.add_argument("--seeds", default="0", help="comma-separated training seeds (same for every mode)")
    bud = parser.add_argument_group("budget")
    bud.add_argument("--iterations", type=int, default=2, help="controller iterations")
    bud.add_argument("--base-steps", type=int, default=20, help="steps of v0")
    bud.add_argument("--pilot-steps", type=int, default=20, help="steps of each pilot")
    bud.add_argument("--candidates", type=int, default=2, help="candidates per iteration")
    bud.add_argument("--replicates", type=int, default=1, help="fresh-seed replicates before a merge")
    run = parser.add_argument_group("run")
    run.add_argument("--sandbox", default="process", help="docker | process | none (candidate code isolation)")
    run.add_argument("--timeout-s", type=float, default=3600.0, help="per-command wall-clock limit")
    run.add_argument("--reports", action="store_true", help="also write each session's HTML report")
    run.add_argument("--out", type=Path, default=Path("benchmark-results"), help="artefact and results folder")
    run.add_argument("--render", type=Path, nargs="+", help="only merge these results.json files into --out")
    args = parser.parse_args(argv)
    if args.render:
        print(render(args.render, args.out.resolve()))
        return 0

    scenarios = [s for s in args.scenarios.split(",") if s]
    modes = [m for m in args.modes.split(",") if m]
    unknown = (set(scenarios) - set(names)) | (set(modes) - set(MODES))
    if unknown:
        parser.error(f"unknown scenario or mode {sorted(unknown)}; scenarios {names}, modes {MODES}")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    budget = args.base_steps + args.iterations * args.pilot_steps
    out = args.out.resolve()
    rows: list[Row] = []
    for name in scenarios:
        for seed in seeds:
            for mode in modes:
                work = out / name / f"{mode}-s{seed}"
                print(f"[{time.strftime('%H:%M:%S')}] {name} / {mode} / seed {seed} -> {work}", flush=True)
                if mode in ("static", "oracle"):
                    harness = scenario_dir(name, "defective" if mode == "static" else "oracle")
                    row = run_static(harness, budget, seed, work, args.timeout_s, mode)
                else:
                    row = run_session(scenario_dir(name, "defective"), args, seed, work, mode)
                rows.append(row)
                print(f"    ok={row.ok} wall={_fmt(row.wall_s, '.0f')}s {row.message}", flush=True)
                _write(out, rows, args, argv, budget, seeds)  # partial results survive an interrupted run
    table = _write(out, rows, args, argv, budget, seeds)
    print(table)
    return 0 if all(r.ok for r in rows) else 1


def _write(
    out: Path, rows: list[Row], args: argparse.Namespace, argv: list[str] | None, budget: int, seeds: list[int]
) -> str:
    """Fill the strict scores and CIs, then write results.json and results.md; return the markdown."""
    add_strict(rows)
    meta = {
        "budget": budget,
        "base_steps": args.base_steps,
        "pilot_steps": args.pilot_steps,
        "iterations": args.iterations,
        "candidates": args.candidates,
        "replicates": args.replicates,
        "seeds": seeds,
        "sandbox": args.sandbox,
        "command": "python benchmarks/run_scenarios.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": f"{platform.node()} {platform.machine()}, {platform.processor() or 'cpu'}, "
        f"{_cpus()} CPUs, Python {platform.python_version()}",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"meta": meta, "rows": [asdict(r) for r in rows]}, indent=2))
    table = markdown(rows, meta)
    (out / "results.md").write_text(table)
    return table


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0


if __name__ == "__main__":
    sys.exit(main())
