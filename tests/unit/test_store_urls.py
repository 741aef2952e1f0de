"""Store URL resolution (`--db` > `EVOTRAINER_DB` > default) and validation, without I/O."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from store.engine import DatabaseURLError, default_db_url, make_engine, normalise_url, resolve_db_url, sqlite_path
from store.types import UTCDateTime


def test_default_is_a_sqlite_file_under_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVOTRAINER_DB", raising=False)
    url = resolve_db_url(None, tmp_path)
    assert url == f"sqlite:///{tmp_path.resolve()}/.evotrainer/evotrainer.db" == default_db_url(tmp_path)
    assert sqlite_path(url) == tmp_path.resolve() / ".evotrainer" / "evotrainer.db"
    assert list(tmp_path.iterdir()) == [], "resolving a URL must not touch the disk"


def test_explicit_beats_environment_beats_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVOTRAINER_DB", f"sqlite:///{tmp_path}/env.db")
    assert resolve_db_url(None, tmp_path) == f"sqlite:///{tmp_path}/env.db"
    assert resolve_db_url(f"sqlite:///{tmp_path}/cli.db", tmp_path) == f"sqlite:///{tmp_path}/cli.db"
    monkeypatch.setenv("EVOTRAINER_DB", "")
    assert resolve_db_url(None, tmp_path) == default_db_url(tmp_path)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("postgresql://u:p@h:5432/db", "postgresql+psycopg://u:p@h:5432/db"),
        ("postgres://u@h/db", "postgresql+psycopg://u@h/db"),
        (
            "postgresql+psycopg://u@h/db?options=-csearch_path%3Dx",
            "postgresql+psycopg://u@h/db?options=-csearch_path%3Dx",
        ),
        ("sqlite:///rel/path.db", "sqlite:///rel/path.db"),
        ("sqlite://", "sqlite://"),
    ],
)
def test_normalise_accepts_sqlite_and_psycopg_postgres(raw: str, expected: str) -> None:
    assert normalise_url(raw) == expected


@pytest.mark.parametrize(
    "raw",
    ["mysql://u@h/db", "not a url", "postgresql+psycopg2://u@h/db", "sqlite+aiosqlite:///x.db", "postgresql://u@h"],
)
def test_bad_urls_name_the_option_the_variable_and_the_fix(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(DatabaseURLError) as cli_error:
        resolve_db_url(raw, Path("/nonexistent"))
    assert "(from --db)" in str(cli_error.value) and "EVOTRAINER_DB" in str(cli_error.value)
    assert "sqlite:///" in str(cli_error.value) and "\n" not in str(cli_error.value)
    monkeypatch.setenv("EVOTRAINER_DB", raw)
    with pytest.raises(DatabaseURLError, match=r"\(from EVOTRAINER_DB\)"):
        resolve_db_url(None, Path("/nonexistent"))


def test_passwords_are_kept_in_the_url_but_hidden_in_errors() -> None:
    assert normalise_url("postgresql://u:s3cret@h/db") == "postgresql+psycopg://u:s3cret@h/db"
    with pytest.raises(DatabaseURLError) as error:
        normalise_url("postgresql://u:s3cret@h")
    assert "s3cret" not in str(error.value)


def test_make_engine_on_an_invalid_url_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(DatabaseURLError):
        make_engine(f"mysql:///{tmp_path}/x.db")
    assert list(tmp_path.iterdir()) == []


def test_utc_timestamps_convert_and_reject_naive_values() -> None:
    from sqlalchemy.dialects import postgresql, sqlite

    col = UTCDateTime()
    paris = dt.datetime(2026, 5, 1, 14, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert col.process_bind_param(paris, sqlite.dialect()) == dt.datetime(2026, 5, 1, 12, 0)
    assert col.process_bind_param(paris, postgresql.dialect()) == dt.datetime(2026, 5, 1, 12, 0, tzinfo=dt.UTC)
    back = col.process_result_value(dt.datetime(2026, 5, 1, 12, 0), sqlite.dialect())
    assert back == paris and back is not None and back.tzinfo == dt.UTC
    with pytest.raises(ValueError, match="naive"):
        col.process_bind_param(dt.datetime(2026, 5, 1), sqlite.dialect())
