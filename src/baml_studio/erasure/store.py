"""The durable record of erasures: one SQLite file (:mod:`baml_studio.sqlite_state`).

A row per erasure holds its scope, canonical selector, idempotency key, the resolved streams,
the public ``state``, the internal ``step`` it has reached, the persisted plan (once planned),
``streams_deleted``, the attempts and last transient failure of the current step, the error of a
failed erasure and two unix times. Every change is one conditional ``UPDATE`` (``… WHERE state
= 'running'``), so a final erasure never moves again.

Restart rule (unlike query jobs): an erasure found ``queued`` or ``running`` when the file opens
is *resumed* from its recorded step (:attr:`ErasureStore.unfinished`), because every step is
idempotent and an erasure must finish, not fail, after a crash.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, get_args

from baml_studio.erasure.errors import ErasureStoreError, ErasureStoreUnavailable
from baml_studio.erasure.selector import rfc3339
from baml_studio.gateway.config import Scope
from baml_studio.publisher.state import new_ulid
from baml_studio.sqlite_state import SqliteState, StoreSpec

ErasureState = Literal["queued", "running", "succeeded", "failed"]
Step = Literal["plan", "rehome", "delete_objects", "erase_facts", "erase_lance", "verify", "done"]
STEPS: tuple[Step, ...] = (
    "plan",
    "rehome",
    "delete_objects",
    "erase_facts",
    "erase_lance",
    "verify",
    "done",
)
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS erasures (
    erasure_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    project TEXT NOT NULL,
    environment TEXT NOT NULL,
    selector TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    state TEXT NOT NULL,
    step TEXT NOT NULL,
    streams TEXT NOT NULL,
    plan TEXT,
    streams_deleted INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    last_error TEXT,
    error TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS erasures_idempotency
    ON erasures (tenant, project, environment, idempotency_key);
CREATE INDEX IF NOT EXISTS erasures_state ON erasures (state, created_at)
"""
_COLUMNS = (
    "erasure_id, tenant, project, environment, selector, idempotency_key, state, step, streams, "
    "plan, streams_deleted, attempts, last_error, error, created_at, updated_at"
)


_SPEC = StoreSpec("erasure", _SCHEMA, SCHEMA_VERSION, ErasureStoreError, ErasureStoreUnavailable)


def new_erasure_id(now: float) -> str:
    """``era_`` and a ULID (sortable by creation time)."""
    return "era_" + new_ulid(now)


@dataclass(frozen=True, slots=True)
class ErasureRecord:
    """One stored erasure."""

    erasure_id: str
    scope: Scope
    selector: str
    """The canonical ``ErasureRequest`` JSON (compared for idempotency)."""
    idempotency_key: str
    state: ErasureState
    step: Step
    """The next step to run (``done`` once finished)."""
    streams: tuple[str, ...]
    """The euids the selector resolved to (``streams_matched`` is their number)."""
    plan: dict[str, Any] | None
    """The persisted :class:`~.plan.ErasurePlan` JSON, from step ``rehome`` on."""
    streams_deleted: int
    attempts: int
    """Failed attempts of the current step."""
    last_error: str | None
    error: dict[str, Any] | None
    """A ``QueryOutcomeError``; only when ``state`` is ``failed``."""
    created_at: float
    updated_at: float

    def to_json(self) -> dict[str, Any]:
        """The ``Erasure`` of openapi.yaml."""
        out: dict[str, Any] = {
            "erasure_id": self.erasure_id,
            "state": self.state,
            "selector": json.loads(self.selector),
            "streams_matched": len(self.streams),
            "streams_deleted": self.streams_deleted,
            "created_at": rfc3339_at(self.created_at),
            "updated_at": rfc3339_at(self.updated_at),
        }
        if self.state == "failed" and self.error is not None:
            out["error"] = self.error
        return out


def rfc3339_at(t: float) -> str:
    """Unix time ``t`` as RFC 3339 UTC."""
    return rfc3339(datetime.fromtimestamp(t, UTC))


