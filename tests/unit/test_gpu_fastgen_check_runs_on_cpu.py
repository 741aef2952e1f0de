"""The GPU self-check script runs end to end (its CPU rehearsal), so a GPU session cannot fail on a typo.

`benchmarks/gpu_fastgen_check.py --device cpu --tiny` builds both models, runs checks (a) and (b) and the
timings through the same code as on the GPU (CUDA graphs aside), prints its tables and writes its JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_check_script_passes_its_cpu_rehearsal(tmp_path: Path) -> None:
    args = ["--device", "cpu", "--tiny", "--batch", "4", "--prompt", "8", "--new", "12"]
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_fastgen_check.py"), *args],
        cwd=ROOT,
        env={**os.environ, "OUT": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "gpu_fastgen_check.json").read_text())
    assert report["ok"] and set(report["models"]) == {"qwen2-0.5B-shape", "llama-small"}
    for entry in report["models"].values():
        a, b, c = entry["a_graph_vs_eager"], entry["b_bf16_fidelity"], entry["c_ms_per_step"]
        assert a["ok"] and a["tokens_identical"] and a["logits_bitwise"] and not a["graphs"]
        assert b["ok"] and 0 < b["fast_vs_fp32"] < 0.05
        assert c["hf_generate_dynamic"] > 0 and c["static_eager"] > 0
    assert "all checks ok: True" in result.stdout and "(b) bf16 max rel err" in result.stdout
