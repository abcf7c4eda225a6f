"""What the data plane's SQLite state files share: the query jobs (:mod:`.coordinator.jobs_store`)
and the erasures (:mod:`.erasure.store`).

One connection per file, shared by the threads of one process under a lock: WAL with
``synchronous=FULL`` (a committed change survives a crash), a busy timeout, the schema version
in ``PRAGMA user_version`` (0 is a new file; any version but the current one is refused), every
multi-statement change in one ``BEGIN IMMEDIATE`` transaction. SQLite's and the file system's
errors become the owner's typed errors (:class:`StoreSpec`), so no ``sqlite3`` type leaks out:

=========================================  ================================================
``sqlite3.OperationalError``, ``OSError``  ``unavailable`` (transient: locked, I/O error)
any other ``sqlite3.Error``                ``unusable`` (terminal)
an unknown schema version                  ``unusable``
=========================================  ================================================
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from baml_studio.apierrors import ApiError


@dataclass(frozen=True, slots=True)
class StoreSpec:
    """One kind of state file: its schema, and how it names its failures."""

    kind: str
    """What the file holds, as messages name it (``query job``: ``query job store PATH: …``)."""
    schema: str
    """``CREATE … IF NOT EXISTS`` statements separated by ``;``."""
    version: int
    """The schema version (``PRAGMA user_version``) this code reads and writes."""
    unusable: type[ApiError]
    """Terminal: a file this version cannot read."""
    unavailable: type[ApiError]
    """Transient: SQLite was locked or failed with an I/O error."""

    def wrap(self, exc: sqlite3.Error | OSError, path: Path) -> ApiError:
        """``exc`` (met while using the file at ``path``) as one of the two errors."""
        if isinstance(exc, sqlite3.OperationalError | OSError):
            return self.unavailable(f"{self.kind} store {path}: {exc}")
        return self.unusable(f"{self.kind} store {path}: {type(exc).__name__}: {exc}")


class SqliteState:
    """The state file at ``path`` (its directory is created) of the kind ``spec``, its schema
    created or checked."""

    def __init__(self, path: Path, spec: StoreSpec, *, busy_timeout_s: float = 10.0) -> None:
        self.path = path
        self.spec = spec
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            raise spec.wrap(exc, self.path) from exc
        try:
            self._initialise()
        except BaseException:
            self._conn.close()
            raise

    def _initialise(self) -> None:
        spec = self.spec
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        with self.transaction() as conn:
            found = conn.execute("PRAGMA user_version").fetchone()[0]
            if found not in (0, spec.version):
                raise spec.unusable(
                    f"{self.path}: {spec.kind} schema version {found} is not supported (this "
                    f"version reads {spec.version}); use a newer baml-studio or move the file"
                )
            for statement in spec.schema.split(";"):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version={spec.version}")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` … ``COMMIT`` under the lock; rolled back when the block raises."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self.spec.wrap(exc, self.path) from exc
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException as exc:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise self.spec.wrap(exc, self.path) from exc
                raise

    def execute(self, sql: str, params: tuple[Any, ...]) -> tuple[int, list[Any]]:
        """One autocommit statement, durable on return: ``(rowcount, rows)``."""
        with self._lock:
            try:
                cursor = self._conn.execute(sql, params)
                return cursor.rowcount, cursor.fetchall()
            except sqlite3.Error as exc:
                raise self.spec.wrap(exc, self.path) from exc

    def close(self) -> None:
        with self._lock:
            self._conn.close()
