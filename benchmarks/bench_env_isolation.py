"""What isolating episodes costs: opening environments shared vs a fresh import of the env module per episode.

Opens `--episodes` environments of an agentic harness (default the fixed lookup example) in one sandbox
worker, in batches of `--batch` as the local trainer does, and runs one lookup in each, first with the env
module shared (the default), then with ``fresh_module`` isolation (`harness/env.py`); also times one replay
check (`sandboxes/env_replay.py: replay`) of a plan of that size. Prints the per-episode wall time of each and
the difference (the cost of isolation per episode)::

    PYTHONPATH=. .venv/bin/python benchmarks/bench_env_isolation.py --episodes 512 --sandbox process
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from harness.env import Isolation
from harness.manifest import load_harness
from sandboxes.calls import open_calls
from sandboxes.env_replay import harness_rows

ROOT = Path(__file__).resolve().parents[1]


def per_episode_s(harness_dir: Path, episodes: int, batch: int, mode: str, isolation: Isolation) -> float:
    """Wall seconds per episode to open an environment and run one lookup in it (worker start excluded)."""
    harness = load_harness(harness_dir)
    rows = list(harness_rows(harness).values())[:episodes]
    calls = open_calls(harness, mode)
    try:
        calls.open_episodes(rows[:1], isolation)  # start the worker outside the clock
        start = time.perf_counter()
        for at in range(0, len(rows), batch):
            ids = calls.open_episodes(rows[at : at + batch], isolation)
            calls.env_calls([(i, "lookup", {"key": "a"}) for i in ids])
            calls.close_episodes(ids)
        return (time.perf_counter() - start) / len(rows)
    finally:
        calls.close()


def main() -> None:
    """Time both isolations and print the per-episode figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--harness", type=Path, default=ROOT / "examples" / "lookup-agent-oracle")
    parser.add_argument("--episodes", type=int, default=512, help="environments opened per isolation")
    parser.add_argument("--batch", type=int, default=32, help="episodes opened per request (prompts x group size)")
    parser.add_argument("--sandbox", default="process", help="process | docker")
    args = parser.parse_args()
    shared = per_episode_s(args.harness, args.episodes, args.batch, args.sandbox, "shared")
    fresh = per_episode_s(args.harness, args.episodes, args.batch, args.sandbox, "fresh_module")
    print(f"episodes: {args.episodes}  batch: {args.batch}  sandbox: {args.sandbox}")
    print(f"shared_ms_per_episode: {shared * 1e3:.3f}")
    print(f"fresh_module_ms_per_episode: {fresh * 1e3:.3f}")
    print(f"isolation_cost_ms_per_episode: {(fresh - shared) * 1e3:.3f}")


if __name__ == "__main__":
    main()