def _streams(text: Any) -> list[str]:
    """The ``streams`` column: a JSON list of euids."""
    streams = json.loads(text)
    if not isinstance(streams, list) or not all(isinstance(s, str) for s in streams):
        raise TypeError(f"streams is not a list of text: {text!r:.60}")
    return streams


def _streams_of(row: tuple[Any, ...]) -> list[str]:
    return _streams(row[0])


def _streams_and_plan(row: tuple[Any, ...]) -> tuple[list[str], dict[str, Any]]:
    plan = json.loads(row[1])
    if not isinstance(plan, dict):
        raise TypeError(f"plan is not an object: {row[1]!r:.60}")
    return _streams(row[0]), plan


def _record(row: tuple[Any, ...]) -> ErasureRecord:
    """A stored row as an erasure; what :meth:`ErasureRecord.to_json` reads is checked here,
    so a damaged row fails as it is read (:meth:`SqliteState.decoded`)."""
    if not isinstance(json.loads(row[4]), dict):
        raise TypeError(f"selector is not an object: {row[4]!r:.60}")
    if row[6] not in get_args(ErasureState) or row[7] not in get_args(Step):
        raise ValueError(f"state {row[6]!r:.40} or step {row[7]!r:.40} is not one of this version")
    plan, error = (json.loads(row[i]) if row[i] is not None else None for i in (9, 13))
    if not isinstance(plan, dict | None) or not isinstance(error, dict | None):
        raise TypeError("plan or error is not a JSON object")
    record = ErasureRecord(
        row[0],
        Scope(row[1], row[2], row[3]),
        row[4],
        row[5],
        row[6],
        row[7],
        tuple(_streams(row[8])),
        plan,
        int(row[10]),
        int(row[11]),
        row[12],
        error,
        float(row[14]),
        float(row[15]),
    )
    record.to_json()
    return record


