"""Alembic environment of the EvoTrainer store (SQLite by default, Postgres by URL).

Which database: `config.attributes["connection"]` (a caller-provided connection) >
`config.attributes["db_url"]` (set by `store.engine.upgrade/downgrade/check`) > `-x db=URL` >
`EVOTRAINER_DB` > `sqlite:///<cwd>/.evotrainer/evotrainer.db`. So from the repo root,
`.venv/bin/alembic upgrade head` and `.venv/bin/alembic -x db=postgresql://... check` both work.

LangGraph's checkpointer owns its tables (created by its `.setup()`), so they are excluded from
autogenerate/check; SQLite migrations run in batch mode with foreign keys off, and the foreign keys
are verified before the transaction commits.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from alembic import context
from sqlalchemy import Connection

from store.engine import make_engine, normalise_url, resolve_db_url
from store.models import Base

config = context.config
target_metadata = Base.metadata

if config.cmd_opts is not None:  # the `alembic` command line: show what runs (the API stays quiet)
    logging.basicConfig(level=logging.INFO, format="%(levelname)-5.5s [%(name)s] %(message)s")

LANGGRAPH_TABLES = {"checkpoints", "writes", "checkpoint_blobs", "checkpoint_writes", "checkpoint_migrations"}


def include_object(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    """Leave LangGraph's checkpoint tables alone (reference/langgraph.md §9)."""
    return not (type_ == "table" and reflected and name in LANGGRAPH_TABLES)


def database_url() -> str:
    """Return the URL to migrate (see the module docstring for the order)."""
    if config.attributes.get("db_url"):
        return str(config.attributes["db_url"])
    x_db = context.get_x_argument(as_dictionary=True).get("db")
    if x_db:
        return normalise_url(x_db, "-x db")
    return resolve_db_url(None, Path.cwd())


def _configure(**kwargs: Any) -> None:
    context.configure(
        target_metadata=target_metadata,
        include_object=include_object,
        compare_type=True,
        **kwargs,
    )


def run_migrations_offline() -> None:
    """Emit SQL to stdout instead of running it (`alembic upgrade head --sql`)."""
    url = database_url()
    _configure(
        url=url,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=url.startswith("sqlite"),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_on(connection: Connection) -> None:
    """Run the migrations on an open connection (no transaction begun yet)."""
    is_sqlite = connection.dialect.name == "sqlite"
    if is_sqlite:
        # Batch mode copies tables; with foreign keys on, dropping a referenced table would cascade or
        # fail. The pragma only takes effect outside a transaction, so it goes to the raw connection.
        connection.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")  # type: ignore[union-attr]
    # store.engine starts every SQLite transaction with a real BEGIN, so DDL is transactional there too:
    # a failed migration rolls back instead of leaving half a schema.
    _configure(connection=connection, render_as_batch=is_sqlite, transactional_ddl=True)
    with context.begin_transaction():
        context.run_migrations()
        if is_sqlite:
            broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
            if broken:
                raise RuntimeError(f"migration left foreign keys broken: {broken[:5]}")


def run_migrations_online() -> None:
    """Run the migrations against a live database."""
    given = config.attributes.get("connection")
    if given is not None:
        run_on(given)
        return
    engine = make_engine(database_url())
    try:
        with engine.connect() as connection:
            run_on(connection)
            connection.commit()
    finally:
        engine.dispose()  # the pooled connection had foreign keys switched off: never reuse it


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
