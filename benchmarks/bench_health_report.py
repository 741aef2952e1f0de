"""Benchmark (not a timed test): `evotrainer diagnose` on big run folders against a plain polars scan.

Usage: python benchmarks/bench_health_report.py [--rows 1000000 3000000 10000000] [--repeats 1] [--dir DIR] [--keep]

For each size it writes a run folder in the project's own rollout format (`Rollout.to_json()` lines:
`rollouts/train/step_<N>.jsonl` with 8,192 rows per step, groups of 8, ~30% dead groups,
number spam, empty and truncated responses; validation rollouts every 20 steps), then runs, each in a fresh
child process whose peak RSS is read from `wait4`:

- the product: `python -m agent.cli diagnose RUN_DIR --json --harness examples/arithmetic` (the whole health
  report, with the demo harness's declared answer protocol);
- the baseline: a polars `scan_ndjson` of the same files computing dead groups, reward mean, truncation,
  length and format rates (one lazy query, streaming engine).

It checks that both agree on the shared metrics and prints a table: wall time, peak RSS, and the product's
time as a multiple of the baseline's. Targets: 1 M rows <= 2x the scan and <= 600 MB; 10 M rows <= 1 GB with
time linear in rows. The data is deleted afterwards unless `--keep` (10 M rows take ~4.3 GB).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from diagnostics.schema import ROLLOUTS_DIR, rollout_file, rollout_files  # noqa: E402  (the run-folder layout)

HARNESS = ROOT / "examples" / "arithmetic"  # declares answer: {pattern: '<ans>(.*?)</ans>', ...}
GROUP = 8
ROWS_PER_STEP = 8192
VAL_EVERY = 20
VAL_PROMPTS = 256
SHARED = ("dead_group_ratio", "truncation_rate", "response_length_mean", "format_failure_rate")


def generate(run_dir: Path, rows: int, seed: int = 42) -> None:
    """Write `rows` training rollouts (plus validation every `VAL_EVERY` steps) as the trainers write them.

    Rows are written as `Rollout.to_json()` dicts (orjson, like `schema.write_rollouts`); the first row of every
    file is checked against a real `Rollout` record's JSON, so the format is the project's own.
    """
    import orjson

    sys.path.insert(0, str(ROOT))
    from diagnostics.schema import rollout_from_row

    rng = random.Random(seed)
    sources = [f"arithmetic/level{i}" for i in range(1, 6)]

    def sample(split: str, step: int, pid: str, gid: str, k: int, dead: bool, source: str) -> dict[str, object]:
        a, b = rng.randint(10, 999), rng.randint(10, 999)
        gt = a + b
        u = rng.random()
        ok = (not dead) and u < 0.5
        if not ok and u > 0.95:
            response = f"{gt} " * 10
        elif not ok and u > 0.93:
            response = ""
        else:
            response = f"{a}+{b} => {a}+{b}={gt if ok else gt + 1} <ans>{gt if ok else gt + 1}</ans>"
        cut = not ok and 0.88 < u <= 0.93
        return {
            "run_id": "bench",
            "step": step,
            "split": split,
            "prompt_id": pid,
            "group_id": gid,
            "sample_index": k,
            "prompt": f"{a}+{b}=>",
            "response": response,
            "ground_truth": str(gt),
            "reward": 1.0 if ok else 0.0,
            "reward_components": {"hit": 1.0 if ok else 0.0, "numbers": float(len(response.split()))},
            "strict_score": 1.0 if ok else 0.0,
            "response_tokens": len(response),
            "truncated": cut,
            "stop_reason": "length" if cut else "eos",
            "num_turns": 1,
            "tool_calls": 0,
            "mean_logprob": -0.3 - 0.2 * rng.random(),
            "data_source": source,
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
            dead, source = rng.random() < 0.3, rng.choice(sources)
            pid, gid = f"train-{step}-{g // GROUP}", f"{step}-{g // GROUP}"
            batch += [sample("train", step, pid, gid, k, dead, source) for k in range(min(GROUP, n - g))]
        write(rollout_file(run_dir, "train", step), batch)
        if step % VAL_EVERY == 0:
            val = [sample("val", step, f"val-{i}", f"v{step}-{i}", 0, False, "val") for i in range(VAL_PROMPTS)]
            write(rollout_file(run_dir, "val", step), val)
        written += n
        step += 1


def baseline(run_dir: Path) -> dict[str, float]:
    """A plain polars scan: dead groups, reward mean, truncation, length and format rates of the training rows."""
    import polars as pl

    files = rollout_files(run_dir, "train")
    schema = {
        "step": pl.Int64,
        "group_id": pl.String,
        "reward": pl.Float64,
        "truncated": pl.Boolean,
        "stop_reason": pl.String,
        "response_tokens": pl.Int64,
        "response": pl.String,
    }
    scan = pl.scan_ndjson(files, schema=schema)
    groups = scan.group_by("step", "group_id").agg(pl.col("reward").std(ddof=0).alias("std"))
    dead = groups.select((pl.col("std") < 1e-6).mean().alias("dead_group_ratio"))
    rates = scan.select(
        pl.col("reward").mean().alias("reward_mean"),
        (pl.col("truncated") | (pl.col("stop_reason") == "length")).mean().alias("truncation_rate"),
        pl.col("response_tokens").mean().alias("response_length_mean"),
        (~pl.col("response").str.contains("<ans>(.*?)</ans>")).mean().alias("format_failure_rate"),
    )
    a, b = pl.collect_all([dead, rates], engine="streaming")
    return {**a.row(0, named=True), **b.row(0, named=True)}


def measure(argv: list[str], out: Path) -> dict[str, float]:
    """Run `argv` with stdout to `out`; return its wall time and peak RSS (its own, via wait4)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(out, "wb") as fh:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.PIPE, env=env, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    assert os.waitstatus_to_exitcode(status) == 0, proc.stderr.read().decode() if proc.stderr else status
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mb": usage.ru_maxrss / 1024}


