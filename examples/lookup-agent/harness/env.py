"""The lookup task's environment (contract: harness/env.py of EvoTrainer, `make_env(row) -> Env`).

One environment per episode, built from the data row's own random table (keys a-h, values 0-9): the values
are nowhere else, so the policy must call ``lookup`` to answer. A key the table lacks is a failed call
(``success: False``); after `MAX_FAILED_LOOKUPS` failed calls the environment ends the episode (``done``:
the trainer's stop reason ``tool_error``). An episode may make `MAX_LOOKUPS` successful lookups; the
environment refuses the next one and ends the episode the same way (a guard against runaway episodes).

`MAX_LOOKUPS` is a knob (`EVOTRAINER_KNOBS`, docs/harness.md "Knobs in harness code"): the controller may
move it within its safe range.
"""

from __future__ import annotations

MAX_FAILED_LOOKUPS = 2
MAX_LOOKUPS = 8

EVOTRAINER_KNOBS = {
    "MAX_LOOKUPS": {
        "default": 8,
        "safe": [4, 64],
        "up": {
            "factors": [2, 4],
            "effects": ["env_allows_more"],
            "why": "an episode that needs more lookups than the limit allows is ended before it can answer",
        },
    },
}


class LookupEnv:
    """The table of one episode and the count of failed lookups."""

    def __init__(self, table: dict[str, int]) -> None:
        """Keep a copy of the episode's table."""
        self.table = {str(k): int(v) for k, v in table.items()}
        self.failures = 0
        self.lookups = 0

    def call(self, tool: str, arguments: dict) -> str | dict:
        """Return the value under ``arguments["key"]``, or a failed call for an unknown tool or key, or once the
        episode has made `MAX_LOOKUPS` lookups."""
        key = str(arguments.get("key", "")).strip()
        if tool == "lookup" and key in self.table:
            if self.lookups >= MAX_LOOKUPS:
                return {"result": "no lookup", "success": False, "done": True}
            self.lookups += 1
            return str(self.table[key])
        self.failures += 1
        return {"result": f"no key {key[:8]}", "success": False, "done": self.failures >= MAX_FAILED_LOOKUPS}


def make_env(row: dict) -> LookupEnv:
    """Return the environment of one episode (`row` is its data row, without the ground truth)."""
    return LookupEnv(row["table"])
