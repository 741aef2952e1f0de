"""Shared node plumbing: run a training job idempotently and record it; read the session's git state; read a
run's rollouts once per process (`run_table`) and its health report once per run (`cached_report`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from agent.adapters import ledger
from agent.adapters.runs import ensure_run, final_checkpoint
from agent.context import Context
from agent.state import PilotInfo, State
from diagnostics.findings import HealthReport
from diagnostics.schema import HEALTH_REPORT_FILE
from harness.answers import AnswerProtocol
from trainer_backend.base import RunResult, RunSpec

if TYPE_CHECKING:
    from diagnostics.table import RunTable, RunTableCache
    from diagnostics.tool_roles import ToolRoles

REPORT_FILE = HEALTH_REPORT_FILE  # a run's health report, written once next to its artefacts


def run_training(
    ctx: Context,
    session_id: str,
    run_id: str,
    harness_dir: Path,
    steps: int,
    *,
    init_checkpoint: str | None,
    kind: Literal["pilot", "full"],
    seed: int,
    candidate_id: str | None = None,
    init_state: Literal["weights", "optimizer", "exact"] = "weights",
) -> RunResult:
    """Train once (idempotent across crashes) on the session's backend (on its Ray cluster when it names one) and
    record the run and its outcome in the store."""
    out_dir = ctx.session_dir(session_id) / "runs" / run_id
    spec = RunSpec(
        run_id=run_id,
        harness_dir=harness_dir,
        out_dir=out_dir,
        steps=steps,
        seed=seed,
        kind=kind,
        init_checkpoint=Path(init_checkpoint) if init_checkpoint else None,
        init_state=init_state,
        sandbox=ctx.sandbox,
        ray_address=ctx.ray_address or None,
    )
    with ledger.db(ledger.store_url(ctx)) as db:
        ledger.ensure_run(
            db,
            run_id=run_id,
            session_id=session_id,
            backend=ctx.backend,
            kind=kind,
            steps=steps,
            artefact_dir=str(out_dir),
            seed=seed,
            candidate_id=candidate_id,
        )
    result = ensure_run(spec, ctx.backend)
    with ledger.db(ledger.store_url(ctx)) as db:
        ledger.finish_run(
            db,
            run_id,
            outcome=result.outcome.value,
            strict_acc=_num(result, "strict_acc_after"),
            train_reward=_num(result, "train_reward_last"),
            wall_time_s=_num(result, "wall_time_s"),
            message=result.message,
        )
    return result


def _num(result: RunResult, key: str) -> float | None:
    value = result.summary.get(key)
    return None if value is None else float(value)


def pilot_from_result(result: RunResult, *, iteration: int, candidate_id: str, steps: int) -> PilotInfo:
    """The state's view of a finished run (its checkpoint is whatever its backend saved last)."""
    checkpoint = final_checkpoint(result.out_dir)
    return PilotInfo(
        iteration=iteration,
        candidate_id=candidate_id,
        run_id=result.run_id,
        run_dir=str(result.out_dir),
        outcome=result.outcome.value,
        strict_acc=_num(result, "strict_acc_after") or 0.0,
        train_reward=_num(result, "train_reward_last") or 0.0,
        checkpoint=str(checkpoint) if checkpoint is not None else "",
        steps=int(result.steps_done),
        message=result.message,
    )


def session_answer(state: State) -> AnswerProtocol | None:
    """The answer protocol the session's harness declares (None when its manifest declares none)."""
    from harness.manifest import load_harness

    return load_harness(Path(state["harness_dir"])).manifest.answer


def session_roles(state: State) -> ToolRoles:
    """The tool roles of the session harness's declared tools (its env is protected, so every candidate shares
    them); classification by tool name when the harness declares no env."""
    from diagnostics.tool_roles import DEFAULT_ROLES
    from diagnostics.tool_roles import ToolRoles as Roles
    from harness.manifest import load_harness

    env = load_harness(Path(state["harness_dir"])).manifest.env
    return DEFAULT_ROLES if env is None else Roles.from_env(env)


def session_main_commit(repo_dir: Path, session_id: str) -> tuple[str, str]:
    """The session's main-line branch and its head commit."""
    from sandboxes.git_revisions import session_branch_commit
    from sandboxes.git_worktree import session_main_branch

    branch = session_main_branch(session_id)
    return branch, session_branch_commit(repo_dir, session_id, branch, "the session's main line")


_TABLES: list[RunTableCache] = []  # the process's one table cache, made on first use (polars loads lazily)


def run_table(run_dir: Path, answer: AnswerProtocol | None) -> RunTable:
    """A run's rollouts as one columnar table, read once per process while its files are unchanged.

    The session's diagnose, evaluate, confirm and rollback steps all read the same validation rollouts;
    they share this table instead of reading the files again.
    """
    if not _TABLES:
        from diagnostics.table import RunTableCache

        _TABLES.append(RunTableCache())
    return _TABLES[0].get(run_dir, answer)


def cached_report(
    run_dir: Path, parent: HealthReport | None, answer: AnswerProtocol | None, roles: ToolRoles | None = None
) -> HealthReport:
    """A run's health report: read `health_report.json` when a (re-run) node wrote it, else build and write it.

    The file is written atomically; one that is empty or not a whole report (a full disk, a crash of an older
    writer) is rebuilt from the run's artefacts, never trusted.

    `answer` is the session harness's declared answer protocol (its manifest is protected, so every
    candidate shares it): the report's format and answer metrics read it. `roles` (`session_roles`) classify
    an agentic harness's declared tools for the agentic metrics (by tool name when None).
    """
    import orjson

    from diagnostics.report import report_from_table
    from diagnostics.tool_roles import DEFAULT_ROLES
    from harness.atomic import read_json, write_atomic

    path = run_dir / REPORT_FILE
    cached = read_json(path)
    if isinstance(cached, dict):
        try:
            return HealthReport.from_json(cached)
        except (KeyError, TypeError, ValueError, AttributeError):
            pass  # not a whole report: rebuilt below
    report = report_from_table(run_dir, run_table(run_dir, answer), parent=parent, roles=roles or DEFAULT_ROLES)
    write_atomic(path, orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    return report
