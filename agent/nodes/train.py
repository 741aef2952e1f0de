"""train: one pilot run per surviving candidate, plus a control run of the incumbent (fan-out).

Candidate and control start from the incumbent's checkpoint with the same step count and carry on its
optimizer moments and random streams (`init_state="exact"`), so the decision compares like with like: the
intervention is the only difference, and the control trains exactly as the incumbent's run would have gone
on uninterrupted (a session that merges nothing ends with the static harness's policy, bit for bit). The same
node, added as `replicate`, re-trains a merge candidate and the control with the optimizer moments but fresh
random streams (`payload["replicate"]` = r > 0, `init_state="optimizer"`). After a rollback (`diagnose` found
that the incumbent's own run damaged its policy, agent/rollback.py) candidates start from the incumbent's
starting checkpoint instead; the control still continues the incumbent. A pilot that cannot even be
launched is recorded as an `infra_error` pilot (never a crash of the session).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from agent.context import Context
from agent.nodes.common import pilot_from_result, run_training
from agent.routing import CONTROL_ID
from harness.failures import Outcome
from trainer_backend.base import RunResult

log = logging.getLogger(__name__)


def train(payload: dict[str, Any], runtime: Runtime[Context]) -> dict[str, Any]:
    """Train `payload["candidate"]` (or the control when it is None) for `pilot_steps` steps."""
    ctx = runtime.context
    candidate = payload.get("candidate")
    version, iteration, session_id = payload["version"], payload["iteration"], payload["session_id"]
    replicate = int(payload.get("replicate", 0))
    cid = candidate["id"] if candidate else CONTROL_ID
    run_id = f"{session_id}-i{iteration}-{'control' if candidate is None else 'k' + cid.rsplit('-v', 1)[-1]}"
    run_id += f"-r{replicate}" if replicate else ""
    harness_dir = Path(candidate["worktree"]) if candidate else Path(payload["harness_dir"])
    rollback = payload.get("rollback") or {}
    if candidate and rollback:  # the incumbent's run damaged its policy: test the fix from before the damage
        init, start_steps = rollback["checkpoint"], int(rollback["steps"])
    else:
        init, start_steps = version["checkpoint"], version["steps"]
    try:
        result = run_training(
            ctx,
            session_id,
            run_id,
            harness_dir,
            ctx.pilot_steps,
            init_checkpoint=init or None,
            kind="pilot",
            seed=pilot_seed(ctx.seed, iteration, replicate),
            candidate_id=candidate["id"] if candidate else None,
            init_state="optimizer" if replicate else "exact",
        )
    except Exception as exc:  # the trainer classifies candidate faults itself; nothing may end the session
        log.exception("pilot %s could not run", run_id)
        out_dir = ctx.session_dir(session_id) / "runs" / run_id
        message = f"the pilot could not run ({type(exc).__name__}: {exc})"
        result = RunResult(run_id=run_id, outcome=Outcome.INFRA_ERROR, out_dir=out_dir, message=message)
    pilot = pilot_from_result(result, iteration=iteration, candidate_id=cid, steps=ctx.pilot_steps)
    pilot["replicate"] = replicate
    pilot["init_checkpoint"], pilot["start_steps"] = init, start_steps
    return {"pilots": [pilot]}


def pilot_seed(seed: int, iteration: int, replicate: int) -> int:
    """The seed of an iteration's pilots (candidates and control share it); replicates get fresh ones.

    Main pilots continue the incumbent's random streams, so their seed only drives validation sampling."""
    return seed + 1000 * iteration + 101 * replicate
