"""backtest: replay one candidate's reward/filter on the incumbent's cached rollouts in the sandbox (fan-out).

A candidate's faults come back from `run_backtest` as classified results (`candidate_error`, `timeout`,
`spoof_detected`); anything else it raises is recorded as an inconclusive `infra_error` backtest, so the
session goes on and the pilot run judges the candidate. A candidate whose worktree is no
longer exactly its commit fails before any of it runs.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from agent.adapters import ledger
from agent.context import Context
from agent.launch.session_guard import trusted_session
from agent.state import BacktestInfo, CandidateInfo
from diagnostics.backtest import failed_backtest
from harness.failures import Outcome

log = logging.getLogger(__name__)


def backtest(payload: dict[str, Any], runtime: Runtime[Context]) -> dict[str, Any]:
    """Backtest `payload["candidate"]`; idempotent through the backtest's `report.json`."""
    trusted_session(runtime.context, payload)  # the caller's own session; its paths and revisions checked
    from agent.launch.preflight import candidate_refusal
    from sandboxes.backtest import run_backtest

    ctx = runtime.context
    candidate: CandidateInfo = payload["candidate"]
    version = payload["version"]
    out_dir = ctx.session_dir(payload["session_id"]) / "backtests" / candidate["id"]
    if ctx.mode == "score-only":  # the baseline reads no evidence beyond the training score
        info = BacktestInfo(
            iteration=payload["iteration"],
            candidate_id=candidate["id"],
            verdict="pass",
            outcome="ok",
            reasons=["score-only mode: no backtest"],
            report_path="",
        )
        return {"backtests": [info]}
    try:
        # a candidate whose pilot config the backend rejects is a candidate_error before any accelerator time
        refused = candidate_refusal(ctx, payload, out_dir)
        refused = refused or _not_its_commit(candidate, out_dir)
        result = refused or run_backtest(
            Path(candidate["worktree"]),
            Path(version["run_dir"]),
            out_dir,
            mode=ctx.sandbox,
            base_dir=Path(payload["harness_dir"]),
            # a probe aimed at the reward's disagreement with the evaluator must show it fall here
            must_fall=candidate.get("aims", []) if candidate.get("probe") else [],
        )
    except Exception as exc:  # candidate faults are classified inside; whatever escapes must not end the session
        log.exception("backtest of %s crashed", candidate["id"])
        why = f"backtest crashed ({type(exc).__name__}: {exc}); not held against the candidate, its pilot decides"
        result = failed_backtest(candidate["id"], Outcome.INFRA_ERROR, why)
    info = BacktestInfo(
        iteration=payload["iteration"],
        candidate_id=candidate["id"],
        verdict=result.verdict.value,
        outcome=result.outcome.value,
        reasons=list(result.reasons),
        report_path=str(out_dir / "report.json"),
    )
    _record(ctx, candidate["id"], version["run_id"], str(out_dir), result)
    return {"backtests": [info]}


def _not_its_commit(candidate: CandidateInfo, out_dir: Path) -> Any:
    """A failed backtest when the candidate's worktree is not exactly its commit; else None.

    The backtest and the pilot run the worktree: a file changed, added or hidden from git after the submit
    check would run unreviewed. Bytecode caches are derived and dropped first. A backtest that already
    wrote its report (a resumed session) is not checked again.
    """
    from sandboxes import git_worktree as gw
    from sandboxes import worktree_files as wf
    from sandboxes.backtest import read_report

    worktree = Path(candidate["worktree"])
    if read_report(out_dir) is not None or not worktree.is_dir():
        return None
    wf.drop_bytecode_caches(worktree)
    extra = gw.uncommitted_files(worktree)
    if not extra:
        return None
    shown = ", ".join(extra[:10]) + (f" and {len(extra) - 10} more" if len(extra) > 10 else "")
    why = f"the worktree is not its commit ({shown}): what runs must be what was committed and reviewed"
    return failed_backtest(candidate["id"], Outcome.CANDIDATE_ERROR, why)


def _record(ctx: Context, candidate_id: str, run_id: str, out_dir: str, result: Any) -> None:
    from store.repository import add_backtest, latest_backtest, update_candidate_status
    from store.types import CandidateStatus

    m = result.metrics
    with ledger.db(ledger.store_url(ctx)) as db:
        if latest_backtest(db, candidate_id) is not None:
            return
        add_backtest(
            db,
            candidate_id=candidate_id,
            rollouts_run_id=run_id,
            artefact_dir=out_dir,
            verdict=result.verdict.value,
            outcome=result.outcome.value,
            dead_group_ratio_before=_f(m, "dead_ratio_before"),
            dead_group_ratio_after=_f(m, "dead_ratio_after"),
            rank_violations_before=_i(m, "rank_violations_before"),
            rank_violations_after=_i(m, "rank_violations_after"),
            kept_ratio=_f(m, "kept_sample_ratio"),
            hack_max_score=_f(m, "hack_max_score"),
            reasons=list(result.reasons),
        )
        status: CandidateStatus = (
            "backtested" if result.verdict.value in ("pass", "inconclusive") else "backtest_failed"
        )
        update_candidate_status(db, candidate_id, status)


def _f(metrics: Any, name: str) -> float | None:
    value = None if metrics is None else getattr(metrics, name)
    return None if value is None or (isinstance(value, float) and not math.isfinite(value)) else float(value)


def _i(metrics: Any, name: str) -> int | None:
    value = None if metrics is None else getattr(metrics, name)
    return None if value is None else int(value)
