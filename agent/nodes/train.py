"""train: one pilot run per surviving candidate, plus a control run of the incumbent (fan-out).

Candidate and control start from the incumbent's checkpoint with the same seed and step count, so the
decision compares like with like: the intervention is the only difference. The same node, added as
`replicate`, re-trains a merge candidate and the control on fresh seeds (`payload["replicate"]` = r > 0).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from agent.context import Context
from agent.nodes.common import pilot_from_result, run_training
from agent.routing import CONTROL_ID


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
    result = run_training(
        ctx,
        session_id,
        run_id,
        harness_dir,
        ctx.pilot_steps,
        init_checkpoint=version["checkpoint"] or None,
        kind="pilot",
        seed=pilot_seed(ctx.seed, iteration, replicate),
        candidate_id=candidate["id"] if candidate else None,
    )
    pilot = pilot_from_result(result, iteration=iteration, candidate_id=cid, steps=ctx.pilot_steps)
    pilot["replicate"] = replicate
    return {"pilots": [pilot]}


def pilot_seed(seed: int, iteration: int, replicate: int) -> int:
    """The training seed of an iteration's pilots (candidates and control share it); replicates get fresh ones."""
    return seed + 1000 * iteration + 101 * replicate
