"""The `evotrainer` command line (typer + rich).

Each command lives in a module under `agent/commands/` that imports its heavy dependencies inside
the command function, so `evotrainer --help` stays fast and never imports torch or verl.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="evotrainer",
    help="Co-evolve an LLM policy and its training harness: an autonomous, auditable RL campaign.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Command modules, in --help order; each exposes `register(app)`.
COMMAND_MODULES = (
    "init",
    "run",
    "status",
    "report",
    "train",
    "diagnose",
    "backtest",
    "skills",
    "sandbox",
    "db",
    "graph",
)
for _name in COMMAND_MODULES:
    importlib.import_module(f"agent.commands.{_name}").register(app)


def main() -> None:
    """Run the CLI."""
    app()


if __name__ == "__main__":
    main()
