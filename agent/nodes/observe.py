"""observe: make sure the incumbent version has a trained policy (trains v0 on the first visit).

When v0 cannot be trained (a reward that raises, a data file the trainer refuses, ...) there is nothing to
diagnose: the session is `failed`, with the reason naming the run's outcome, message and log, in the
state and in the store, and the graph ends; `evotrainer run` exits non-zero.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from agent.adapters import ledger
from agent.context import Context
from agent.decisions.rollback import own_start
from agent.launch.session_guard import trusted_session
from agent.nodes.common import pilot_from_result, run_training, session_main_commit
from agent.state import State, VersionInfo
from trainer_backend.base import LOG_FILE


def observe(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Train v0 when the session has no incumbent yet; later iterations already hold a trained version."""
    trusted = trusted_session(runtime.context, state)  # the caller's own session; paths and revisions checked
    if state.get("version"):
        return {}
    ctx = runtime.context
    session_id, harness_dir = trusted.session_id, str(trusted.repo)
    run_id = f"{session_id}-v0"
    branch, commit = session_main_commit(Path(harness_dir), session_id)
    result = run_training(
        ctx, session_id, run_id, Path(harness_dir), ctx.base_steps, init_checkpoint=None, kind="full", seed=ctx.seed
    )
    pilot = pilot_from_result(result, iteration=0, candidate_id="v0", steps=ctx.base_steps)
    if pilot["outcome"] != "ok":
        return _failed(ctx, session_id, pilot["outcome"], pilot["message"], Path(pilot["run_dir"]))
    with ledger.db(ledger.store_url(ctx)) as db:
        row = ledger.ensure_version(
            db,
            session_id=session_id,
            run_id=run_id,
            branch=branch,
            commit_sha=commit,
            rationale="v0: the starting harness",
        )
        row.strict_score, row.train_score = pilot["strict_acc"], pilot["train_reward"]
    version = VersionInfo(
        index=0,
        branch=branch,
        commit=commit,
        run_id=run_id,
        run_dir=pilot["run_dir"],
        checkpoint=pilot["checkpoint"],
        strict_acc=pilot["strict_acc"],
        train_reward=pilot["train_reward"],
        steps=ctx.base_steps,
        start_checkpoint=own_start(pilot["run_dir"]),
        start_steps=0,
    )
    return {
        "version": version,
        "iteration": 1,
        "steps_used": ctx.base_steps,
        "failures_in_row": 0,
        "started_at": state.get("started_at") or time.time(),
        "v0_strict": pilot["strict_acc"],
    }


def _failed(ctx: Context, session_id: str, outcome: str, message: str, run_dir: Path) -> dict[str, Any]:
    """Record the session as failed because v0 did not train, with a reason a user can act on."""
    from store.repository import set_session_status

    fix = "fix the harness and start a new session" if outcome == "candidate_error" else "see the log"
    reason = f"v0 training failed ({outcome}): {message or 'no message'}; log: {run_dir / LOG_FILE}; {fix}"
    with ledger.db(ledger.store_url(ctx)) as db:
        set_session_status(db, session_id, "failed", reason=reason)
    return {"status": "failed", "stop_reason": reason}
