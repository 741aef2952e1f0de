"""Database URL resolution, engines, sessions and the Alembic command wrappers.

This module is the store's only I/O adapter: it resolves which database to use (`--db` >
`EVOTRAINER_DB` > `sqlite:///<cwd>/.evotrainer/evotrainer.db`), builds engines with the settings each
backend needs, and runs migrations through Alembic's command API, one process at a time per database
(`migration_lock`). SQLite gets WAL, foreign keys,
a busy timeout and `BEGIN IMMEDIATE` transactions, so several processes can write one store without
losing rows; Postgres gets `pool_pre_ping` and a connect timeout.

A bad URL raises `DatabaseURLError` before anything is written: no SQLite file or folder is created
for an invalid URL, and an unreachable Postgres fails at the first connection attempt.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, OperationalError
from sqlalchemy.orm import Session

from harness.failures import BadInput

ENV_VAR = "EVOTRAINER_DB"
DEFAULT_DIR = ".evotrainer"
DEFAULT_FILE = "evotrainer.db"
SQLITE_BUSY_TIMEOUT_MS = 30_000
PG_CONNECT_TIMEOUT_S = 5
MIGRATION_LOCK_POLL_S = 0.05
MIGRATION_LOCK_KEY = 0x45564F5452414E  # "EVOTRAN": the advisory lock every migrating process takes (Postgres)
# Alembic keeps the migration context in a module-global proxy (`alembic.context`), so two threads of one
# process migrating at once (two sessions set up side by side on one LangGraph server) break each other
# (`KeyError: 'script'`). Every Alembic command of this process runs under this lock.
_ALEMBIC_IN_PROCESS = threading.RLock()
# From this file, not `store.__file__`: an editable install may expose `store` as a namespace package.
MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"

_FIX = (
    "pass --db or set EVOTRAINER_DB to sqlite:///PATH/evotrainer.db or "
    "postgresql://USER@HOST:PORT/DBNAME (unset both for the default .evotrainer/evotrainer.db)"
)


class DatabaseURLError(BadInput):
    """The database URL (from `--db` or `EVOTRAINER_DB`) is unusable; the message says how to fix it."""


def default_db_url(cwd: Path) -> str:
    """Return the embedded default store: `sqlite:///<cwd>/.evotrainer/evotrainer.db`."""
    return f"sqlite:///{(cwd / DEFAULT_DIR / DEFAULT_FILE).resolve()}"


def resolve_db_url(cli_value: str | None, cwd: Path) -> str:
    """Choose the store URL: explicit `--db` > env `EVOTRAINER_DB` > the default SQLite file under `cwd`.

    The URL is normalised (bare `postgresql://` and `postgres://` use psycopg 3) and validated
    without writing to the disk or reaching the network. Only the default store's folder is ever
    created: a SQLite file named by `--db` / `EVOTRAINER_DB` must lie in a folder that exists (a typo in
    a path must not leave a new folder tree behind).

    Raises:
        DatabaseURLError: the chosen URL is unparsable, names an unsupported backend, or a SQLite file in
            a folder that does not exist.
    """
    if cli_value:
        raw, origin = cli_value, "--db"
    elif os.environ.get(ENV_VAR):
        raw, origin = os.environ[ENV_VAR], ENV_VAR
    else:
        return default_db_url(cwd)
    url = normalise_url(raw, origin)
    path = sqlite_path(url)
    if path is not None and not path.parent.is_dir():
        raise DatabaseURLError(
            f"SQLite store {path} (from {origin}): its folder {path.parent} does not exist; create it first "
            f"(mkdir -p {path.parent}) or name a file in an existing folder"
        )
    return url


def normalise_url(raw: str, origin: str = "--db/EVOTRAINER_DB") -> str:
    """Validate a store URL and return it in the form SQLAlchemy should use.

    Raises:
        DatabaseURLError: unparsable, unsupported scheme, or a Postgres URL with no database.
    """
    try:
        url = make_url(raw.strip())
    except ArgumentError:
        raise DatabaseURLError(f"invalid database URL {raw!r} (from {origin}): {_FIX}") from None
    backend, _, driver = url.drivername.partition("+")
    if backend in ("postgresql", "postgres") and driver in ("", "psycopg"):
        url = url.set(drivername="postgresql+psycopg")
        if not url.database:
            raise DatabaseURLError(f"database URL {_redact(url)} (from {origin}) names no database: {_FIX}")
    elif backend == "sqlite" and driver in ("", "pysqlite"):
        pass  # `sqlite://` (no file) is an in-memory store: useful in tests, gone at exit
    else:
        raise DatabaseURLError(
            f"unsupported database URL scheme {url.drivername!r} (from {origin}); only SQLite and "
            f"PostgreSQL (psycopg 3) are supported: {_FIX}"
        )
    return url.render_as_string(hide_password=False)


def _redact(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def sqlite_path(url: str) -> Path | None:
    """Return the file of a SQLite URL, or None for Postgres and in-memory SQLite."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def make_engine(url: str, *, create_dir: bool = True) -> Engine:
    """Build an engine for a validated URL (see `resolve_db_url`); connects lazily.

    Args:
        url: SQLite or Postgres URL.
        create_dir: create the parent folder of a SQLite file (False for read-only callers).

    Raises:
        DatabaseURLError: the URL is invalid.
    """
    url = normalise_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        connect_args: dict[str, Any] = {}
        if "connect_timeout" not in parsed.query:
            connect_args["connect_timeout"] = PG_CONNECT_TIMEOUT_S
        return create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)
    path = sqlite_path(url)
    if path is not None and create_dir:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DatabaseURLError(f"cannot create the folder of SQLite store {path}: {exc}; {_FIX}") from None
    engine = create_engine(parsed, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    # Take over transaction control from the sqlite3 module (SQLAlchemy's documented recipe), so
    # `_sqlite_on_begin` can start every transaction with BEGIN IMMEDIATE.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.close()


def _sqlite_on_begin(conn: Any) -> None:
    # IMMEDIATE takes the write lock up front: a read-then-write transaction can no longer fail with
    # SQLITE_BUSY on lock upgrade (which busy_timeout does not retry), so concurrent writers queue.
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def verify_connection(engine: Engine) -> None:
    """Connect once, so an unreachable server fails before any write.

    Raises:
        DatabaseURLError: the server cannot be reached, or the database does not exist.
    """
    try:
        with engine.connect():
            pass
    except OperationalError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else str(exc)
        raise DatabaseURLError(
            f"cannot connect to {_redact(engine.url)} ({reason}); check the server is up and the database "
            f"exists, or {_FIX}"
        ) from None


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """Yield an ORM session that commits on success and rolls back on any exception."""
    session = Session(engine, expire_on_commit=False)
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


class SchemaDriftError(RuntimeError):
    """`alembic check` found differences between the models and the migrated database."""


def alembic_config(url: str | None) -> Any:
    """Return an Alembic `Config` for the repo's `migrations/`, targeting `url`.

    The URL travels in `config.attributes` rather than `sqlalchemy.url`, so `%` in passwords is not
    subject to ini interpolation; `migrations/env.py` reads it from there first.
    """
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        cfg.attributes["db_url"] = normalise_url(url)
    return cfg


def _prepared(url: str) -> Any:
    """Validate the URL, reach the server, then return the Alembic config (nothing written before)."""
    url = normalise_url(url)
    engine = make_engine(url)
    try:
        verify_connection(engine)
    finally:
        engine.dispose()
    return alembic_config(url)


@contextmanager
def migration_lock(url: str) -> Iterator[None]:
    """Hold the store's migration lock while the block runs: one migrating process per database at a time.

    Postgres: a session-level advisory lock (`pg_advisory_lock`) on a connection of its own, released when
    the block ends (or the process dies: the server drops it with the connection). Two `evotrainer run`
    starting at once on one database then migrate one after the other, and the second finds nothing to
    do (without it one died with `UniqueViolation` on `CREATE TABLE alembic_version`).
    SQLite needs none: every transaction begins with `BEGIN IMMEDIATE`, and Alembic reads the current
    revision inside its transaction, so a second migrator waits for the first and then sees head.
    """
    if make_url(normalise_url(url)).get_backend_name() != "postgresql":
        yield
        return
    engine = make_engine(url)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            # Polled with pg_try_advisory_lock, never a blocking pg_advisory_lock: a statement waiting on the
            # lock holds a virtual transaction id, which LangGraph's CREATE INDEX CONCURRENTLY (run by the
            # lock holder) waits for: a deadlock Postgres does not detect.
            while not conn.exec_driver_sql(f"SELECT pg_try_advisory_lock({MIGRATION_LOCK_KEY})").scalar():
                time.sleep(MIGRATION_LOCK_POLL_S)
            try:
                yield
            finally:
                conn.exec_driver_sql(f"SELECT pg_advisory_unlock({MIGRATION_LOCK_KEY})")
    finally:
        engine.dispose()


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the store at `url` up to `revision` (default: head); creates an empty SQLite file's folder.

    Safe under concurrent callers (`migration_lock`). On Postgres the LangGraph checkpoint tables are set
    up under the same lock, since their own setup (create, then insert its version rows) is not safe
    against a second process doing the same; a session's later `setup()` then finds nothing to do.

    Raises:
        DatabaseURLError: the URL is invalid or the server unreachable (nothing is written).
    """
    from alembic import command

    cfg = _prepared(url)
    with _ALEMBIC_IN_PROCESS, migration_lock(url):
        command.upgrade(cfg, revision)
        if make_url(normalise_url(url)).get_backend_name() == "postgresql":
            _setup_checkpointer(url)


def _setup_checkpointer(url: str) -> None:
    """Create or migrate LangGraph's Postgres checkpoint tables (idempotent; call under `migration_lock`)."""
    from langgraph.checkpoint.postgres import PostgresSaver

    conn_string = make_url(normalise_url(url)).set(drivername="postgresql").render_as_string(hide_password=False)
    with PostgresSaver.from_conn_string(conn_string) as saver:
        saver.setup()


def downgrade(url: str, revision: str) -> None:
    """Migrate the store at `url` down to `revision` (`base` drops every store table).

    Raises:
        DatabaseURLError: the URL is invalid or the server unreachable.
    """
    from alembic import command

    cfg = _prepared(url)
    with _ALEMBIC_IN_PROCESS, migration_lock(url):
        command.downgrade(cfg, revision)


def check(url: str) -> None:
    """Compare the models with the migrated database (`alembic check`).

    Raises:
        DatabaseURLError: the URL is invalid or the server unreachable.
        SchemaDriftError: the database is behind head, or the models drifted from the migrations.
    """
    from alembic import command
    from alembic.util.exc import AutogenerateDiffsDetected, CommandError

    try:
        with _ALEMBIC_IN_PROCESS:
            command.check(_prepared(url))
    except AutogenerateDiffsDetected as exc:
        raise SchemaDriftError(f"models and migrations differ; write a revision: {exc}") from None
    except CommandError as exc:  # "Target database is not up to date."
        raise SchemaDriftError(f"{exc} Run `evotrainer db upgrade`.") from None


def head_revision() -> str:
    """Return the head revision id of `migrations/`."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config(None)).get_current_head()
    assert head is not None, f"no Alembic revisions under {MIGRATIONS_DIR}"
    return head


def current_revision(engine: Engine) -> str | None:
    """Return the revision the database at `engine` is migrated to (None: never migrated)."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
