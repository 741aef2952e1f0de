#!/usr/bin/env bash
# GPU check for a lent GPU machine (~5 min): the *local* backend on one GPU, reporting samples/s and the
# strict-accuracy gain. Usage: bash benchmarks/gpu_check.sh [HARNESS_DIR] [STEPS]
# Needs: the project installed (pip install -e .), a CUDA torch, and a local backend that honours
# EVOTRAINER_DEVICE=cuda. Writes under ${OUT:-/tmp}/gpu_check; prints one `key: value` summary block.
set -euo pipefail
HARNESS=${1:-examples/arithmetic-oracle}
STEPS=${2:-20}
RUN_DIR=${OUT:-/tmp}/gpu_check/run-$(date +%s)
export EVOTRAINER_DEVICE=cuda

python - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA device visible to torch: install a CUDA torch build"
print(f"gpu: {torch.cuda.get_device_name(0)}  torch: {torch.__version__}")
PY
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true

start=$(date +%s.%N)
timeout 540 evotrainer train --harness "$HARNESS" --steps "$STEPS" --out "$RUN_DIR" 2>&1 | tail -n 40
end=$(date +%s.%N)

python - "$RUN_DIR" "$start" "$end" <<'PY'
import json, sys
from pathlib import Path
from diagnostics.schema import read_metrics, read_run_rollouts
run, wall = Path(sys.argv[1]), float(sys.argv[3]) - float(sys.argv[2])
summary = json.loads((run / "summary.json").read_text())
rows = read_metrics(run / "metrics.jsonl")
strict = [(r.step, r.data["val/strict_acc"]) for r in rows if "val/strict_acc" in r.data]
train = [r for r in read_run_rollouts(run, ("train",)).rollouts]
print("---")
print(f"outcome: {summary['outcome']}")
print(f"steps_done: {summary.get('steps_done')}")
print(f"wall_s: {wall:.1f}")
print(f"train_samples: {len(train)}")
print(f"samples_per_s: {len(train) / wall:.2f}")
if len(strict) >= 2:
    print(f"strict_acc_first: {strict[0][1]:.4f} (step {strict[0][0]})")
    print(f"strict_acc_last: {strict[-1][1]:.4f} (step {strict[-1][0]})")
    print(f"strict_acc_gain: {strict[-1][1] - strict[0][1]:+.4f}")
else:
    print(f"strict_acc_gain: n/a ({len(strict)} val/strict_acc point(s) in metrics.jsonl)")
PY
