"""`evotrainer db upgrade|downgrade|check`: create and migrate the SQL store through Alembic.

Also owns the shared `--db` option and `open_store_url`, which resolves it; a bad URL is a
`DatabaseURLError`, which the CLI prints as one line with exit status 2 (`agent.commands.output`).
SQLAlchemy and Alembic are imported inside the commands, so `evotrainer --help` stays fast.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agent.commands.output import EXIT_FAILED, display_url, fail
from harness.failures import shown

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session

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


def open_store_url(db: str | None) -> str:
    """Resolve `--db` / `EVOTRAINER_DB` / the default (a bad URL raises `DatabaseURLError`: exit 2)."""
    from store.engine import resolve_db_url

    return resolve_db_url(db, Path.cwd())


def open_migrated(url: str) -> Engine:
    """Connect to an existing store migrated to head, or exit with the fix (status, skills, report)."""
    from store.engine import current_revision, head_revision, make_engine, verify_connection

    engine = make_engine(url, create_dir=False)
    verify_connection(engine)
    current, head = current_revision(engine), head_revision()
    if current is None:
        fail(f"store {display_url(url)} is not migrated; run `evotrainer db upgrade`", EXIT_FAILED)
    if current != head:
        where = f"store {display_url(url)} is at revision {current}"
        fail(f"{where}, this EvoTrainer needs {head}; run `evotrainer db upgrade`", EXIT_FAILED)
    return engine


@contextmanager
def migrated_store(url: str) -> Iterator[Session]:
    """A transaction on an existing store migrated to head (or exit with the fix); the engine is closed after."""
    from store.engine import session_scope

    engine = open_migrated(url)
    try:
        with session_scope(engine) as session:
            yield session
    finally:
        engine.dispose()


def store_file(url: str) -> Path | None:
    """The file of a SQLite store URL (None for a server database)."""
    from store.engine import sqlite_path

    return sqlite_path(url)


def upgrade_cmd(db: DbOption = None) -> None:
    """Create the store or migrate it to the newest schema (safe to repeat)."""
    from store.engine import head_revision, upgrade

    url = open_store_url(db)
    upgrade(url)
    print(f"store {display_url(url)} is at revision {head_revision()} (head)")


def downgrade_cmd(
    revision: Annotated[
        str, typer.Argument(metavar="REVISION", help="Target revision id, `-1`, or `base` (drops every store table)")
    ],
    db: DbOption = None,
) -> None:
    """Migrate the store down to REVISION."""
    from alembic.util.exc import CommandError

    from store.engine import downgrade

    url = open_store_url(db)
    try:
        downgrade(url, revision)
    except CommandError as exc:
        fail(f"cannot downgrade to {shown(revision)}: {exc}")
    print(f"store {display_url(url)} downgraded to {revision}")


def check_cmd(db: DbOption = None) -> None:
    """Verify the store is at head and matches the models (`alembic check`); exit 1 on drift."""
    from store.engine import SchemaDriftError, check

    url = open_store_url(db)
    try:
        check(url)
    except SchemaDriftError as exc:
        fail(str(exc), EXIT_FAILED)
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
