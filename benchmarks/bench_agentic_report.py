"""Benchmark (not a timed test): `evotrainer diagnose` on big agentic run folders against a plain polars scan.

Usage: python benchmarks/bench_agentic_report.py [--rows 200000 1000000] [--repeats 1] [--dir DIR] [--keep]

The agentic health metrics must run on the single-turn report's streaming path. For
each size it writes a run folder of multi-turn episodes in the project's own rollout format
(`Rollout.to_json()` lines with `turns`: search / edit / test calls with arguments, results and token counts;
groups of 8, 4,096 episodes per step, 1-12 turns, ~10% loops on one call until the 12-turn cap, ~8% one-turn
exits, ~7% failed calls; validation every 20 steps), then runs, each in a fresh child process whose peak RSS
is read from `wait4` (`bench_health_report.measure`):

- the product: `python -m agent.cli diagnose RUN_DIR --json --harness examples/arithmetic` (the whole health
  report: every single-turn layer plus the agentic layer's ~50 metrics and 19 rules);
- the baseline: one lazy polars `scan_ndjson` of the same files (streaming engine) computing dead groups and
  the agentic metrics a plain scan can: turns mean, tool calls mean, one-turn and turn-cap rates, and the
  tool failure rate over the exploded turns.

It checks that both agree on those metrics and prints the product's time as a multiple of the scan's.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_health_report import HARNESS, measure  # noqa: E402

from diagnostics.schema import ROLLOUTS_DIR, rollout_file, rollout_files  # noqa: E402  (the run-folder layout)

GROUP = 8
ROWS_PER_STEP = 4096
VAL_EVERY = 20
VAL_PROMPTS = 256
MAX_TURNS = 12
SHARED = ("dead_group_ratio", "turns_mean", "tool_calls_mean", "one_turn_rate", "max_turns_rate", "tool_failure_rate")
TOOLS = ("search_code", "edit_file", "run_tests")


def generate(run_dir: Path, rows: int, seed: int = 42) -> None:
    """Write `rows` training episodes (plus validation every `VAL_EVERY` steps) as the local backend writes them."""
    import orjson

    sys.path.insert(0, str(ROOT))
    from diagnostics.schema import rollout_from_row

    rng = random.Random(seed)

    def turn(tool: str | None, args: str, ok: bool | None) -> dict[str, object]:
        text = f"<call>{tool} {args}</call>" if tool else "<ans>7</ans>"
        return {"text": text, "tool": tool, "arguments": args, "result": "ok" if ok else ("ERROR" if tool else ""),
                "success": ok, "policy_tokens": len(text), "observation_tokens": 12 if tool else 0}  # fmt: skip

    def sample(split: str, step: int, pid: str, gid: str, k: int, dead: bool) -> dict[str, object]:
        u = rng.random()
        if u < 0.10:  # an echo trap: the same search until the cap
            calls = [turn("search_code", "q=bug", True) for _ in range(MAX_TURNS)]
            turns, stop, ok = calls, "max_turns", False
        elif u < 0.18:  # a one-turn exit
            turns, stop, ok = [turn(None, "", None)], "answer", False
        else:
            n = rng.randint(1, MAX_TURNS - 1)
            calls = [turn(TOOLS[i % 3], f"a{rng.randint(0, 99)}", rng.random() > 0.07) for i in range(n)]
            ok = (not dead) and rng.random() < 0.6
            turns, stop = [*calls, turn(None, "", None)], "answer"
        tool_calls = sum(1 for t in turns if t["tool"])
        return {
            "run_id": "bench",
            "step": step,
            "split": split,
            "prompt_id": pid,
            "group_id": gid,
            "sample_index": k,
            "prompt": f"task {pid}",
            "response": " ".join(str(t["text"]) for t in turns),
            "ground_truth": "7",
            "reward": 1.0 if ok else 0.0,
            "reward_components": {},
            "strict_score": 1.0 if ok else 0.0,
            "response_tokens": sum(int(t["policy_tokens"]) for t in turns),  # type: ignore[call-overload]
            "truncated": False,
            "stop_reason": stop,
            "num_turns": len(turns),
            "tool_calls": tool_calls,
            "mean_logprob": -0.3 - 0.2 * rng.random(),
            "data_source": "agentic",
            "turns": turns,
        }

    def write(path: Path, batch: list[dict[str, object]]) -> None:
        assert rollout_from_row(batch[0]).to_json() == batch[0], "the generator drifted from the rollout record"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in batch))

    written, step = 0, 1
    while written < rows:
        n = min(ROWS_PER_STEP, rows - written)
        batch = []
        for g in range(0, n, GROUP):
            dead = rng.random() < 0.3
            pid, gid = f"train-{step}-{g // GROUP}", f"{step}-{g // GROUP}"
            batch += [sample("train", step, pid, gid, k, dead) for k in range(min(GROUP, n - g))]
        write(rollout_file(run_dir, "train", step), batch)
        if step % VAL_EVERY == 0:
            val = [sample("val", step, f"val-{i}", f"v{step}-{i}", 0, False) for i in range(VAL_PROMPTS)]
            write(rollout_file(run_dir, "val", step), val)
        written += n
        step += 1


def baseline(run_dir: Path) -> dict[str, float]:
    """A plain polars scan of the training rows: dead groups, turn and call means, caps, tool failures."""
    import polars as pl

    files = rollout_files(run_dir, "train")
    schema: dict[str, Any] = {
        "step": pl.Int64,
        "group_id": pl.String,
        "reward": pl.Float64,
        "stop_reason": pl.String,
        "num_turns": pl.Int64,
        "tool_calls": pl.Int64,
        "turns": pl.List(pl.Struct({"tool": pl.String, "success": pl.Boolean})),
    }
    scan = pl.scan_ndjson(files, schema=schema)
    groups = scan.group_by("step", "group_id").agg(pl.col("reward").std(ddof=0).alias("std"))
    dead = groups.select((pl.col("std") < 1e-6).mean().alias("dead_group_ratio"))
    rates = scan.select(
        pl.col("num_turns").mean().alias("turns_mean"),
        pl.col("tool_calls").mean().alias("tool_calls_mean"),
        (pl.col("num_turns") <= 1).mean().alias("one_turn_rate"),
        (pl.col("stop_reason") == "max_turns").mean().alias("max_turns_rate"),
    )
    turn = pl.col("turns")
    calls = (
        scan.select(turn)
        .explode("turns")
        .select(tool=turn.struct.field("tool"), ok=turn.struct.field("success"))
        .drop_nulls("tool")
        .select((~pl.col("ok")).mean().alias("tool_failure_rate"))
    )
    a, b, c = pl.collect_all([dead, rates, calls], engine="streaming")
    return {**a.row(0, named=True), **b.row(0, named=True), **c.row(0, named=True)}


def run_size(rows: int, root: Path, repeats: int) -> dict[str, object]:
    """Generate one run folder (unless present), measure both implementations, check they agree."""
    run_dir = root / f"agentic_rows_{rows}"
    if not (run_dir / ROLLOUTS_DIR).is_dir():
        t0 = time.perf_counter()
        generate(run_dir, rows)
        print(f"generated {rows:,} episodes in {time.perf_counter() - t0:.0f} s under {run_dir}", flush=True)
    size_mb = sum(p.stat().st_size for p in run_dir.rglob("*.jsonl")) / 1e6
    product_cmd = [sys.executable, "-m", "agent.cli", "diagnose", str(run_dir), "--json", "--harness", str(HARNESS)]
    scan_cmd = [sys.executable, __file__, "--baseline", str(run_dir)]
    product, scan = [], []
    for _ in range(repeats):  # interleaved, so load on the shared box hits both alike
        product.append(measure(product_cmd, root / "product.json"))
        scan.append(measure(scan_cmd, root / "scan.json"))
    report = json.loads((root / "product.json").read_text())["metrics"]
    scanned = json.loads((root / "scan.json").read_text())
    for key in SHARED:
        assert abs(report[key] - scanned[key]) < 1e-9, f"{key}: product {report[key]} != scan {scanned[key]}"
    agentic = sum(1 for k in report if k.startswith(("turns_", "tool_", "echo_", "abandon", "cut_", "act_")))
    assert report["echo_trap_rate"] > 0 and agentic > 20, "the agentic layer did not run"
    best = min(product, key=lambda m: m["wall_s"])
    best_scan = min(scan, key=lambda m: m["wall_s"])
    return {
        "rows": rows,
        "jsonl_mb": size_mb,
        "product_s": best["wall_s"],
        "product_rss_mb": max(m["peak_rss_mb"] for m in product),
        "scan_s": best_scan["wall_s"],
        "scan_rss_mb": max(m["peak_rss_mb"] for m in scan),
        "ratio": best["wall_s"] / best_scan["wall_s"],
        "product_cpu_s": best["cpu_s"],
        "scan_cpu_s": best_scan["cpu_s"],
    }


def main() -> None:
    """Measure every size, print the results table, and delete the data unless --keep."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[200_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=1, help="interleaved runs of each; the fastest counts")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "evotrainer-bench-agentic")
    parser.add_argument("--keep", action="store_true", help="keep the generated run folders")
    parser.add_argument("--baseline", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline:
        print(json.dumps(baseline(args.baseline)))
        return
    args.dir.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for rows in args.rows:
            results.append(run_size(rows, args.dir, args.repeats))
    finally:
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)
    print("| episodes | JSONL | `evotrainer diagnose --json` | CPU | peak RSS | polars scan | CPU | peak RSS |", end="")
    print(" product / scan |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['rows']:,} | {r['jsonl_mb']:.0f} MB | {r['product_s']:.2f} s | {r['product_cpu_s']:.1f} s "
            f"| {r['product_rss_mb']:.0f} MB | {r['scan_s']:.2f} s | {r['scan_cpu_s']:.1f} s "
            f"| {r['scan_rss_mb']:.0f} MB | {r['ratio']:.2f}x |"
        )


if __name__ == "__main__":
    main()
