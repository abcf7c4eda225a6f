"""The embedded projection queue: SQS Standard semantics in one SQLite database file.

Durability: WAL journal with ``synchronous=FULL``, so a send, delete or visibility change that has
returned is on disk and survives SIGKILL (and power loss). Every state change is one atomic
statement or one ``BEGIN IMMEDIATE`` transaction, so any number of threads and processes may share
the file. Receive leases messages with a single ``UPDATE … RETURNING``.

Long polling re-tries the receive until ``wait_s`` runs out. Sends from this process wake waiters
at once (a condition variable per file and queue); sends from other processes are seen within
``poll_interval_s``.

Times (visibility, delay, retention) come from an injectable wall ``clock``; the long-poll
deadline uses a separate ``monotonic`` clock, so tests can move message time without sleeping.
"""

from __future__ import annotations

import copy
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from baml_studio.queue.config import DEAD_LETTER_SUFFIX, QueueSettings, SqliteQueueConfig
from baml_studio.queue.errors import (
    NoDeadLetterQueue,
    QueueError,
    QueueRequestFailed,
    QueueUnavailable,
    ReceiptInvalid,
)
from baml_studio.queue.port import (
    Message,
    Queue,
    check_reason,
    check_receive,
    check_send,
    check_visibility,
)

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS queue_messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    id TEXT NOT NULL UNIQUE,
    body TEXT NOT NULL,
    sent_at REAL NOT NULL,
    visible_at REAL NOT NULL,
    receive_count INTEGER NOT NULL DEFAULT 0,
    receipt TEXT UNIQUE,
    dead_letter_reason TEXT
);
CREATE INDEX IF NOT EXISTS queue_messages_visible ON queue_messages (queue, visible_at);
"""

_LEASE = """
UPDATE queue_messages
SET receipt = lower(hex(randomblob(16))), visible_at = :until, receive_count = receive_count + 1
WHERE seq IN (
    SELECT seq FROM queue_messages
    WHERE queue = :queue AND visible_at <= :now
    ORDER BY seq LIMIT :limit
)
RETURNING seq, id, receipt, body, receive_count, sent_at, dead_letter_reason
"""

Clock = Callable[[], float]
"""Returns seconds: unix time for ``clock``, any monotonic origin for ``monotonic``."""


class _Wakeup:
    """In-process wakeup for long polls: a send bumps ``sends`` and notifies."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.sends = 0

    def notify(self) -> None:
        with self.condition:
            self.sends += 1
            self.condition.notify_all()


_WAKEUPS: dict[tuple[str, str], _Wakeup] = {}
_WAKEUPS_LOCK = threading.Lock()


def _wakeup_for(path: Path, queue: str) -> _Wakeup:
    key = (os.path.realpath(path), queue)
    with _WAKEUPS_LOCK:
        return _WAKEUPS.setdefault(key, _Wakeup())


