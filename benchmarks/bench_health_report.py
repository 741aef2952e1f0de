"""Benchmark: health metrics over 1M verl-format rollout rows, streaming fast path vs a pandas baseline.

Usage: python benchmarks/bench_health_report.py [--rows 1000000] [--dir DIR] [--skip-pandas]

Generates verl V1 training dump files (`<dir>/<step>.jsonl`, rows `input, output, gts, score, step, uid`,
groups of 8 samples per prompt), then runs each implementation in a fresh subprocess and reports wall time
and peak RSS (ru_maxrss of that subprocess), checks that both give the same numbers, and prints a table.
Target (issue #4): fast path <= 30 s and <= 1 GB RSS on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

GROUP = 8
ROWS_PER_STEP = 10_000
KEYS = (
    "dead_group_ratio",
    "reward_spread",
    "score_mean",
    "response_chars_mean",
    "length_reward_corr",
    "format_failure_rate",
    "train_reward_delta",
)


def generate(directory: Path, rows: int, seed: int = 42) -> None:
    """Write `rows` verl dump rows: arithmetic prompts, 30% dead groups, some spam and empty outputs."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    written, step = 0, 0
    while written < rows:
        n = min(ROWS_PER_STEP, rows - written)
        with open(directory / f"{step}.jsonl", "wb") as fh:
            for g in range(0, n, GROUP):
                a, b = rng.randint(1, 99), rng.randint(1, 99)
                gt = a + b
                dead = rng.random() < 0.3
                puid = f"{step:04d}{g:08d}-{rng.getrandbits(32):08x}"
                for k in range(min(GROUP, n - g)):
                    u = rng.random()
                    ok = (not dead) and u < 0.5
                    if not ok and u > 0.95:
                        out = f"{gt} " * 10
                    elif not ok and u > 0.93:
                        out = ""
                    else:
                        out = f"{a}+{b} => {a}+{b}={gt if ok else gt + 1} <ans>{gt if ok else gt + 1}</ans>"
                    row = {
                        "input": f"user: {a}+{b}=>\nassistant:",
                        "output": out,
                        "gts": str(gt),
                        "score": 1.0 if ok else 0.0,
                        "step": step,
                        "uid": f"{puid}_{k}_0",
                    }
                    fh.write(orjson.dumps(row) + b"\n")
        written += n
        step += 1


def run_fast(directory: Path) -> dict[str, float]:
    """The streaming fast path."""
    from diagnostics.fastpath import dump_files, verl_dump_metrics
    from diagnostics.schema import ReadProblem

    problems: list[ReadProblem] = []
    metrics = verl_dump_metrics(dump_files(directory), problems)
    assert not problems, problems[:3]
    return metrics


def run_pandas(directory: Path) -> dict[str, float]:
    """A straightforward pandas implementation of the same metrics."""
    import numpy as np
    import pandas as pd

    files = sorted(directory.glob("*.jsonl"), key=lambda p: int(p.stem))
    df = pd.concat([pd.read_json(p, lines=True, dtype={"gts": str, "uid": str}) for p in files], ignore_index=True)
    df["group"] = df["uid"].str.rsplit("_", n=2).str[0]
    std = df.groupby(["step", "group"])["score"].std(ddof=0)
    length = df["output"].str.len()
    tagged = df["output"].str.contains(r"<ans>|<answer>|\\boxed|####", regex=True)
    step_means = df.groupby("step")["score"].mean().to_numpy()
    w = max(1, len(step_means) // 3)
    return {
        "dead_group_ratio": float((std < 1e-6).mean()),
        "reward_spread": float(std.mean()),
        "score_mean": float(df["score"].mean()),
        "response_chars_mean": float(length.mean()),
        "length_reward_corr": float(np.corrcoef(length, df["score"])[0, 1]),
        "format_failure_rate": float(1.0 - tagged.mean()),
        "train_reward_delta": float(step_means[-w:].mean() - step_means[:w].mean()),
    }


def child(impl: str, directory: Path) -> None:
    """Run one implementation and print its metrics, wall time and peak RSS as JSON."""
    start = time.perf_counter()
    metrics = run_fast(directory) if impl == "fast" else run_pandas(directory)
    wall = time.perf_counter() - start
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"impl": impl, "wall_s": wall, "peak_rss_mb": rss_mb, "metrics": metrics}))


def measure(impl: str, directory: Path) -> dict[str, object]:
    """Run `impl` in a fresh interpreter so peak RSS is its own."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", impl, "--dir", str(directory)], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    """Generate the data (unless present), run both implementations, print and check the results."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "evotrainer-bench")
    parser.add_argument("--skip-pandas", action="store_true")
    parser.add_argument("--child", choices=["fast", "pandas"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.dir)
        return
    data = args.dir / f"rows_{args.rows}"
    if not data.is_dir():
        t0 = time.perf_counter()
        generate(data, args.rows)
        print(f"generated {args.rows} rows in {time.perf_counter() - t0:.1f}s under {data}")
    size_mb = sum(p.stat().st_size for p in data.glob("*.jsonl")) / 1e6
    fast = measure("fast", data)
    print(f"fast path : {fast['wall_s']:.2f} s, peak RSS {fast['peak_rss_mb']:.0f} MB  ({size_mb:.0f} MB of JSONL)")
    if not args.skip_pandas:
        slow = measure("pandas", data)
        print(f"pandas    : {slow['wall_s']:.2f} s, peak RSS {slow['peak_rss_mb']:.0f} MB")
        print(
            f"ratio     : {slow['wall_s'] / fast['wall_s']:.1f}x faster, "  # type: ignore[operator]
            f"{slow['peak_rss_mb'] / fast['peak_rss_mb']:.1f}x less memory"
        )  # type: ignore[operator]
        for key in KEYS:
            a, b = fast["metrics"][key], slow["metrics"][key]  # type: ignore[index]
            assert abs(a - b) < 1e-9, f"{key}: fast {a} != pandas {b}"
        print("metrics agree:", {k: round(fast["metrics"][k], 6) for k in KEYS})  # type: ignore[index]


if __name__ == "__main__":
    main()
