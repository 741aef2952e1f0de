"""Pick how candidate harness code (reward, filter, environment) is called: in-process, or in a sandbox worker."""

from __future__ import annotations

from harness.calls import HarnessCalls, InProcessCalls
from harness.manifest import Harness


def open_calls(harness: Harness, mode: str) -> HarnessCalls:
    """Return the calls object for `mode`: ``none`` (in-process), ``docker`` or ``process`` (sandboxed).

    Raises:
        ValueError: unknown mode.
    """
    if mode == "none":
        return InProcessCalls(harness)
    if mode in ("docker", "process"):
        from sandboxes.worker import SandboxCalls  # lazy: the sandbox adapter pulls in docker

        filter_entry = None if harness.group_filter is None else str(harness.group_filter)
        env_entry = None if harness.env is None else str(harness.env)
        # Protected paths (strict evaluator, held-out data, manifest) stay out of the sandbox's copy.
        exclude = tuple(harness.manifest.surface.protected)
        return SandboxCalls(
            harness.root,
            str(harness.reward),
            filter_entry,
            mode,  # type: ignore[arg-type]
            exclude=exclude,
            env_entry=env_entry,
        )
    raise ValueError(f"unknown sandbox mode {mode!r}; use none, docker or process")
