"""Preflight: validate what a session will launch before any of it trains.

Every backend-specific part is the session backend's plug-in (`trainer_backend.plugin_of`):

- `check_backend` — at session start: the harness ships settings for the chosen backend, the backend can run
  here (`missing`: verl installed), and every data file the runs will read holds valid rows (`check_data`).
- `plan_session` — `evotrainer run --dry-run`: the command of every run the first iteration would launch,
  validated by its backend (`plan_runs`; verl: composed and validated against verl's own packaged Hydra
  config, all runs in one child process; local: the trainer settings loaded and checked), with warnings;
  nothing trains.
- `candidate_refusal` — the backtest's backend step: a candidate whose pilot config the backend would reject
  (`check_candidate`), or that changes only files the backend does not read, is a `candidate_error` before
  any accelerator time.

What the dry run assumes: which candidates a session trains depends on v0's health report (the skills whose
triggers hold on it), and there is no report before v0 has trained. So it plans v0 and the control from the
harness as it is, and as candidates every intervention of the seeded skill library that could be proposed
for the harness's domain, each applied to a copy of the harness as it is; the session trains at most
`max_candidates` of them. A skill whose patch needs v0's evidence (a data mix re-weighted from per-source
scores) is listed as not plannable, and on verl a candidate that changes only files verl does not read as
refused (its backtest refuses it). Pilots continue v0's checkpoint as it will be named after v0's run (it
does not exist yet: a verl GPU-layout check against its shards happens at the backtest). Replicates are
planned for the control and every candidate, since any of them may be the one that merges.
"""

from __future__ import annotations

import filecmp
import logging
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.context import Context
from harness.atomic import write_atomic
from harness.files import copy_folder
from harness.manifest import BackendName, Harness, HarnessError, load_harness
from trainer_backend import plugin_of
from trainer_backend.base import RunSpec

if TYPE_CHECKING:  # imported where used: `run` checks its input before the graph's modules load
    from agent.adapters.pilots import PilotPlan
    from diagnostics.backtest import BacktestResult

log = logging.getLogger(__name__)
SESSION = "dryrun"  # the session id of planned runs (their folders live under .evotrainer/dry-run/)


def default_backend(harness_dir: Path) -> str:
    """The backend the harness's manifest names (`trainer.backend`); ValueError naming the file otherwise."""
    try:
        return load_harness(harness_dir).manifest.trainer.backend
    except HarnessError as exc:
        raise ValueError(str(exc)) from None


def check_backend(backend: str, harness_dir: Path) -> None:
    """Raise ValueError naming the fix when the harness cannot train on `backend` (its data included)."""
    try:
        harness = load_harness(harness_dir)
    except HarnessError as exc:
        raise ValueError(str(exc)) from None
    if harness.manifest.trainer.settings(backend) is None:  # type: ignore[arg-type]
        raise ValueError(
            f"{harness.root}/evotrainer.yaml: trainer names no {backend} settings; add trainer.{backend}: <file> "
            f"(e.g. trainer: {{backend: {harness.manifest.trainer.backend}, {backend}: harness/{backend}.yaml}}, "
            "docs/verl.md) or choose another --backend"
        )
    missing = plugin_of(backend).missing()
    if missing is not None:
        raise ValueError(missing)
    check_data(backend, harness)
    check_code_knobs(harness)


def check_code_knobs(harness: Harness) -> None:
    """Raise ValueError naming the file, the entry and the fix when the reward, group-filter or environment code
    declares a knob malformed (`harness/code_knobs.py`): read, never imported."""
    from harness.code_knobs import CodeKnobError, knob_files, read_code_knobs

    for role, path in knob_files(harness):
        if not harness.path(path).is_file():
            continue  # a missing entry file is the manifest check's to report
        try:
            read_code_knobs(harness.path(path).read_text(encoding="utf-8", errors="replace"), path, role)
        except CodeKnobError as exc:
            raise ValueError(f"{harness.root}/{exc}") from None


