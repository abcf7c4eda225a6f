"""The durable record of background query jobs: one SQLite file (:mod:`baml_studio.sqlite_state`).

A row per job holds its scope, the normalised request, the idempotency key, the state, the last
persisted progress, the bound snapshot, the error of a failed job, the result object's key and
three unix times (``created_at``, ``updated_at``, ``expires_at``). Every state change is one
conditional ``UPDATE`` (``… WHERE state IN (…)``), so a late writer (a worker finishing after a
cancel, or after a restart marked its job failed) can never move a final job again.

Opening the file applies the restart rule: a job found ``queued`` or ``running`` belonged to a
process that died, so it becomes ``failed`` with :data:`RESTARTED_ERROR` (see :mod:`.jobs`).

Errors::

    ApiError
    ├── JobStoreError          500 a file this version cannot read (unknown schema version)
    └── DependencyUnavailable
        └── JobStoreUnavailable 503 transient: SQLite locked or an I/O error
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, get_args

from baml_studio.apierrors import ApiError, DependencyUnavailable
from baml_studio.coordinator.run import PHASES, Phase
from baml_studio.gateway.config import Scope
from baml_studio.publisher.state import new_ulid
from baml_studio.sqlite_state import SqliteState, StoreSpec

JobState = Literal["queued", "running", "succeeded", "failed", "cancelled"]
ACTIVE_STATES: tuple[JobState, ...] = ("queued", "running")
SCHEMA_VERSION = 1
SNAPSHOT_FIELDS = ("snapshotId", "catalogVersion", "generation", "lanceVersion")
RESTARTED_ERROR: dict[str, Any] = {
    "code": "coordinator_restarted",
    "message": "the query coordinator restarted while this job was queued or running; "
    "its work was lost",
    "retryable": True,
    "remedy": "submit the query again with POST /v1/query-jobs",
}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS query_jobs (
    job_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    project TEXT NOT NULL,
    environment TEXT NOT NULL,
    request TEXT NOT NULL,
    idempotency_key TEXT,
    state TEXT NOT NULL,
    phase TEXT NOT NULL,
    fraction REAL NOT NULL,
    rows_so_far INTEGER NOT NULL,
    snapshot TEXT NOT NULL,
    error TEXT,
    result_key TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS query_jobs_idempotency
    ON query_jobs (tenant, project, environment, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS query_jobs_expiry ON query_jobs (expires_at);
CREATE INDEX IF NOT EXISTS query_jobs_state ON query_jobs (state)
"""
_COLUMNS = (
    "job_id, tenant, project, environment, request, idempotency_key, state, phase, fraction, "
    "rows_so_far, snapshot, error, result_key, created_at, updated_at, expires_at"
)


class JobStoreError(ApiError):
    """The jobs file cannot be used by this version (terminal)."""

    code = "job_store_error"


class JobStoreUnavailable(DependencyUnavailable):
    """SQLite was locked or failed with an I/O error (transient)."""

    code = "job_store_unavailable"


_SPEC = StoreSpec("query job", _SCHEMA, SCHEMA_VERSION, JobStoreError, JobStoreUnavailable)


def new_job_id(now: float) -> str:
    """``job_`` and a ULID (26 Crockford base32 characters, sortable by creation time)."""
    return "job_" + new_ulid(now)


def rfc3339(t: float) -> str:
    """``2026-09-09T10:20:00.123Z``: UTC, millisecond precision."""
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One stored job."""

    job_id: str
    scope: Scope
    request: str
    """The normalised ``ExecuteQueryRequest`` as canonical JSON (compared for idempotency)."""
    idempotency_key: str | None
    state: JobState
    phase: Phase
    fraction: float
    rows_so_far: int
    snapshot: dict[str, Any]
    error: dict[str, Any] | None
    """A ``QueryOutcomeError``; set only when ``state`` is ``failed``."""
    result_key: str | None
    """The result object's key; set only when ``state`` is ``succeeded``."""
    created_at: float
    updated_at: float
    expires_at: float

    def to_json(self, base_url: str = "") -> dict[str, Any]:
        """The ``QueryJob`` of openapi.yaml; ``result_url`` is relative without ``base_url``."""
        out: dict[str, Any] = {
            "job_id": self.job_id,
            "state": self.state,
            "progress": {"phase": self.phase, "fraction": self.fraction},
            "rows_so_far": self.rows_so_far,
            "snapshot": {k: self.snapshot[k] for k in SNAPSHOT_FIELDS if k in self.snapshot},
            "created_at": rfc3339(self.created_at),
            "updated_at": rfc3339(self.updated_at),
            "expires_at": rfc3339(self.expires_at),
        }
        if self.state == "succeeded":
            out["result_url"] = f"{base_url.rstrip('/')}/v1/query-jobs/{self.job_id}/result"
        if self.state == "failed" and self.error is not None:
            out["error"] = self.error
        return out


def _record(row: tuple[Any, ...]) -> JobRecord:
    """A stored row as a job; what :meth:`JobRecord.to_json` reads is checked here, so a
    damaged row fails as it is read (:meth:`SqliteState.decoded`), not while it is answered."""
    if row[6] not in get_args(JobState):
        raise ValueError(f"state {row[6]!r:.40} is not a job state")
    phase: Phase = row[7] if row[7] in PHASES else "planning"
    snapshot, error = json.loads(row[10]), json.loads(row[11]) if row[11] is not None else None
    if not isinstance(snapshot, dict) or not isinstance(error, dict | None):
        raise TypeError("snapshot or error is not a JSON object")
    record = JobRecord(
        row[0],
        Scope(row[1], row[2], row[3]),
        row[4],
        row[5],
        row[6],
        phase,
        float(row[8]),
        int(row[9]),
        snapshot,
        error,
        row[12],
        float(row[13]),
        float(row[14]),
        float(row[15]),
    )
    record.to_json()
    return record