class _Database:
    """One connection to the queue file, shared by a queue and its dead-letter queue."""

    def __init__(self, path: Path, busy_timeout_s: float) -> None:
        self.path = path
        self.lock = threading.Lock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(
                path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            raise _wrap(exc, path) from exc
        try:
            self._initialise()
        except sqlite3.Error as exc:
            self.conn.close()
            raise _wrap(exc, path) from exc
        except BaseException:
            self.conn.close()
            raise

    def _initialise(self) -> None:
        """WAL and full sync on this connection; create or check the schema."""
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        with self.transaction():
            version = self.conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                raise QueueError(
                    f"{self.path}: queue schema version {version} is not supported (this version "
                    f"reads {SCHEMA_VERSION}); use a newer baml-studio or a new queue file"
                )
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self.conn.execute(statement)
            self.conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` … ``COMMIT`` under the in-process lock; errors become ours."""
        with self.lock:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise _wrap(exc, self.path) from exc
            try:
                yield self.conn
                self.conn.execute("COMMIT")
            except BaseException as exc:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise _wrap(exc, self.path) from exc
                raise

    def execute(self, sql: str, params: dict[str, Any]) -> tuple[int, list[Any]]:
        """One autocommit statement, atomic and durable on return: ``(rowcount, rows)``."""
        with self.lock:
            try:
                cursor = self.conn.execute(sql, params)
                return cursor.rowcount, cursor.fetchall()
            except sqlite3.Error as exc:
                raise _wrap(exc, self.path) from exc

    def close(self) -> None:
        with self.lock:
            self.conn.close()


def _wrap(exc: BaseException, path: Path) -> QueueError:
    if isinstance(exc, sqlite3.OperationalError | OSError):
        return QueueUnavailable(f"queue database {path}: {exc}")
    return QueueRequestFailed(type(exc).__name__, f"queue database {path}: {exc}")


class SqliteQueue:
    """A :class:`~baml_studio.queue.port.Queue` in a SQLite file; see the module docstring."""

    def __init__(
        self,
        path: Path,
        name: str = "projection",
        settings: QueueSettings | None = None,
        *,
        clock: Clock = time.time,
        monotonic: Clock = time.monotonic,
        poll_interval_s: float = 0.05,
        busy_timeout_s: float = 10.0,
    ) -> None:
        self._settings = settings or QueueSettings()
        self._db = _Database(Path(path), busy_timeout_s)
        self._name = name
        self._dead_letter: str | None = name + DEAD_LETTER_SUFFIX
        self._retention_s = self._settings.retention_s
        self._clock = clock
        self._monotonic = monotonic
        self._poll_interval_s = poll_interval_s
        self._wakeup = _wakeup_for(self._db.path, name)
        self._owns_db = True

    @classmethod
    def open(cls, config: SqliteQueueConfig, *, clock: Clock = time.time) -> SqliteQueue:
        """Open (creating when missing) the queue a :class:`SqliteQueueConfig` names."""
        return cls(
            config.path,
            config.name,
            config.settings,
            clock=clock,
            poll_interval_s=config.poll_interval_s,
            busy_timeout_s=config.busy_timeout_s,
        )

    @property
    def name(self) -> str:
        return self._name

    def send(self, body: str, *, delay_s: int = 0) -> str:
        check_send(body, delay_s)
        message_id = str(uuid.uuid4())
        now = self._clock()
        self._db.execute(
            "INSERT INTO queue_messages (queue, id, body, sent_at, visible_at) "
            "VALUES (:queue, :id, :body, :now, :visible_at)",
            {"queue": self._name, "id": message_id, "body": body, "now": now,
             "visible_at": now + delay_s},
        )  # fmt: skip
        self._wakeup.notify()
        return message_id

    def receive(
        self,
        max_messages: int = 10,
        wait_s: float = 0,
        visibility_timeout_s: int | None = None,
    ) -> list[Message]:
        check_receive(max_messages, wait_s, visibility_timeout_s)
        timeout = (
            self._settings.visibility_timeout_s
            if visibility_timeout_s is None
            else visibility_timeout_s
        )
        deadline = self._monotonic() + wait_s
        while True:
            seen = self._wakeup.sends
            messages = self._receive_once(max_messages, timeout)
            remaining = deadline - self._monotonic()
            if messages or remaining <= 0:
                return messages
            with self._wakeup.condition:
                if self._wakeup.sends == seen:
                    self._wakeup.condition.wait(min(remaining, self._poll_interval_s))

    def _receive_once(self, max_messages: int, visibility_timeout_s: int) -> list[Message]:
        now = self._clock()
        with self._db.transaction() as conn:
            conn.execute(
                "DELETE FROM queue_messages WHERE queue = ? AND sent_at <= ?",
                (self._name, now - self._retention_s),
            )
            if self._dead_letter is not None:
                conn.execute(
                    "UPDATE queue_messages SET queue = ?, receipt = NULL, visible_at = ? "
                    "WHERE queue = ? AND visible_at <= ? AND receive_count >= ?",
                    (self._dead_letter, now, self._name, now, self._settings.max_receive_count),
                )
            rows = conn.execute(
                _LEASE,
                {"queue": self._name, "now": now, "until": now + visibility_timeout_s,
                 "limit": max_messages},
            ).fetchall()  # fmt: skip
        rows.sort(key=lambda row: row[0])
        return [
            Message(
                id=row[1],
                receipt=row[2],
                body=row[3],
                receive_count=row[4],
                sent_at=row[5],
                dead_letter_reason=row[6],
            )
            for row in rows
        ]

    def delete(self, receipt: str) -> None:
        changed, _ = self._db.execute(
            "DELETE FROM queue_messages WHERE queue = :queue AND receipt = :receipt",
            {"queue": self._name, "receipt": receipt},
        )
        if changed == 0:
            raise ReceiptInvalid(receipt)

    def change_visibility(self, receipt: str, timeout_s: int) -> None:
        check_visibility(timeout_s)
        changed, _ = self._db.execute(
            "UPDATE queue_messages SET visible_at = :until "
            "WHERE queue = :queue AND receipt = :receipt",
            {"until": self._clock() + timeout_s, "queue": self._name, "receipt": receipt},
        )
        if changed == 0:
            raise ReceiptInvalid(receipt)
        if timeout_s == 0:
            self._wakeup.notify()

    def send_to_dead_letter(self, message: Message, reason: str) -> None:
        if self._dead_letter is None:
            raise NoDeadLetterQueue(f"queue {self._name!r} is a dead-letter queue itself")
        check_reason(reason)
        changed, _ = self._db.execute(
            "UPDATE queue_messages SET queue = :dlq, receipt = NULL, visible_at = :now, "
            "dead_letter_reason = :reason WHERE queue = :queue AND receipt = :receipt",
            {"dlq": self._dead_letter, "now": self._clock(), "reason": reason,
             "queue": self._name, "receipt": message.receipt},
        )  # fmt: skip
        if changed == 0:
            raise ReceiptInvalid(message.receipt)
        _wakeup_for(self._db.path, self._dead_letter).notify()

    def dead_letter_queue(self) -> SqliteQueue:
        if self._dead_letter is None:
            raise NoDeadLetterQueue(f"queue {self._name!r} is a dead-letter queue itself")
        dlq = copy.copy(self)
        dlq._name = self._dead_letter
        dlq._dead_letter = None
        dlq._retention_s = self._settings.dead_letter_retention_s
        dlq._wakeup = _wakeup_for(self._db.path, self._dead_letter)
        dlq._owns_db = False
        return dlq

    def approximate_count(self) -> int:
        _, rows = self._db.execute(
            "SELECT count(*) FROM queue_messages WHERE queue = :queue AND sent_at > :cutoff",
            {"queue": self._name, "cutoff": self._clock() - self._retention_s},
        )
        return int(rows[0][0])

    def close(self) -> None:
        """Close the database connection (a dead-letter view leaves it to its parent)."""
        if self._owns_db:
            self._db.close()

    def __enter__(self) -> SqliteQueue:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


if TYPE_CHECKING:
    _conforms: type[Queue] = SqliteQueue  # mypy checks SqliteQueue against the port