def check_data(backend: str, harness: Harness) -> None:
    """Stream every row of every data file `backend`'s runs read, by the trainers' own row rules.

    The training and held-out rows, then what the backend's settings add (`BackendPlugin.check_data`: on the
    local backend the warm-start rows and the data selection, whose weights must draw some training row).
    Reads only, so a bad row stops the session before anything exists, naming the file, the line and the field.

    Raises:
        ValueError: a `harness.rows.RowError` (file, line and field named), or unreadable trainer settings.
    """
    from harness.rows import iter_rows, with_defaults

    plugin = plugin_of(backend)
    m = harness.manifest
    train = harness.path(m.data.train)
    counts: dict[str, int] = {}
    for number, row in iter_rows(train, plugin.row_kind):
        value = with_defaults(row, train, number).get(m.data.select_by)
        if value is not None:
            counts[str(value)] = counts.get(str(value), 0) + 1
    for heldout in m.data.heldout:
        for _ in iter_rows(harness.path(heldout), plugin.row_kind):
            pass
    plugin.check_data(harness, counts)


@dataclass
class PlannedRun:
    """One run of the plan: its spec, how it is validated, and what the plan says about it."""

    label: str
    spec: RunSpec
    candidate: bool  # candidate code: its reward is parsed, never imported, outside a sandbox
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)


def plan_session(ctx: Context, harness_dir: Path, out: Path | None = None) -> tuple[str, bool]:
    """Plan and validate every run of iteration 1 (see the module docstring); return (report, all valid).

    `out` holds the planned runs' folders (verl's parquet data); default `.evotrainer/dry-run/<time>`.
    """
    harness = load_harness(harness_dir)
    check_backend(ctx.backend, harness.root)
    scratch = (out or ctx.root / "dry-run" / time.strftime("%Y%m%d-%H%M%S")).resolve()
    v0 = PlannedRun(
        "v0 (the starting harness)", _spec(ctx, scratch, f"{SESSION}-v0", harness.root, ctx.base_steps), False
    )
    payload: dict[str, Any] = {
        "session_id": SESSION,
        "harness_dir": str(harness.root),
        "iteration": 1,
        "version": {"checkpoint": str(plugin_of(ctx.backend).future_checkpoint(v0.spec)), "steps": ctx.base_steps},
        "rollback": {},
    }
    from agent.adapters.pilots import plan_pilot
    from store.repository import candidate_id

    pilots: list[tuple[str, dict[str, Any] | None]] = [("control (the incumbent harness, continued)", None)]
    skipped: list[str] = []
    candidates = _candidate_harnesses(harness, scratch / "candidates", ctx.backend)
    for k, (name, folder, why) in enumerate(candidates, start=1):
        if folder is None:
            skipped.append(f"{name}: {why}")
            continue
        unread = _unread_changes(ctx.backend, harness, folder)
        if unread:  # refused at its backtest (candidate_refusal): no pilot would launch
            skipped.append(f"{name}: refused at its backtest, it {unread[0]}")
            continue
        made = {"id": candidate_id(SESSION, 1, k, name), "worktree": str(folder)}
        pilots.append((f"candidate {name}" + (f" ({why})" if why else ""), made))
    runs = [v0]
    for label, cand in pilots:
        runs.append(_pilot_run(ctx, scratch, label, plan_pilot(ctx, {**payload, "candidate": cand}), cand))
    for r in range(1, ctx.replicates + 1):
        for label, cand in pilots:
            plan = plan_pilot(ctx, {**payload, "candidate": cand, "replicate": r})
            runs.append(_pilot_run(ctx, scratch, f"replicate {r} of {label.split(' (')[0]} (if it merges)", plan, cand))
    planned = plugin_of(ctx.backend).plan_runs([(r.spec, not r.candidate) for r in runs], harness, scratch)
    for run, checked in zip(runs, planned, strict=True):
        run.text, run.notes, run.problems = checked.text, run.notes + checked.notes, run.problems + checked.problems
    return _report(ctx, harness, scratch, runs, skipped), not any(r.problems for r in runs if not r.candidate)


