"""train: one pilot run per surviving candidate, plus a control run of the incumbent (fan-out).

Candidate and control start from the incumbent's checkpoint with the same step count and carry on its
optimizer moments and random streams (`init_state="exact"`), so the decision compares like with like: the
intervention is the only difference, and the control trains exactly as the incumbent's run would have gone
on uninterrupted (a session that merges nothing ends with the static harness's policy, bit for bit, on the
local backend; verl carries what its resume machinery restores, and each decision's rationale says what).
What each branch runs (its run id, starting checkpoint, seed and carried state) is planned by
`agent.adapters.pilots.plan_pilot`, which the dry run and the backend's candidate check share. The same node,
added as `replicate`, re-trains a merge candidate and the control with the optimizer moments
but fresh random streams (`payload["replicate"]` = r > 0, `init_state="optimizer"`). After a rollback
(`diagnose` found that the incumbent's own run damaged its policy, agent/decisions/rollback.py) candidates start from
the incumbent's starting checkpoint instead; the control still continues the incumbent.

With a Ray cluster (`Context.ray_address`) every branch of the fan-out submits its run as a Ray job at once
(the session raises its concurrency to the iteration's run count) and polls it; the cluster runs them.

A pilot that cannot even be launched is recorded as an `infra_error` pilot (never a crash of the session);
only a Ray cluster that stays unreachable stops the session, so that `resume` adopts its jobs.
"""

from __future__ import annotations

import logging
from typing import Any

from langgraph.runtime import Runtime

from agent.adapters.pilots import plan_pilot
from agent.context import Context
from agent.launch.session_guard import trusted_session
from agent.nodes.common import pilot_from_result, run_training
from harness.failures import Outcome
from trainer_backend.base import RunResult
from trainer_backend.ray_jobs import RayJobsError

log = logging.getLogger(__name__)


def train(payload: dict[str, Any], runtime: Runtime[Context]) -> dict[str, Any]:
    """Train `payload["candidate"]` (or the control when it is None) for `pilot_steps` steps."""
    trusted = trusted_session(runtime.context, payload)  # the caller's own session; paths and revisions checked
    ctx = runtime.context
    plan = plan_pilot(ctx, payload)
    candidate = payload.get("candidate")
    # the starting policy is loaded by the trainer: only a checkpoint of this session's own runs
    init = str(trusted.inside(plan.init_checkpoint, "runs", "init_checkpoint")) if plan.init_checkpoint else None
    try:
        result = run_training(
            ctx,
            trusted.session_id,
            plan.run_id,
            plan.harness_dir,
            ctx.pilot_steps,
            init_checkpoint=init,
            kind="pilot",
            seed=plan.seed,
            candidate_id=candidate["id"] if candidate else None,
            init_state=plan.init_state,
        )
    except RayJobsError:
        raise  # the cluster stayed unreachable: stop the session, `resume` adopts its jobs
    except Exception as exc:  # the trainer classifies candidate faults itself; nothing may end the session
        log.exception("pilot %s could not run", plan.run_id)
        out_dir = ctx.session_dir(payload["session_id"]) / "runs" / plan.run_id
        message = f"the pilot could not run ({type(exc).__name__}: {exc})"
        result = RunResult(run_id=plan.run_id, outcome=Outcome.INFRA_ERROR, out_dir=out_dir, message=message)
    pilot = pilot_from_result(
        result, iteration=payload["iteration"], candidate_id=plan.candidate_id, steps=ctx.pilot_steps
    )
    pilot["replicate"] = plan.replicate
    pilot["init_checkpoint"], pilot["start_steps"] = plan.init_checkpoint, plan.start_steps
    return {"pilots": [pilot]}
