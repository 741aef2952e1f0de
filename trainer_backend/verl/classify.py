"""Classify how a verl run ended from its exit code / Ray job status and its log (pure, no I/O).

Rules, first match wins:

1. stopped by the controller for making no progress → `timeout`;
2. exit 0 / SUCCEEDED with at least one training step → `ok`; with none → `infra_error` (verl #7401
   exits 0 after a zero-step resume);
3. a known infrastructure signature in the log (no GPUs, CUDA OOM, NCCL, Ray actor death, missing
   package, disk full) → `infra_error`;
4. a traceback frame inside the harness folder, or a Hydra config error → `candidate_error`;
5. anything else → `infra_error` marked "unclassified" (advisory; a retry is the cheap next step).
"""

from __future__ import annotations

import re

from harness.failures import Outcome

INFRA_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"Total available GPUs \d+ is less than total desired GPUs \d+", "not enough GPUs for the requested layout"),
    (r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError", "GPU out of memory"),
    (r"Distributed package doesn't have NCCL|NCCL error|ncclUnhandledCudaError", "NCCL / distributed backend"),
    (r"RayActorError|ActorDiedError|The actor died unexpectedly|raylet .*died", "a Ray actor or raylet died"),
    (r"No module named '(transfer_queue|vllm|sglang|flash_attn)'", "a verl runtime package is missing"),
    (r"No space left on device", "disk full"),
    (r"Token authentication is enabled but no authentication token was found", "Ray cluster needs RAY_AUTH_TOKEN"),
)

_HYDRA = re.compile(r"ConfigCompositionException|Could not override|Key '[^']+' is not in struct")


def classify(
    exit_code: int | None,
    job_status: str | None,
    log_tail: str,
    harness_root: str,
    steps_done: int,
    stop_reason: str | None,
    log_path: str,
) -> tuple[Outcome, str]:
    """Return (outcome, message); the message names the cause and the log path."""
    where = f"see {log_path}"
    if stop_reason == "timeout":
        return Outcome.TIMEOUT, f"stopped: no log or metrics growth within the stall timeout; {where}"
    succeeded = job_status == "SUCCEEDED" if job_status is not None else exit_code == 0
    if succeeded:
        if steps_done > 0:
            return Outcome.OK, f"finished {steps_done} training step(s); log {log_path}"
        return Outcome.INFRA_ERROR, f"trainer exited 0 without a training step (verl #7401 zero-step resume?); {where}"
    status = f"job {job_status}" if job_status is not None else f"exit code {exit_code}"
    if stop_reason:
        return Outcome.INFRA_ERROR, f"{status}: stopped by the controller ({stop_reason}); {where}"
    for pattern, cause in INFRA_PATTERNS:
        found = re.search(pattern, log_tail)
        if found:
            return Outcome.INFRA_ERROR, f"{status}: {cause} ({found.group(0)}); {where}"
    root = harness_root.rstrip("/") + "/"
    if re.search(r'File "' + re.escape(root), log_tail):
        return Outcome.CANDIDATE_ERROR, f"{status}: exception raised in harness code under {root}; {where}"
    if _HYDRA.search(log_tail):
        return Outcome.CANDIDATE_ERROR, f"{status}: verl rejected the configuration; {where}"
    return Outcome.INFRA_ERROR, f"{status}: unclassified failure; {where}"
