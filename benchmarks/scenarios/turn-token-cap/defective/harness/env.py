"""The lookup task's environment (contract: harness/env.py of EvoTrainer, `make_env(row) -> Env`).

One environment per episode, built from the data row's own random table (keys a-h, values 0-9): the values
are nowhere else, so the policy must call ``lookup`` to answer. A key the table lacks is a failed call
(``success: False``); after `MAX_FAILED_LOOKUPS` failed calls the environment ends the episode (``done``:
the trainer's stop reason ``tool_error``).
"""

from __future__ import annotations

MAX_FAILED_LOOKUPS = 2


class LookupEnv:
    """The table of one episode and the count of failed lookups."""

    def __init__(self, table: dict[str, int]) -> None:
        """Keep a copy of the episode's table."""
        self.table = {str(k): int(v) for k, v in table.items()}
        self.failures = 0

    def call(self, tool: str, arguments: dict) -> str | dict:
        """Return the value under ``arguments["key"]``, or a failed call for an unknown tool or key."""
        key = str(arguments.get("key", "")).strip()
        if tool == "lookup" and key in self.table:
            return str(self.table[key])
        self.failures += 1
        return {"result": f"no key {key[:8]}", "success": False, "done": self.failures >= MAX_FAILED_LOOKUPS}


def make_env(row: dict) -> LookupEnv:
    """Return the environment of one episode (`row` is its data row, without the ground truth)."""
    return LookupEnv(row["table"])
