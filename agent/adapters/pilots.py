"""Pilot runs: how each is named and planned (the plan the `train` node runs, the dry run and the backend's
candidate check validate).

A candidate has one name ``v<i>.<k>-<slug>`` (its id without the session, its branch without
``evo/<session>/``); the control of iteration i is ``v<i>.0-control``; a pilot's run id is
``<session>-<name>``, a replicate's adds ``-r<r>``. Run ids of sessions from before that scheme are still read
(`_legacy_run_id`). Pure apart from checking whether a legacy run folder exists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agent.context import Context
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
    run_id = pilot_run_id(session_id, iteration, cid if candidate else None, replicate)
    legacy = _legacy_run_id(session_id, iteration, cid if candidate else None, replicate)
    if (ctx.session_dir(session_id) / "runs" / legacy).is_dir():  # a session resumed from before the rename
        run_id = legacy
    rollback = payload.get("rollback") or {}
    if candidate and candidate.get("restarts"):  # it changes what a run does before its first step (a warm start)
        init, start_steps = "", 0
    elif candidate and rollback and (candidate.get("repairs_reward") or not rollback.get("repairs_only")):
        # the incumbent's run damaged its policy (collapsed it, or learned to exploit the reward this candidate
        # repairs): test the fix from before the damage
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


def pilot_seed(seed: int, iteration: int, replicate: int) -> int:
    """The seed of an iteration's pilots (candidates and control share it); replicates get fresh ones.

    Main pilots continue the incumbent's random streams, so their seed only drives validation sampling."""
    return seed + 1000 * iteration + 101 * replicate


def candidate_name(session_id: str, candidate_id: str) -> str:
    """A candidate's one name ``v<i>.<k>-<slug>``: its id without the session, its branch without ``evo/<session>/``."""
    return candidate_id.removeprefix(f"{session_id}-")


def control_name(iteration: int) -> str:
    """The control run's name in the candidates' scheme: ``v<i>.0-control`` (candidate 0 = no intervention)."""
    return f"v{iteration}.0-{CONTROL_ID}"


def pilot_run_id(session_id: str, iteration: int, candidate_id: str | None, replicate: int = 0) -> str:
    """A pilot's run id: ``<session>-<name>`` with the candidate's one name ``v<i>.<k>-<slug>`` (its id without
    the session), the control's ``v<i>.0-control``; a replicate adds ``-r<r>``."""
    name = candidate_name(session_id, candidate_id) if candidate_id else control_name(iteration)
    return f"{session_id}-{name}" + (f"-r{replicate}" if replicate else "")


def parse_pilot_run_id(session_id: str, run_id: str, candidate_id: str | None) -> tuple[int, str, int] | None:
    """(iteration, name, replicate) of a pilot run, from its id in either scheme (see `_legacy_run_id`).

    The candidate id disambiguates: a slug may itself end in ``-r<digits>``. None for a run id of neither form.
    """
    if candidate_id is None:
        match = _CONTROL_RE.fullmatch(run_id.removeprefix(f"{session_id}-"))
        if match is None or not run_id.startswith(f"{session_id}-"):
            return None
        iteration = int(match["it"] or match["old"])
        return iteration, control_name(iteration), int(match["r"] or 0)
    name = candidate_name(session_id, candidate_id)
    found = re.match(r"v(\d+)\.", name)
    if found is None:
        return None
    iteration = int(found[1])
    for prefix in (f"{session_id}-{name}", _legacy_run_id(session_id, iteration, candidate_id, 0)):
        rest = run_id.removeprefix(prefix)
        if rest != run_id and re.fullmatch(r"(-r\d+)?", rest):
            return iteration, name, int(rest[2:] or 0)
    return None


_CONTROL_RE = re.compile(rf"(?:v(?P<it>\d+)\.0-{CONTROL_ID}|i(?P<old>\d+)-{CONTROL_ID})(?:-r(?P<r>\d+))?")


def _legacy_run_id(session_id: str, iteration: int, candidate_id: str | None, replicate: int) -> str:
    """Run ids of sessions before candidates were named once: ``<session>-i<i>-k<i>.<k>-<slug>``, ``-i<i>-control``."""
    tail = "control" if candidate_id is None else "k" + candidate_id.rsplit("-v", 1)[-1]
    return f"{session_id}-i{iteration}-{tail}" + (f"-r{replicate}" if replicate else "")
