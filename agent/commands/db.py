"""`evotrainer db upgrade|downgrade|check`: create and migrate the SQL store through Alembic.

Also owns the shared `--db` option and `open_store_url`, which turns a bad URL into a one-line error
on stderr and exit status 2. SQLAlchemy and Alembic are imported inside the commands, so
`evotrainer --help` stays fast.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

if TYPE_CHECKING:
    from sqlalchemy import Engine

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        metavar="URL",
        help="Store URL: sqlite:///PATH or postgresql://USER@HOST/DB "
        "(default: $EVOTRAINER_DB, else .evotrainer/evotrainer.db in the current folder)",
        show_default=False,
    ),
]

EXIT_BAD_URL = 2


def fail(message: str, code: int = 1) -> NoReturn:
    """Print a one-line error to stderr and exit with `code`."""
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    raise typer.Exit(code)


def open_store_url(db: str | None) -> str:
    """Resolve `--db` / `EVOTRAINER_DB` / the default; on a bad URL print one line and exit 2."""
    from pathlib import Path

    from store.engine import DatabaseURLError, resolve_db_url

    try:
        return resolve_db_url(db, Path.cwd())
    except DatabaseURLError as exc:
        fail(str(exc), EXIT_BAD_URL)


def display_url(url: str) -> str:
    """Return the URL with any password hidden, for messages."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def open_migrated(url: str) -> Engine:
    """Connect to an existing store migrated to head, or exit with the fix (status, skills, report)."""
    from store.engine import DatabaseURLError, current_revision, head_revision, make_engine, verify_connection

    engine = make_engine(url, create_dir=False)
    try:
        verify_connection(engine)
    except DatabaseURLError as exc:
        fail(str(exc), EXIT_BAD_URL)
    current, head = current_revision(engine), head_revision()
    if current is None:
        fail(f"store {display_url(url)} is not migrated; run `evotrainer db upgrade`")
    if current != head:
        where = f"store {display_url(url)} is at revision {current}"
        fail(f"{where}, this EvoTrainer needs {head}; run `evotrainer db upgrade`")
    return engine


def upgrade_cmd(db: DbOption = None) -> None:
    """Create the store or migrate it to the newest schema (safe to repeat)."""
    from store.engine import DatabaseURLError, head_revision, upgrade

    url = open_store_url(db)
    try:
        upgrade(url)
    except DatabaseURLError as exc:
        fail(str(exc), EXIT_BAD_URL)
    print(f"store {display_url(url)} is at revision {head_revision()} (head)")


def downgrade_cmd(
    revision: Annotated[
        str, typer.Argument(metavar="REVISION", help="Target revision id, `-1`, or `base` (drops every store table)")
    ],
    db: DbOption = None,
) -> None:
    """Migrate the store down to REVISION."""
    from alembic.util.exc import CommandError

    from store.engine import DatabaseURLError, downgrade

    url = open_store_url(db)
    try:
        downgrade(url, revision)
    except DatabaseURLError as exc:
        fail(str(exc), EXIT_BAD_URL)
    except CommandError as exc:
        fail(f"cannot downgrade to {revision!r}: {exc}")
    print(f"store {display_url(url)} downgraded to {revision}")


def check_cmd(db: DbOption = None) -> None:
    """Verify the store is at head and matches the models (`alembic check`); exit 1 on drift."""
    from store.engine import DatabaseURLError, SchemaDriftError, check

    url = open_store_url(db)
    try:
        check(url)
    except DatabaseURLError as exc:
        fail(str(exc), EXIT_BAD_URL)
    except SchemaDriftError as exc:
        fail(str(exc))
    print(f"store {display_url(url)}: schema matches the models, no drift")


def register(app: typer.Typer) -> None:
    """Add the `db` command group to the CLI."""
    db_app = typer.Typer(
        help="Create, migrate and check the SQL store (SQLite by default, Postgres by URL).",
        no_args_is_help=True,
    )
    db_app.command("upgrade")(upgrade_cmd)
    # `-1` is a revision, not an option: let it through as the positional.
    db_app.command("downgrade", context_settings={"ignore_unknown_options": True})(downgrade_cmd)
    db_app.command("check")(check_cmd)
    app.add_typer(db_app, name="db")
