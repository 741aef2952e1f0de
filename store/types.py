"""Column types shared by the store models: closed value sets, UTC timestamps, JSON payloads.

Closed value sets are stored as plain strings guarded by named CHECK constraints
(`Enum(native_enum=False, create_constraint=True)`), so SQLite and Postgres accept and reject the same
values and adding a value is an ordinary Alembic migration (no Postgres `ALTER TYPE`). SQLAlchemy also
validates the value in Python before it is sent (`validate_strings=True`), so a typo fails at flush
with a `LookupError` naming the allowed values instead of storing garbage.

This module owns types only; it must not open connections.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal, get_args

from sqlalchemy import JSON, DateTime, Dialect, Enum
from sqlalchemy.types import TypeDecorator

from harness.failures import Outcome
from harness.manifest import BackendName as BackendName  # the backends, defined once (re-exported for models)
from store.vocab import SessionMode as SessionMode  # the session modes, defined once (re-exported for models)

PolicyKind = Literal["heuristic", "llm"]
SessionStatus = Literal["running", "finished", "failed", "interrupted"]
Decision = Literal["keep", "prune", "revert", "merge"]
DecisionOutcome = Literal["improvement", "regression", "mixed", "insufficient"]
Factor = Literal["reward", "filter", "data", "trainer", "diagnostic", "env"]
CandidateStatus = Literal[
    "proposed",
    "refused",
    "backtested",
    "backtest_failed",
    "training",
    "trained",
    "kept",
    "pruned",
    "merged",
    "reverted",
]
RunKind = Literal["pilot", "full"]
RunStatus = Literal["submitted", "running", "finished", "lost"]
OutcomeValue = Literal["ok", "candidate_error", "infra_error", "timeout", "spoof_detected"]
Verdict = Literal["pass", "fail", "inconclusive"]
Layer = Literal["score", "signal", "behaviour", "version"]
Severity = Literal["ok", "warning", "critical"]
CaseKind = Literal["pattern", "negative_evidence"]
PatchKind = Literal["template", "diff"]
SkillResult = Literal["win", "loss", "pending"]
SkillOrigin = Literal["seed", "learned", "user"]  # skills/seeds.py, learned from a merge, or saved by hand
Gate = Literal["launch", "promote"]
GateStatus = Literal["pending", "approved", "rejected"]

# The run/backtest outcome column must accept exactly the shared contract's values.
assert set(get_args(OutcomeValue)) == {o.value for o in Outcome}, "OutcomeValue drifted from diagnostics.Outcome"

ENUM_LENGTH = 32  # fixed, so adding a value never changes the column type


def enum_type(values: Any, name: str) -> Enum:
    """Return a portable string-enum type for a `Literal[...]` alias.

    Args:
        values: a `Literal[...]` alias; its arguments are the allowed values.
        name: the CHECK constraint's name (expanded by the naming convention to `ck_<table>_<name>`).
    """
    allowed = get_args(values)
    assert allowed and all(len(v) <= ENUM_LENGTH for v in allowed), f"bad enum values for {name}: {allowed}"
    return Enum(
        *allowed,
        name=name,
        native_enum=False,
        create_constraint=True,
        validate_strings=True,
        length=ENUM_LENGTH,
    )


class UTCDateTime(TypeDecorator[dt.datetime]):
    """A timezone-aware UTC timestamp on every backend.

    Postgres stores `timestamptz`; SQLite stores text without an offset, so values are normalised to
    UTC on the way in and read back with `tzinfo=UTC`. Naive datetimes are rejected: the caller must
    say which clock they come from.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        """Convert an aware datetime to UTC (naive on SQLite, which stores no offset)."""
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: pass an aware datetime (e.g. store.types.utcnow())")
        value = value.astimezone(dt.UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        """Attach UTC to values read back from SQLite; convert Postgres values to UTC."""
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC)


def utcnow() -> dt.datetime:
    """Return the current time as an aware UTC datetime (the default of every timestamp column)."""
    return dt.datetime.now(dt.UTC)


JSONPayload = JSON(none_as_null=True)
