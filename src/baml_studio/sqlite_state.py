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
a row the owner cannot decode              ``unusable`` (:meth:`SqliteState.decoded`), or
                                           left out of a scan with an ERROR log
                                           (:meth:`SqliteState.readable`)
=========================================  ================================================

A row that cannot be decoded (a file edited by hand, or written by a buggy version) fails only
what reads that row: the request for it, not the store, the other rows or the process start.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from baml_studio.apierrors import ApiError

log = logging.getLogger(__name__)

T = TypeVar("T")
Row = tuple[Any, ...]

ROW_ERRORS = (
    ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError, OverflowError,
    OSError,
)  # fmt: skip
"""What decoding a damaged row raises (``json.JSONDecodeError`` is a ``ValueError``; a time out
of range is an ``OverflowError``, or an ``OSError`` from ``datetime.fromtimestamp``)."""


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

    def decoded(self, decode: Callable[[Row], T], row: Row) -> T:
        """``decode(row)``; a row it cannot decode is ``unusable``, naming the row's key (its
        first column)."""
        try:
            return decode(row)
        except ROW_ERRORS as exc:
            raise self.spec.unusable(self._damaged(row, exc)) from exc

    def readable(self, decode: Callable[[Row], T], rows: Iterable[Row]) -> list[T]:
        """``decode`` of each row of a scan; a row it cannot decode is logged at ERROR and left
        out, so one damaged row does not stop the others."""
        out = []
        for row in rows:
            try:
                out.append(decode(row))
            except ROW_ERRORS as exc:
                log.error("%s; left out", self._damaged(row, exc))
        return out

    def _damaged(self, row: Row, exc: BaseException) -> str:
        key = repr(row[0] if row else None)[:80]
        reason = f"{type(exc).__name__}: {exc}"[:200]
        return f"{self.spec.kind} store {self.path}: row {key} cannot be read ({reason})"

    def close(self) -> None:
        with self._lock:
            self._conn.close()
