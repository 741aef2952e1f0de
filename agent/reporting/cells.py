"""HTML cells of the session report: escaping, numbers, tables, badges and notes (shared by its sections)."""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence

from agent.reporting.figures import status_colour


def esc(value: object) -> str:
    """HTML-escape any value (None becomes an em dash; floats are rounded to 4 significant digits)."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return html.escape(str(value))


def num(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def html_table(table_id: str, header: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    """A table whose cells are already-escaped HTML."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    klass = f' class="{cls}"' if cls else ""
    return f'<table id="{table_id}"{klass}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def badge(status: str) -> str:
    return f'<span class="badge" style="background:{status_colour(status)}">{esc(status)}</span>'


def note_divs(lines: Iterable[str]) -> str:
    return "".join(f'<div class="note">{esc(n)}</div>' for n in lines)