def candidate_refusal(ctx: Context, payload: dict[str, Any], out_dir: Path) -> BacktestResult | None:
    """The backtest's backend step: a failed result when the session's backend rejects
    `payload["candidate"]`'s pilot config (`BackendPlugin.check_candidate`), or when the candidate changes only
    files the backend's runs do not read (its pilot would train exactly like the control).

    Either is a `candidate_error` (the backtest fails: no pilot, no accelerator time). The result becomes
    the backtest's `report.json`, so a re-run node reads it instead of checking again. None when the backend
    accepts the config or checks none, when the backtest already has a report, or when the check itself crashed
    (ours: logged, and the sandboxed backtest runs as usual; the pilot's launch validates its config again).
    """
    import orjson

    from diagnostics.backtest import failed_backtest
    from harness.failures import Outcome
    from sandboxes.backtest import REPORT_FILE

    plugin = plugin_of(ctx.backend)
    if plugin.check_candidate is None or (out_dir / REPORT_FILE).is_file():
        return None
    name = payload["candidate"]["id"]
    try:
        base = load_harness(Path(payload["harness_dir"]))
        problems = _unread_changes(ctx.backend, base, Path(payload["candidate"]["worktree"]))
        problems += candidate_problems(ctx, payload, out_dir / f"{ctx.backend}_check")
    except (RuntimeError, OSError, subprocess.TimeoutExpired, HarnessError) as exc:
        log.warning("%s config check of %s did not run: %s", ctx.backend, name, exc)
        return None
    if not problems:
        return None
    why = f"not trainable on {ctx.backend}: " + "; ".join(problems)
    result = failed_backtest(name, Outcome.CANDIDATE_ERROR, why)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(out_dir / REPORT_FILE, orjson.dumps(result.to_json(), option=orjson.OPT_INDENT_2))
    return result


def candidate_problems(ctx: Context, payload: dict[str, Any], out_dir: Path) -> list[str]:
    """The session backend's check of `payload["candidate"]`'s pilot config (as `train` would launch it).

    What the check writes (verl: the pilot's parquet data and validation files) goes to `out_dir` (the
    backtest's folder), never to the run folder. Returns the problems (empty: accepted, or the backend checks
    none); the candidate's reward is parsed, not imported.

    Raises:
        RuntimeError: the validation itself crashed (an infra error, not the candidate's).
    """
    from agent.adapters.pilots import plan_pilot

    check = plugin_of(ctx.backend).check_candidate
    if check is None:
        return []
    plan = plan_pilot(ctx, payload)
    return check(_spec(ctx, out_dir, plan.run_id, plan.harness_dir, ctx.pilot_steps, plan, root=out_dir), out_dir)


def _spec(
    ctx: Context,
    scratch: Path,
    run_id: str,
    harness_dir: Path,
    steps: int,
    plan: PilotPlan | None = None,
    root: Path | None = None,
) -> RunSpec:
    return RunSpec(
        run_id=run_id,
        harness_dir=harness_dir,
        out_dir=root or scratch / "runs" / run_id,
        steps=steps,
        seed=plan.seed if plan else ctx.seed,
        kind="pilot" if plan else "full",
        init_checkpoint=Path(plan.init_checkpoint) if plan and plan.init_checkpoint else None,
        init_state=plan.init_state if plan else "weights",
        sandbox=ctx.sandbox,
        ray_address=ctx.ray_address or None,
    )


def _pilot_run(ctx: Context, scratch: Path, label: str, plan: PilotPlan, cand: dict[str, Any] | None) -> PlannedRun:
    return PlannedRun(
        label, _spec(ctx, scratch, plan.run_id, plan.harness_dir, ctx.pilot_steps, plan), cand is not None
    )


