"""The database adapter under the store: engines for the three backends, error translation and
the migration runner.

Backends: ``sqlite:///path`` (embedded; WAL, a busy timeout, writers serialised with
``BEGIN IMMEDIATE``), ``postgresql+psycopg://...`` and ``mysql+pymysql://...`` (PlanetScale).
Every SQLAlchemy or driver error leaving this package goes through :func:`translated_errors`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.util.exc import CommandError
from sqlalchemy import Connection, Engine, create_engine, event, make_url, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    DisconnectionError,
    InterfaceError,
    NoSuchModuleError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.pool import ConnectionPoolEntry

from baml_studio.control.metastore.errors import (
    InvalidArgument,
    MetastoreError,
    MetastoreUnavailable,
)

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
"""The Alembic script directory shipped inside the package."""

BACKENDS = ("sqlite", "postgresql", "mysql")
BUSY_TIMEOUT_S = 30
"""SQLite: how long a writer waits for another writer before giving up (transient)."""

CONNECT_TIMEOUT_S = 10
"""PostgreSQL and MySQL: how long to wait for a connection before giving up (transient)."""

WRITE = "baml_studio_metastore_write"
"""Execution option marking a connection whose transaction writes (SQLite: BEGIN IMMEDIATE)."""

_PG_MIGRATION_LOCK = 0x62616D6C5F6D73
"""PostgreSQL advisory lock key held while migrating, so concurrent opens migrate one at a time."""


def parse_url(url: str) -> URL:
    """``url`` as a SQLAlchemy URL of a supported backend, else :class:`InvalidArgument`."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise InvalidArgument(
            f"metastore URL {url!r} is not a database URL; use e.g. "
            "'sqlite:///data/metastore.db', 'postgresql+psycopg://user@host/db' or "
            "'mysql+pymysql://user@host/db'"
        ) from exc
    if parsed.get_backend_name() not in BACKENDS:
        raise InvalidArgument(
            f"metastore backend {parsed.get_backend_name()!r} is not supported; "
            f"use one of {', '.join(BACKENDS)}"
        )
    return parsed


def sqlite_url(path: Path) -> str:
    """The URL of the SQLite metastore file at ``path``."""
    return URL.create("sqlite", database=str(path)).render_as_string()


def create_metastore_engine(url: str) -> Engine:
    """An engine for ``url`` configured for the metastore (no connection is opened yet)."""
    parsed = parse_url(url)
    try:
        if parsed.get_backend_name() == "sqlite":
            return _sqlite_engine(parsed)
        return create_engine(
            parsed,
            pool_pre_ping=True,
            connect_args={"connect_timeout": CONNECT_TIMEOUT_S},
        )
    except (NoSuchModuleError, ImportError) as exc:
        raise InvalidArgument(
            f"no database driver for {parsed.drivername!r}; use 'postgresql+psycopg' or "
            "'mysql+pymysql'"
        ) from exc


def _sqlite_engine(parsed: URL) -> Engine:
    database = parsed.database
    if database and database != ":memory:" and not database.startswith("file:"):
        try:
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise MetastoreUnavailable(
                f"cannot create the directory of metastore {database!r}: {exc}"
            ) from exc
    engine = create_engine(parsed, connect_args={"timeout": BUSY_TIMEOUT_S})
    event.listen(engine, "connect", _sqlite_connect)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _sqlite_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
    # Take transaction control from the sqlite3 module, so _sqlite_begin decides how to BEGIN.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_S * 1000}")
    finally:
        cursor.close()


def _sqlite_begin(connection: Connection) -> None:
    # A deferred transaction that reads and then writes fails at once when another writer
    # committed in between; BEGIN IMMEDIATE takes the write lock first and waits for it.
    immediate = connection.get_execution_options().get(WRITE, False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


@contextmanager
def translated_errors() -> Iterator[None]:
    """Re-raise SQLAlchemy and driver errors as :class:`MetastoreError` types."""
    try:
        yield
    except (OperationalError, InterfaceError, DisconnectionError, PoolTimeout) as exc:
        raise MetastoreUnavailable(
            f"the metastore is unavailable: {_reason(exc)}; check that the database is "
            "running and reachable, then retry"
        ) from exc
    except SQLAlchemyError as exc:
        raise MetastoreError(f"metastore operation failed: {_reason(exc)}") from exc


def _reason(exc: SQLAlchemyError) -> str:
    # The driver's own message: SQLAlchemy's text adds the statement and its parameters.
    source: BaseException = exc.orig if isinstance(exc, DBAPIError) and exc.orig else exc
    lines = str(source).strip().splitlines()
    return lines[0] if lines else type(source).__name__


def alembic_config() -> Config:
    """An Alembic configuration pointing at the packaged migrations (no ini file)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def upgrade_to_head(engine: Engine) -> None:
    """Run every migration not yet applied, in one transaction where the backend allows."""
    config = alembic_config()
    with translated_errors(), engine.connect() as connection:
        connection.execution_options(**{WRITE: True})
        with connection.begin():
            if engine.dialect.name == "postgresql":
                connection.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK}
                )
            config.attributes["connection"] = connection
            try:
                command.upgrade(config, "head")
            except CommandError as exc:
                raise MetastoreError(
                    f"cannot migrate the metastore: {exc}; it may have been created by a newer "
                    "baml-studio, upgrade this one"
                ) from exc
