"""The one line `train` and `run` print before any work: what a run costs here, when the backend can tell.

The local backend says it for a pretrained model on a CPU (`trainer_backend.local.sizing`): the estimated
time of one run and, for settings sized for a GPU, the CPU profile to use instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.manifest import Harness


def print_cost_line(out: Any, harness: Harness, backend: str, steps: int) -> None:
    """Print the backend's cost line for a run of `steps` steps of `harness` on `out` (a rich console)."""
    from rich.text import Text

    import trainer_backend

    plugin = trainer_backend.plugin_of(backend)
    line = plugin.cost_line(harness, steps) if plugin.cost_line is not None else None
    if line:
        out.print(Text(line, style="yellow" if "sized for a GPU" in line else ""), soft_wrap=True)
