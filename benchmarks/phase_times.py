"""Where a session's wall time goes, phase by phase, from its LangGraph checkpoint history.

Each super-step of the campaign graph writes a checkpoint with a timestamp, and each checkpoint names the
nodes that run next. A phase's duration is the time from the checkpoint whose `next` is that phase's node
(`backtest`, `train`, `replicate`, `observe` — v0's training —, ...) to the following checkpoint. Backtests
and pilots both run in a fan-out, so a phase is the wall time of all its parallel branches together.

    python benchmarks/phase_times.py OUT_DIR     # every session store under a run_scenarios.py --out folder

Prints one row per session (scenario/mode folder): seconds per phase, the backtest / pilot cost ratio
(backtest phase over pilot + replicate phases), and controller overhead (share of the session's wall time
spent in no phase that trains or backtests: observe, train, replicate, backtest excluded).
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

COMPUTE = ("observe", "train", "replicate", "backtest")


def phase_seconds(db_url: str, session_id: str) -> dict[str, float]:
    """Seconds spent in each node's super-steps of one session (a super-step running several nodes counts
    for each of them); `total` is first to last checkpoint."""
    from agent.graph import builder
    from agent.session import checkpointer, thread_config

    with checkpointer(db_url) as saver:
        graph = builder.compile(checkpointer=saver)
        history = list(graph.get_state_history(thread_config(session_id)))
    snaps = sorted(history, key=lambda s: s.created_at or "")
    out: dict[str, float] = defaultdict(float)
    for before, after in itertools.pairwise(snaps):
        if not (before.created_at and after.created_at):
            continue
        seconds = (
            dt.datetime.fromisoformat(after.created_at) - dt.datetime.fromisoformat(before.created_at)
        ).total_seconds()
        for node in set(before.next):
            out[node] += seconds
    if len(snaps) >= 2 and snaps[0].created_at and snaps[-1].created_at:
        first, last = (dt.datetime.fromisoformat(s.created_at) for s in (snaps[0], snaps[-1]))  # type: ignore[arg-type]
        out["total"] = (last - first).total_seconds()
    return dict(out)


def summarise(phases: dict[str, float]) -> dict[str, Any]:
    """The backtest / pilot ratio and the controller's share of the wall time."""
    pilots = phases.get("train", 0.0) + phases.get("replicate", 0.0)
    total = phases.get("total", 0.0)
    compute = sum(phases.get(n, 0.0) for n in COMPUTE)
    return {
        "backtest_s": round(phases.get("backtest", 0.0), 2),
        "pilot_s": round(pilots, 1),
        "backtest_over_pilot": round(phases.get("backtest", 0.0) / pilots, 4) if pilots else None,
        "controller_overhead": round((total - compute) / total, 4) if total else None,
        "total_s": round(total, 1),
    }


def main(argv: list[str] | None = None) -> int:
    """Print (and write phase_times.json under OUT_DIR) the phase times of every session under OUT_DIR."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", type=Path)
    args = ap.parse_args(argv)
    from sqlalchemy import select

    from store import models
    from store.engine import make_engine, session_scope

    rows = []
    for db in sorted(args.out_dir.glob("*/*/evo.db")):
        url = f"sqlite:///{db}"
        engine = make_engine(url)
        try:
            with session_scope(engine) as s:
                ids = list(s.scalars(select(models.EvoSession.id)))
        finally:
            engine.dispose()
        for sid in ids:
            phases = phase_seconds(url, sid)
            row = {"session": f"{db.parent.parent.name}/{db.parent.name}", **summarise(phases)}
            rows.append(row)
            print(json.dumps(row))
    (args.out_dir / "phase_times.json").write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