class JobStore:
    """The jobs file at ``path``, shared by the threads of one coordinator process (one process
    per file: opening it declares every active job's process dead).

    ``spool_dir`` (``<path>.spool/`` beside the file) holds result files while a worker writes
    them; whatever a dead process left there is removed when the store opens. ``recovered``
    lists the jobs the restart rule failed on this open.
    """

    def __init__(
        self, path: Path, *, clock: Callable[[], float] = time.time, busy_timeout_s: float = 10.0
    ) -> None:
        self.path = Path(path)
        self.spool_dir = self.path.with_name(self.path.name + ".spool")
        try:
            self.spool_dir.mkdir(parents=True, exist_ok=True)
            for leftover in self.spool_dir.iterdir():
                leftover.unlink(missing_ok=True)
        except OSError as exc:
            raise _SPEC.wrap(exc, self.path) from exc
        self._db = SqliteState(self.path, _SPEC, busy_timeout_s=busy_timeout_s)
        try:
            self.recovered = self._fail_unfinished(clock())
        except BaseException:
            self._db.close()
            raise

    def _fail_unfinished(self, now: float) -> tuple[JobRecord, ...]:
        """The restart rule: every queued or running job failed with ``coordinator_restarted``."""
        with self._db.transaction() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM query_jobs WHERE state IN ('queued', 'running')"
            ).fetchall()
            conn.execute(
                "UPDATE query_jobs SET state = 'failed', error = ?, updated_at = ? "
                "WHERE state IN ('queued', 'running')",
                (json.dumps(RESTARTED_ERROR), now),
            )
        return tuple(self._db.readable(_record, rows))

    def insert(self, record: JobRecord) -> JobRecord:
        """Store ``record``, or return the job that already holds its idempotency key."""
        with self._db.transaction() as conn:
            if record.idempotency_key is not None:
                held = conn.execute(
                    f"SELECT {_COLUMNS} FROM query_jobs WHERE tenant = ? AND project = ? "
                    "AND environment = ? AND idempotency_key = ?",
                    (*_scope(record.scope), record.idempotency_key),
                ).fetchone()
                if held is not None:
                    return self._db.decoded(_record, held)
            conn.execute(
                f"INSERT INTO query_jobs ({_COLUMNS}) VALUES ({', '.join('?' * 16)})",
                _row(record),
            )
        return record

    def get(self, job_id: str) -> JobRecord | None:
        _, rows = self._db.execute(f"SELECT {_COLUMNS} FROM query_jobs WHERE job_id = ?", (job_id,))
        return self._db.decoded(_record, rows[0]) if rows else None

    def find(self, scope: Scope, idempotency_key: str) -> JobRecord | None:
        """The job of ``scope`` created with ``idempotency_key``, if any."""
        _, rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM query_jobs WHERE tenant = ? AND project = ? "
            "AND environment = ? AND idempotency_key = ?",
            (*_scope(scope), idempotency_key),
        )
        return self._db.decoded(_record, rows[0]) if rows else None

    def mark_running(self, job_id: str, now: float) -> bool:
        """``queued`` → ``running``; False when the job is no longer queued (cancelled, gone)."""
        count, _ = self._db.execute(
            "UPDATE query_jobs SET state = 'running', updated_at = ? "
            "WHERE job_id = ? AND state = 'queued'",
            (now, job_id),
        )
        return count == 1

    def save_progress(
        self, job_id: str, phase: Phase, fraction: float, rows_so_far: int, now: float
    ) -> None:
        """Persist a running job's progress (ignored once the job left ``running``)."""
        self._db.execute(
            "UPDATE query_jobs SET phase = ?, fraction = ?, rows_so_far = ?, updated_at = ? "
            "WHERE job_id = ? AND state = 'running'",
            (phase, fraction, rows_so_far, now, job_id),
        )

    def finish(
        self,
        record: JobRecord,
        state: JobState,
        now: float,
        *,
        error: dict[str, Any] | None = None,
        result_key: str | None = None,
    ) -> bool:
        """Move an active job to the final ``state`` with ``record``'s progress; False when the
        job already left ``queued``/``running`` (or is gone) and nothing changed."""
        count, _ = self._db.execute(
            "UPDATE query_jobs SET state = ?, phase = ?, fraction = ?, rows_so_far = ?, "
            "error = ?, result_key = ?, updated_at = ? "
            "WHERE job_id = ? AND state IN ('queued', 'running')",
            (
                state,
                record.phase,
                record.fraction,
                record.rows_so_far,
                json.dumps(error) if error is not None else None,
                result_key,
                now,
                record.job_id,
            ),
        )
        return count == 1

    def expired(self, now: float) -> list[JobRecord]:
        """Every job whose ``expires_at`` has passed, oldest first."""
        _, rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM query_jobs WHERE expires_at <= ? ORDER BY expires_at",
            (now,),
        )
        return self._db.readable(_record, rows)

    def delete(self, job_id: str) -> None:
        self._db.execute("DELETE FROM query_jobs WHERE job_id = ?", (job_id,))

    def close(self) -> None:
        self._db.close()


def _scope(scope: Scope) -> tuple[str, str, str]:
    return scope.tenant, scope.project, scope.environment


def _row(record: JobRecord) -> tuple[Any, ...]:
    return (
        record.job_id,
        *_scope(record.scope),
        record.request,
        record.idempotency_key,
        record.state,
        record.phase,
        record.fraction,
        record.rows_so_far,
        json.dumps(record.snapshot, separators=(",", ":")),
        json.dumps(record.error) if record.error is not None else None,
        record.result_key,
        record.created_at,
        record.updated_at,
        record.expires_at,
    )
