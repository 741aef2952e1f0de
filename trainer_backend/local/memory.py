"""Measure a training process's peak memory for its summary.json (field names: `diagnostics.schema`).

The resident-set peak is the kernel's own high-water mark of this process (``getrusage``; Linux reports
KiB), so it includes the model, optimizer state, activations and everything Python allocated. On a GPU the
peak of tensors torch allocated on the device is added. Child processes (a sandbox worker) are not counted.
"""

from __future__ import annotations

import resource
import sys
from typing import Any

from diagnostics.schema import PEAK_GPU_MEMORY_GB, PEAK_RSS_GB


def peak_rss_gb() -> float:
    """The peak resident memory of this process so far, in GB (2**30 bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return float(peak) / (2**30 if sys.platform == "darwin" else 2**20)  # macOS reports bytes, Linux KiB


def peak_memory(device: Any | None) -> dict[str, float]:
    """The summary fields of this process's peak memory; `device` is the policy's torch device (or None)."""
    out = {PEAK_RSS_GB: peak_rss_gb()}
    if device is not None and getattr(device, "type", "") == "cuda":
        import torch

        out[PEAK_GPU_MEMORY_GB] = torch.cuda.max_memory_allocated(device) / 2**30
    return out