class ErasureStore:
    """The erasures file at ``path``, shared by the threads of one process."""

    def __init__(
        self, path: Path, *, clock: Callable[[], float] = time.time, busy_timeout_s: float = 10.0
    ) -> None:
        self.path = Path(path)
        self._clock = clock
        self._db = SqliteState(self.path, _SPEC, busy_timeout_s=busy_timeout_s)

    # --- reads ---------------------------------------------------------------------------------

    def get(self, erasure_id: str) -> ErasureRecord | None:
        _, rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM erasures WHERE erasure_id = ?", (erasure_id,)
        )
        return self._db.decoded(_record, rows[0]) if rows else None

    def find(self, scope: Scope, idempotency_key: str) -> ErasureRecord | None:
        """The erasure of ``scope`` created with ``idempotency_key``, if any."""
        _, rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM erasures WHERE tenant = ? AND project = ? "
            "AND environment = ? AND idempotency_key = ?",
            (scope.tenant, scope.project, scope.environment, idempotency_key),
        )
        return self._db.decoded(_record, rows[0]) if rows else None

    def unfinished(self) -> list[ErasureRecord]:
        """Every ``queued`` or ``running`` erasure, oldest first (the order they run in)."""
        _, rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM erasures WHERE state IN ('queued', 'running') "
            "ORDER BY created_at, erasure_id",
            (),
        )
        return self._db.readable(_record, rows)

    def erased_streams(self, scope: Scope) -> set[str]:
        """Every stream an erasure of ``scope`` resolved to, in any state."""
        _, rows = self._db.execute(
            "SELECT streams FROM erasures WHERE tenant = ? AND project = ? AND environment = ?",
            (scope.tenant, scope.project, scope.environment),
        )
        # a damaged row fails the call: leaving its streams out would let them be projected again
        return {euid for row in rows for euid in self._db.decoded(_streams_of, row)}

    def earlier_plans(self, scope: Scope, streams: Iterable[str]) -> list[dict[str, Any]]:
        """The plans of earlier erasures of ``scope`` that erased any of ``streams`` (their
        evidence may be gone now, so their root ids and doomed CIDs are all that is left)."""
        wanted = set(streams)
        _, rows = self._db.execute(
            "SELECT streams, plan FROM erasures WHERE tenant = ? AND project = ? "
            "AND environment = ? AND plan IS NOT NULL ORDER BY created_at",
            (scope.tenant, scope.project, scope.environment),
        )
        decoded = (self._db.decoded(_streams_and_plan, row) for row in rows)
        return [plan for streams_of, plan in decoded if wanted & set(streams_of)]

    # --- writes --------------------------------------------------------------------------------

    def create(
        self, scope: Scope, selector: str, idempotency_key: str, streams: tuple[str, ...]
    ) -> ErasureRecord:
        """A new ``queued`` erasure at step ``plan``, or the one already holding the key."""
        now = self._clock()
        record = ErasureRecord(
            new_erasure_id(now), scope, selector, idempotency_key, "queued", "plan",
            tuple(streams), None, 0, 0, None, None, now, now,
        )  # fmt: skip
        with self._db.transaction() as conn:
            held = conn.execute(
                f"SELECT {_COLUMNS} FROM erasures WHERE tenant = ? AND project = ? "
                "AND environment = ? AND idempotency_key = ?",
                (scope.tenant, scope.project, scope.environment, idempotency_key),
            ).fetchone()
            if held is not None:
                return self._db.decoded(_record, held)
            conn.execute(
                f"INSERT INTO erasures ({_COLUMNS}) VALUES ({', '.join('?' * 16)})",
                (
                    record.erasure_id, scope.tenant, scope.project, scope.environment, selector,
                    idempotency_key, "queued", "plan", json.dumps(list(streams)), None, 0, 0,
                    None, None, now, now,
                ),
            )  # fmt: skip
        return record

    def start(self, erasure_id: str) -> bool:
        """``queued`` → ``running`` (True also when it is already running: a resume)."""
        self._db.execute(
            "UPDATE erasures SET state = 'running', updated_at = ? "
            "WHERE erasure_id = ? AND state = 'queued'",
            (self._clock(), erasure_id),
        )
        record = self.get(erasure_id)
        return record is not None and record.state == "running"

    def advance(self, erasure_id: str, step: Step, plan: dict[str, Any] | None = None) -> None:
        """Record that the erasure's next step is ``step`` (and its plan, when given); the
        attempts of the new step start at 0."""
        if plan is None:
            self._db.execute(
                "UPDATE erasures SET step = ?, attempts = 0, updated_at = ? "
                "WHERE erasure_id = ? AND state = 'running'",
                (step, self._clock(), erasure_id),
            )
        else:
            self._db.execute(
                "UPDATE erasures SET step = ?, plan = ?, attempts = 0, updated_at = ? "
                "WHERE erasure_id = ? AND state = 'running'",
                (step, json.dumps(plan, separators=(",", ":")), self._clock(), erasure_id),
            )

    def record_attempt(self, erasure_id: str, error: str) -> int:
        """Count a transient failure of the current step; the attempts so far."""
        self._db.execute(
            "UPDATE erasures SET attempts = attempts + 1, last_error = ?, updated_at = ? "
            "WHERE erasure_id = ? AND state = 'running'",
            (error[:2000], self._clock(), erasure_id),
        )
        record = self.get(erasure_id)
        return record.attempts if record is not None else 0

    def succeed(self, erasure_id: str, streams_deleted: int) -> bool:
        count, _ = self._db.execute(
            "UPDATE erasures SET state = 'succeeded', step = 'done', streams_deleted = ?, "
            "updated_at = ? WHERE erasure_id = ? AND state = 'running'",
            (streams_deleted, self._clock(), erasure_id),
        )
        return count == 1

    def fail(self, erasure_id: str, error: dict[str, Any]) -> bool:
        count, _ = self._db.execute(
            "UPDATE erasures SET state = 'failed', error = ?, updated_at = ? "
            "WHERE erasure_id = ? AND state IN ('queued', 'running')",
            (json.dumps(error), self._clock(), erasure_id),
        )
        return count == 1

    def close(self) -> None:
        self._db.close()
