"""`evotrainer graph`: print the campaign graph as Mermaid text (offline; no rendering service needed)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add `graph` to the CLI."""
    app.command("graph")(graph)


def graph() -> None:
    """Print the campaign graph as Mermaid text (paste into any Mermaid viewer, or read it as is)."""
    from agent.graph import graph as compiled

    print(compiled.get_graph().draw_mermaid())
