"""PostgreSQL and MariaDB as test peers of the metastore conformance suite (DESIGN.md §4).

The development machine and CI run both servers on 127.0.0.1 (PostgreSQL :5432, trust auth,
user ``postgres``; MariaDB :3306, user ``root`` without password). Per test session, each server
gets one fresh database ``bsms_<hex>``, dropped at the end. A server that does not answer makes
its tests FAIL with the command that starts it; they are never skipped.

Fixtures (a test module loads them with ``pytest_plugins = ("metastore_servers",)``):

``metastore_url``        parametrized over sqlite, postgresql and mysql: a migrated, empty store
``fresh_metastore_url``  the same three, with no tables at all (not even ``alembic_version``)
``metastore_clock``      a settable :class:`Clock` starting at :data:`T0`
``metastore``            the open :class:`Metastore` at ``metastore_url``, on ``metastore_clock``

Test modules also import :data:`T0` and :class:`Clock` from here before pytest loads it as a
plugin, so it opts out of assertion rewriting (it asserts nothing): PYTEST_DONT_REWRITE.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from baml_studio.control.metastore import Metastore, sqlite_url
from baml_studio.control.metastore.tables import metadata

BACKENDS = ("sqlite", "postgresql", "mysql")
T0 = 1_700_000_000
"""The fake clock's start, Unix seconds."""


class Clock:
    """A clock the test moves by hand (``clock.now += 60``)."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class Server:
    label: str
    admin_url: str
    """Where to run ``CREATE DATABASE``; the test database replaces its database name."""

    start_command: str

    def check_reachable(self) -> None:
        url = make_url(self.admin_url)
        try:
            with socket.create_connection((url.host or "127.0.0.1", url.port or 0), timeout=3):
                pass
        except OSError as exc:
            pytest.fail(
                f"{self.label} is not reachable at {url.host}:{url.port} ({exc}); the metastore "
                f"conformance suite needs it: start it with `{self.start_command}`",
                pytrace=False,
            )

    def execute(self, statement: str) -> None:
        engine = create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                connection.execute(text(statement))
        except SQLAlchemyError as exc:
            pytest.fail(f"{self.label} refused {statement!r}: {exc}", pytrace=False)
        finally:
            engine.dispose()

    def database_url(self, name: str) -> str:
        return make_url(self.admin_url).set(database=name).render_as_string(hide_password=False)


POSTGRES = Server(
    "PostgreSQL",
    "postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
    "sudo service postgresql start",
)
MARIADB = Server(
    "MariaDB",
    "mysql+pymysql://root@127.0.0.1:3306/test",
    "sudo service mariadb start",
)


def _session_database(server: Server) -> Iterator[str]:
    server.check_reachable()
    name = f"bsms_{uuid.uuid4().hex[:12]}"
    server.execute(f"CREATE DATABASE {name}")
    try:
        yield server.database_url(name)
    finally:
        force = " WITH (FORCE)" if server is POSTGRES else ""
        server.execute(f"DROP DATABASE IF EXISTS {name}{force}")


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """URL of this session's PostgreSQL database."""
    yield from _session_database(POSTGRES)


@pytest.fixture(scope="session")
def mariadb_database() -> Iterator[str]:
    """URL of this session's MariaDB database."""
    yield from _session_database(MARIADB)


def _backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    backend = request.param
    if backend == "sqlite":
        path = tmp_path / "metastore" / "metastore.db"
        path.parent.mkdir()
        return sqlite_url(path)
    fixture = "postgres_database" if backend == "postgresql" else "mariadb_database"
    return str(request.getfixturevalue(fixture))


def drop_everything(url: str) -> None:
    """Drop every table in the database at ``url`` (the store's and Alembic's)."""
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            metadata.drop_all(connection, checkfirst=True)
            if inspect(connection).has_table("alembic_version"):
                connection.execute(text("DROP TABLE alembic_version"))
    finally:
        engine.dispose()


def empty_store(url: str) -> None:
    """Migrate the database at ``url`` to head and delete every row of every table."""
    with Metastore.open(url) as store, store.write() as connection:
        for table in reversed(metadata.sorted_tables):
            connection.execute(table.delete())


@pytest.fixture(params=BACKENDS)
def metastore_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated metastore with no rows, on each backend in turn."""
    url = _backend_url(request, tmp_path)
    empty_store(url)
    return url


@pytest.fixture(params=BACKENDS)
def fresh_metastore_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database with no tables at all, on each backend in turn."""
    url = _backend_url(request, tmp_path)
    if request.param != "sqlite":
        drop_everything(url)
    return url


@pytest.fixture
def metastore_clock() -> Clock:
    return Clock()


@pytest.fixture
def metastore(metastore_url: str, metastore_clock: Clock) -> Iterator[Metastore]:
    with Metastore.open(metastore_url, clock=metastore_clock) as opened:
        yield opened


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