def run_size(rows: int, root: Path, repeats: int) -> dict[str, object]:
    """Generate one run folder (unless present), measure both implementations, check they agree."""
    run_dir = root / f"rows_{rows}"
    if not (run_dir / ROLLOUTS_DIR).is_dir():
        t0 = time.perf_counter()
        generate(run_dir, rows)
        print(f"generated {rows:,} rows in {time.perf_counter() - t0:.0f} s under {run_dir}", flush=True)
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
        "all_product_s": [round(m["wall_s"], 2) for m in product],
        "all_scan_s": [round(m["wall_s"], 2) for m in scan],
    }


def main() -> None:
    """Measure every size, print the results table, and delete the data unless --keep."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 3_000_000, 10_000_000])
    parser.add_argument("--repeats", type=int, default=1, help="interleaved runs of each; the fastest counts")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "evotrainer-bench-report")
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
            r = results[-1]
            print(
                f"{r['rows']:>11,} rows  {r['jsonl_mb']:7.0f} MB  product {r['product_s']:7.2f} s "
                f"{r['product_rss_mb']:6.0f} MB  scan {r['scan_s']:6.2f} s {r['scan_rss_mb']:5.0f} MB  "
                f"ratio {r['ratio']:.2f}  cpu {r['product_cpu_s']:.1f} vs {r['scan_cpu_s']:.1f} s"
                f"  (runs: {r['all_product_s']} vs {r['all_scan_s']})",
                flush=True,
            )
    finally:
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)
    print(json.dumps(results, indent=2))
    print("\n| rows | JSONL | `evotrainer diagnose --json` | CPU | peak RSS | polars scan | CPU | peak RSS |", end="")
    print(" product / scan |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['rows']:,} | {r['jsonl_mb'] / 1000:.2f} GB | {r['product_s']:.2f} s | {r['product_cpu_s']:.1f} s "
            f"| {r['product_rss_mb']:.0f} MB | {r['scan_s']:.2f} s | {r['scan_cpu_s']:.1f} s "
            f"| {r['scan_rss_mb']:.0f} MB | {r['ratio']:.2f}x |"
        )


if __name__ == "__main__":
    main()
