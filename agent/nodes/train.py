"""train: one pilot run per surviving candidate, plus a control run of the incumbent (fan-out).

Candidate and control start from the incumbent's checkpoint with the same step count and carry on its
optimizer moments and random streams (`init_state="exact"`), so the decision compares like with like: the
intervention is the only difference, and the control trains exactly as the incumbent's run would have gone
on uninterrupted (a session that merges nothing ends with the static harness's policy, bit for bit, on the
local backend; verl carries what its resume machinery restores, and each decision's rationale says what).
The same node, added as `replicate`, re-trains a merge candidate and the control with the optimizer moments
but fresh random streams (`payload["replicate"]` = r > 0, `init_state="optimizer"`). After a rollback
(`diagnose` found that the incumbent's own run damaged its policy, agent/rollback.py) candidates start from
the incumbent's starting checkpoint instead; the control still continues the incumbent.

With a Ray cluster (`Context.ray_address`) every branch of the fan-out submits its run as a Ray job at once
(the session raises its concurrency to the iteration's run count) and polls it; the cluster runs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from langgraph.runtime import Runtime

from agent.context import Context
from agent.nodes.common import pilot_from_result, run_training
from agent.routing import CONTROL_ID


@dataclass(frozen=True)
class PilotPlan:
    """What one `train` branch runs: also what the backtest's verl check and `run --dry-run` validate."""

    run_id: str
    candidate_id: str  # CONTROL_ID for the control
    harness_dir: Path
    init_checkpoint: str  # "" = from the backend's starting model
    start_steps: int  # lineage steps of that policy
    seed: int
    init_state: Literal["weights", "optimizer", "exact"]
    replicate: int


def plan_pilot(ctx: Context, payload: dict[str, Any]) -> PilotPlan:
    """The pilot of `payload["candidate"]` (the control when None) as the fan-out payload describes it."""
    candidate = payload.get("candidate")
    version, iteration, session_id = payload["version"], payload["iteration"], payload["session_id"]
    replicate = int(payload.get("replicate", 0))
    cid = candidate["id"] if candidate else CONTROL_ID
    run_id = f"{session_id}-i{iteration}-{'control' if candidate is None else 'k' + cid.rsplit('-v', 1)[-1]}"
    run_id += f"-r{replicate}" if replicate else ""
    rollback = payload.get("rollback") or {}
    if candidate and rollback:  # the incumbent's run damaged its policy: test the fix from before the damage
        init, start_steps = rollback["checkpoint"], int(rollback["steps"])
    else:
        init, start_steps = version["checkpoint"], version["steps"]
    return PilotPlan(
        run_id=run_id,
        candidate_id=cid,
        harness_dir=Path(candidate["worktree"]) if candidate else Path(payload["harness_dir"]),
        init_checkpoint=init or "",
        start_steps=start_steps,
        seed=pilot_seed(ctx.seed, iteration, replicate),
        init_state="optimizer" if replicate else "exact",
        replicate=replicate,
    )


def train(payload: dict[str, Any], runtime: Runtime[Context]) -> dict[str, Any]:
    """Train `payload["candidate"]` (or the control when it is None) for `pilot_steps` steps."""
    ctx = runtime.context
    plan = plan_pilot(ctx, payload)
    candidate = payload.get("candidate")
    result = run_training(
        ctx,
        payload["session_id"],
        plan.run_id,
        plan.harness_dir,
        ctx.pilot_steps,
        init_checkpoint=plan.init_checkpoint or None,
        kind="pilot",
        seed=plan.seed,
        candidate_id=candidate["id"] if candidate else None,
        init_state=plan.init_state,
    )
    pilot = pilot_from_result(
        result, iteration=payload["iteration"], candidate_id=plan.candidate_id, steps=ctx.pilot_steps
    )
    pilot["replicate"] = plan.replicate
    pilot["init_checkpoint"], pilot["start_steps"] = plan.init_checkpoint, plan.start_steps
    return {"pilots": [pilot]}


def pilot_seed(seed: int, iteration: int, replicate: int) -> int:
    """The seed of an iteration's pilots (candidates and control share it); replicates get fresh ones.

    Main pilots continue the incumbent's random streams, so their seed only drives validation sampling."""
    return seed + 1000 * iteration + 101 * replicate
