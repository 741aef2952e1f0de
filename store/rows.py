"""The row helpers every repository module shares: fetch a row by key (or fail naming it), add a row.

Both take the SQLAlchemy `Session` explicitly; `add` flushes so the new row has its id and never commits
(the caller's `store.engine.session_scope` does). A missing row raises `NotFoundError` naming the table
and the key.
"""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy.orm import Session

from store.models import Base

RowT = TypeVar("RowT", bound=Base)


class NotFoundError(LookupError):
    """A row the caller named does not exist."""


def get(db: Session, model: type[RowT], key: Any) -> RowT:
    """Return the row of `model` with primary key `key`.

    Raises:
        NotFoundError: no such row.
    """
    row = db.get(model, key)
    if row is None:
        raise NotFoundError(f"no {model.__tablename__} row with id {key!r}")
    return row


def find(db: Session, model: type[RowT], key: Any) -> RowT | None:
    """Return the row of `model` with primary key `key`, or None."""
    return db.get(model, key)


def add(db: Session, row: RowT) -> RowT:
    """Add `row` and flush it (its id is set); the caller's scope commits."""
    db.add(row)
    db.flush()
    return row