def _candidate_harnesses(harness: Harness, folder: Path, backend: BackendName) -> list[tuple[str, Path | None, str]]:
    """(skill name, patched copy of the harness or None, note) for every seeded intervention of its domain, each
    applied as a session on `backend` applies it (`@trainer_config` is that backend's settings file)."""
    from sandboxes.git_worktree import GitWorktreeError
    from skills.models import SkillRecord
    from skills.patches import SkillPatchError, apply_skill
    from skills.retrieval import tier_of
    from skills.seeds import SEED_SKILLS

    order = {"own": 0, "applicable": 1, "fallback": 2}
    specs = [
        s for s in SEED_SKILLS if not s.is_guard and tier_of(SkillRecord(spec=s), harness.manifest.domain) != "fallback"
    ]
    specs.sort(key=lambda s: (order[tier_of(SkillRecord(spec=s), harness.manifest.domain)], s.name))
    out: list[tuple[str, Path | None, str]] = []
    for spec in specs:
        copy = folder / spec.name
        shutil.rmtree(copy, ignore_errors=True)
        copy_folder(harness.root, copy, (".git", "__pycache__", ".evotrainer"))
        try:
            apply_skill(spec, copy, harness, metrics={}, backend=backend)
        except (SkillPatchError, GitWorktreeError, ValueError) as exc:
            out.append((spec.name, None, f"not plannable before v0's health report ({exc})"))
            continue
        out.append((spec.name, copy, f"{spec.factor}; trigger {spec.trigger}"))
    return out


def _changed_files(base: Path, other: Path) -> list[str]:
    found: list[str] = []

    def walk(cmp: filecmp.dircmp[str], prefix: str) -> None:
        found.extend(prefix + n for n in cmp.diff_files + cmp.left_only + cmp.right_only)
        for name, sub in cmp.subdirs.items():
            walk(sub, f"{prefix}{name}/")

    walk(filecmp.dircmp(base, other, ignore=["__pycache__", ".git", ".evotrainer", ".verl"]), "")
    return sorted(found)


def _unread_changes(backend: str, harness: Harness, candidate_dir: Path) -> list[str]:
    """A warning when a candidate changes only files `backend` does not read: its pilot trains like the control."""
    changed = _changed_files(harness.root, candidate_dir)
    reads = plugin_of(backend).reads
    if not changed or any(reads(harness, p) for p in changed):
        return []
    return [
        f"changes only {', '.join(changed)}, which {backend} does not read: its pilot would train exactly like "
        "the control"
    ]


def _report(ctx: Context, harness: Harness, scratch: Path, runs: list[PlannedRun], skipped: list[str]) -> str:
    where = f"as Ray jobs on {ctx.ray_address} (submitted together)" if ctx.ray_address else "on this machine"
    lines = [
        f"# dry run: iteration 1 of a session on {harness.root} with the {ctx.backend} backend, {where}",
        f"# planned run folders: {scratch}",
        "# assumption: v0's health report decides which candidates train (at most "
        f"{ctx.max_candidates}); every candidate the seeded skills could propose is planned and validated",
    ]
    if ctx.ray_address:
        lines.append(_cluster_note(ctx.ray_address))
    for run in runs:
        verdict = "INVALID" if run.problems else "validated"
        lines += ["", f"## {run.label}: {run.spec.run_id} ({run.spec.steps} steps, seed {run.spec.seed}) — {verdict}"]
        lines += [f"# harness: {run.spec.harness_dir}"]
        lines += run.text
        lines += [f"# warning: {n}" for n in run.notes]
        where_err = "a candidate_error at its backtest" if run.candidate else "the session cannot start"
        lines += [f"# problem ({where_err}): {p}" for p in run.problems]
    if skipped:
        lines += ["", "## candidates that would launch no pilot"] + [f"# - {s}" for s in skipped]
    bad = [r for r in runs if r.problems]
    lines += ["", f"# {len(runs) - len(bad)} of {len(runs)} run(s) validated; nothing was trained"]
    return "\n".join(lines)


def _cluster_note(address: str) -> str:
    from trainer_backend.ray_jobs import RayJobsError, client

    try:
        known = len(client(address).list_jobs())
    except (RayJobsError, RuntimeError, ConnectionError) as exc:
        return f"# warning: the Ray Jobs API at {address} does not answer ({exc}); start the cluster first"
    return f"# Ray Jobs API at {address} answers ({known} job(s) known)"
