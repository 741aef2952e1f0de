"""How every command writes: one rich console setup and one error path.

- `console()`: the rich console each command prints with. On a terminal it has the terminal's width; anywhere
  else (CI logs, `nohup`, pipes) it has no width limit and never wraps, so ids and paths stay whole and
  copy-pasteable (rich's default outside a terminal is 80 columns: paths broke mid-word and tables cut
  session ids to `s1204…`).
- `fail(message, code)`: the one way a command stops on an error: `error: <message>` as one line on stderr,
  exit 2 for bad input (`EXIT_BAD_INPUT`), 1 for a failure on our side or in a run (`EXIT_FAILED`).
  `agent.cli.EvoGroup` sends every `harness.failures.BadInput` that escapes a command (a harness, store
  URL, session check or backend refusal) and every usage error through it too. Values inside messages are
  shown with `harness.failures.shown` (their repr, capped).
- `no_session(session, url)`: the one wording for a session id the store does not know (status, report,
  resume, approve).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

from harness.failures import shown

if TYPE_CHECKING:
    from rich.console import Console

EXIT_BAD_INPUT, EXIT_FAILED = 2, 1
UNWRAPPED_WIDTH = 1_000_000  # outside a terminal: lines are as long as what they hold


def console(*, stderr: bool = False) -> Console:
    """The console a command prints with: the terminal's width on a terminal, never wrapping elsewhere."""
    from rich.console import Console

    out = Console(highlight=False, stderr=stderr)
    if not out.is_terminal:
        out.width = UNWRAPPED_WIDTH
        out.soft_wrap = True
    return out


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print `error: <message>` as one line on stderr and exit with `code` (2: bad input)."""
    print(f"error: {' '.join(message.split())}", file=sys.stderr, flush=True)
    raise typer.Exit(code)


def display_url(url: str) -> str:
    """Return the store URL with any password hidden, for messages."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def no_session(session: str, url: str, folder: Path | None = None) -> str:
    """The message for a session id the store at `url` does not hold (`folder`: the settings folder looked in)."""
    where = f"in the store {display_url(url)}" if folder is None else f"under {folder} (store {display_url(url)})"
    return (
        f"no session {shown(session)} {where}; `evotrainer status` lists the store's sessions "
        "(--db URL or EVOTRAINER_DB names another store)"
    )
