"""Background query jobs: ``POST/GET/DELETE /v1/query-jobs`` behind a :class:`JobManager`.

States (``QueryJob.state``)::

    queued ──> running ──> succeeded   the run ended complete or incomplete; its NDJSON lines
       │          │                    (rows, then one queryOutcome) are the result object
       │          ├──────> failed      the outcome was failed or budget_exhausted (its error),
       │          │                    or the result could not be written
       └──────────┴──────> cancelled   DELETE, or close(); a queued job never starts

``create`` calls ``start`` synchronously, so a refused query (bad SQL, wrong scope, a dependency
down) is the POST's 4xx/5xx and no job exists. The job is then ``queued`` with the run's bound
snapshot and handed to a worker thread, which spools the lines to a file beside the job store,
persists progress every ``progress_interval_s`` or ``progress_every_rows`` rows, and uploads the
file once, create-only, to ``<result_prefix><tenant>/<project>/<environment>/<job_id>.ndjson``.
A final state is written with a conditional update, so a cancel that wins the race keeps the job
``cancelled`` and the late result is deleted.

Waiting: a queued job's snapshot (bound when it was created, reported while it waits) stays
leased while the job waits: the reaper renews the lease of every queued run every
``keep_interval_s`` (``QueryRun.keep``), and the run renews it once more when it starts. Its wall
budget runs from then, so time in the queue does not count against it.

Restart rule: jobs live only in this process's threads. When a :class:`JobStore` opens, every job
it finds ``queued`` or ``running`` belonged to a process that died, so it becomes ``failed`` with
error ``coordinator_restarted`` (retryable, remedy: resubmit) — never lost silently, never left
running forever. Jobs and their result objects are removed at ``expires_at`` (``ttl_s`` after
creation) by a reaper pass on every call and by a background thread.

Idempotency: the same ``Idempotency-Key`` in the same scope with the same (normalised) request
returns the existing job; with a different request it is 409 ``idempotency_key_reused``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from baml_studio.apierrors import (
    Conflict,
    DependencyUnavailable,
    NotFound,
    TooManyRequests,
    key_reused,
)
from baml_studio.control.identity import UserIdentity
from baml_studio.coordinator.jobs_store import (
    JobRecord,
    JobState,
    JobStore,
    new_job_id,
)
from baml_studio.coordinator.run import PHASES, Phase, QueryRequest, QueryRun
from baml_studio.gateway.config import Scope
from baml_studio.objectstore.errors import ObjectAlreadyExists, ObjectNotFound, ObjectStoreError
from baml_studio.objectstore.port import ObjectStore

log = logging.getLogger(__name__)

StartQuery = Callable[[QueryRequest, UserIdentity], QueryRun]
RESULT_CHUNK_BYTES = 1 << 20
_SUCCEEDED = ("complete", "incomplete")
KEEP_INTERVAL_S = 30.0
"""How often a queued job's snapshot lease is renewed (well inside the lease's spare minute,
``version_leases.EXTEND_S``)."""
_RESUBMIT = "submit the query again with POST /v1/query-jobs"


class JobManager:
    """Creates, runs, reports, cancels and expires background query jobs (module docstring)."""

    def __init__(
        self,
        store: JobStore,
        objects: ObjectStore,
        start: StartQuery,
        *,
        workers: int = 2,
        ttl_s: float = 24 * 3600,
        clock: Callable[[], float] = time.time,
        result_prefix: str = "tmp/query-results/",
        max_pending: int = 256,
        progress_interval_s: float = 0.5,
        progress_every_rows: int = 1000,
        reap_interval_s: float = 60.0,
        keep_interval_s: float = KEEP_INTERVAL_S,
    ) -> None:
        self._store, self._objects, self._start = store, objects, start
        self._ttl_s, self._clock, self._prefix = ttl_s, clock, result_prefix
        self._max_pending = max_pending
        self._progress_interval_s = progress_interval_s
        self._progress_every_rows = max(1, progress_every_rows)
        self._runs: dict[str, QueryRun] = {}
        self._waiting: dict[str, QueryRun] = {}
        """Queued runs (their leases renewed by the reaper until a worker takes them)."""
        self.keep_failures = 0
        """Renewals of a queued run's lease that failed (instrumentation)."""
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="query-job")
        for job in store.recovered:
            self._delete_result(job)
        self._reaper = threading.Thread(
            target=self._reap_forever,
            args=(reap_interval_s, keep_interval_s),
            name="query-job-reaper",
            daemon=True,
        )
        self._reaper.start()

    # --- the four operations -------------------------------------------------------------------

    def create(
        self,
        request: QueryRequest,
        identity: UserIdentity,
        environment: str,
        idempotency_key: str | None = None,
        *,
        base_url: str = "",
    ) -> tuple[dict[str, Any], bool]:
        """``(QueryJob JSON, created)``: a new queued job, or the one ``idempotency_key`` names.

        Raises whatever ``start`` raises (nothing is stored then), ``Forbidden`` for an
        environment the token lacks, 409 ``idempotency_key_reused``, 429 when too many jobs are
        pending, 503 after :meth:`close`.
        """
        self.purge_expired()
        scope = identity.scope(environment)
        request = dataclasses.replace(request, mode="background", environment_id=environment)
        canonical = json.dumps(request.to_json(), sort_keys=True, separators=(",", ":"))
        if idempotency_key is not None:
            held = self._store.find(scope, idempotency_key)
            if held is not None:
                return _replayed(_unexpired(held, self._clock()), canonical, base_url), False
        self._admit()
        run = self._start(request, identity)
        new = self._new_record(scope, canonical, idempotency_key, run)
        try:
            stored = self._store.insert(new)
        except BaseException:
            run.cancel()
            raise
        if stored.job_id != new.job_id:  # a concurrent create took the key first
            run.cancel()
            return _replayed(_unexpired(stored, self._clock()), canonical, base_url), False
        self._enqueue(new, run)
        return new.to_json(base_url), True

    def get(self, job_id: str, identity: UserIdentity, *, base_url: str = "") -> dict[str, Any]:
        """The job as ``QueryJob`` JSON, with live progress while it runs; 404 outside scope."""
        self.purge_expired()
        return self._live(self._visible(job_id, identity)).to_json(base_url)

    def cancel(self, job_id: str, identity: UserIdentity, *, base_url: str = "") -> dict[str, Any]:
        """Cancel a queued or running job (it ends ``cancelled`` at once); a final job is
        returned unchanged."""
        self.purge_expired()
        record = self._visible(job_id, identity)
        if record.state in ("queued", "running"):
            self._stop(record)
            record = self._visible(job_id, identity)
        return record.to_json(base_url)

    def result(self, job_id: str, identity: UserIdentity) -> Iterator[bytes]:
        """The stored NDJSON of a succeeded job, in chunks; 409 ``job_not_succeeded`` before
        success. The job and its object are checked before this returns."""
        self.purge_expired()
        record = self._visible(job_id, identity)
        if record.state != "succeeded" or record.result_key is None:
            raise Conflict(
                f"query job {job_id} is {record.state}; its result exists only once it has "
                f"succeeded (poll GET /v1/query-jobs/{job_id})",
                code="job_not_succeeded",
                details={"state": record.state},
            )
        key = record.result_key
        try:
            size = self._objects.head(key).size
        except ObjectNotFound as exc:
            raise NotFound(f"the result of query job {job_id} is gone", code="result_gone") from exc
        except ObjectStoreError as exc:
            raise _unavailable(exc) from exc
        return self._chunks(key, size)

    # --- expiry and shutdown -------------------------------------------------------------------

    def purge_expired(self) -> int:
        """Remove every expired job and its result object; the number of jobs removed. A job
        whose object could not be deleted stays (invisible) for the next pass."""
        removed = 0
        for record in self._store.expired(self._clock()):
            with self._lock:
                run = self._runs.pop(record.job_id, None)
                self._waiting.pop(record.job_id, None)
            if run is not None:
                run.cancel()
            if self._delete_result(record):
                self._store.delete(record.job_id)
                removed += 1
        return removed

    def close(self) -> None:
        """Cancel every queued and running job, wait for the workers, stop the reaper."""
        with self._lock:
            self._closed.set()
            active = list(self._runs)
        for job_id in active:
            record = self._store.get(job_id)
            if record is not None:
                self._stop(record)
        self._pool.shutdown(wait=True)
        self._reaper.join()

    # --- internals -----------------------------------------------------------------------------

    def _admit(self) -> None:
        if self._closed.is_set():
            raise _closing()
        with self._lock:
            pending = len(self._runs)
        if pending >= self._max_pending:
            raise TooManyRequests(
                f"{pending} query jobs are queued or running (limit {self._max_pending}); "
                "retry later",
                code="too_many_jobs",
            )

    def _new_record(
        self, scope: Scope, canonical: str, key: str | None, run: QueryRun
    ) -> JobRecord:
        now = self._clock()
        return JobRecord(
            new_job_id(now),
            scope,
            canonical,
            key,
            "queued",
            "planning",
            0.0,
            0,
            dict(run.snapshot),
            None,
            None,
            now,
            now,
            now + self._ttl_s,
        )

    def _enqueue(self, record: JobRecord, run: QueryRun) -> None:
        with self._lock:
            if not self._closed.is_set():
                self._runs[record.job_id] = run
                self._waiting[record.job_id] = run
                self._pool.submit(self._work, record.job_id, run)
                return
        self._store.finish(record, "cancelled", self._clock())
        run.cancel()
        raise _closing()

    def _visible(self, job_id: str, identity: UserIdentity) -> JobRecord:
        record = self._store.get(job_id)
        if (
            record is None
            or record.expires_at <= self._clock()
            or not identity.grants(record.scope)
        ):
            raise NotFound(f"no query job {job_id!r} in this token's scope", code="job_not_found")
        return record

    def _live(self, record: JobRecord) -> JobRecord:
        with self._lock:
            run = self._runs.get(record.job_id)
        if run is None or record.state != "running":
            return record
        return _with_progress(record, run)

    def _stop(self, record: JobRecord) -> None:
        """Mark an active job cancelled and stop its run."""
        with self._lock:
            run = self._runs.get(record.job_id)
            self._waiting.pop(record.job_id, None)
        if run is not None:
            record = _with_progress(record, run)
        self._store.finish(record, "cancelled", self._clock())
        if run is not None:
            run.cancel()

    def _work(self, job_id: str, run: QueryRun) -> None:
        spool = self._store.spool_dir / f"{job_id}.ndjson"
        with self._lock:
            self._waiting.pop(job_id, None)
        try:
            if not self._store.mark_running(job_id, self._clock()):
                run.cancel()
                return
            self._run(job_id, run, spool)
        except Exception as exc:  # the worker's boundary: any failure ends the job, typed
            log.exception("query job %s failed unexpectedly", job_id)
            self._fail(job_id, run, _error("internal_error", f"{type(exc).__name__}: {exc}"))
        finally:
            spool.unlink(missing_ok=True)
            with self._lock:
                self._runs.pop(job_id, None)

    def keep_waiting(self) -> int:
        """Renew the lease of every queued run (the reaper's pass); the number renewed. A
        failed renewal is logged and retried on the next pass; the run renews once more when
        it starts and ends ``dependency_unavailable`` (retryable) if that fails too."""
        with self._lock:
            waiting = list(self._waiting.items())
        kept = 0
        for job_id, run in waiting:
            try:
                run.keep()
                kept += 1
            except Exception as exc:  # the reaper must survive; the start renews again
                self.keep_failures += 1
                log.warning("query job %s: its snapshot's lease was not renewed: %s", job_id, exc)
        return kept

    def _run(self, job_id: str, run: QueryRun, spool: Path) -> None:
        try:
            digest = self._spool(job_id, run, spool)
        except OSError as exc:
            run.cancel()
            self._fail(job_id, run, _error("result_write_failed", str(exc), retryable=True))
            return
        outcome = run.outcome()
        state = None if outcome is None else outcome.get("resultState")
        if state in _SUCCEEDED:
            self._publish(job_id, run, spool, digest)
        elif state == "cancelled":
            self._settle(job_id, run, "cancelled")
        else:
            self._fail(job_id, run, _outcome_error(outcome))

    def _spool(self, job_id: str, run: QueryRun, spool: Path) -> str:
        """Write every line to ``spool``; persist progress on the way; the file's SHA-256."""
        digest = hashlib.sha256()
        last, rows = time.monotonic(), 0
        lines = run.lines()
        with spool.open("wb") as out, _closing_iterator(lines):
            for line in lines:
                data = line.encode("utf-8") + b"\n"
                out.write(data)
                digest.update(data)
                rows += 1
                if rows % self._progress_every_rows == 0 or (
                    time.monotonic() - last >= self._progress_interval_s
                ):
                    last = time.monotonic()
                    self._save_progress(job_id, run)
        return digest.hexdigest()

    def _save_progress(self, job_id: str, run: QueryRun) -> None:
        phase, fraction = _progress(run)
        self._store.save_progress(job_id, phase, fraction, run.rows_so_far, self._clock())

    def _publish(self, job_id: str, run: QueryRun, spool: Path, digest: str) -> None:
        record = self._store.get(job_id)
        if record is None or record.state != "running":
            return
        key = self._result_key(record)
        try:
            self._put(key, spool.read_bytes(), digest)
        except (ObjectStoreError, OSError) as exc:
            retryable = getattr(exc, "transient", True)
            message = f"the result could not be stored under {key!r}: {exc}"
            self._fail(job_id, run, _error("result_write_failed", message, retryable=retryable))
            return
        done = dataclasses.replace(_with_progress(record, run), phase="writing", fraction=1.0)
        if not self._store.finish(done, "succeeded", self._clock(), result_key=key):
            self._delete_result(record)

    def _put(self, key: str, data: bytes, digest: str) -> None:
        try:
            self._objects.put_if_absent(key, data, digest)
        except ObjectAlreadyExists:
            if self._objects.head(key).sha256 != digest:
                raise

    def _settle(self, job_id: str, run: QueryRun, state: JobState) -> None:
        record = self._store.get(job_id)
        if record is not None:
            self._store.finish(_with_progress(record, run), state, self._clock())

    def _fail(self, job_id: str, run: QueryRun, error: dict[str, Any]) -> None:
        record = self._store.get(job_id)
        if record is not None:
            self._store.finish(_with_progress(record, run), "failed", self._clock(), error=error)

    def _result_key(self, record: JobRecord) -> str:
        scope = record.scope
        return (
            f"{self._prefix}{scope.tenant}/{scope.project}/{scope.environment}/"
            f"{record.job_id}.ndjson"
        )

    def _delete_result(self, record: JobRecord) -> bool:
        try:
            self._objects.delete(self._result_key(record))
        except ObjectStoreError as exc:
            log.warning("query job %s: result not deleted yet: %s", record.job_id, exc)
            return False
        return True

    def _chunks(self, key: str, size: int) -> Iterator[bytes]:
        for start in range(0, size, RESULT_CHUNK_BYTES):
            yield self._objects.get(key, start, min(size, start + RESULT_CHUNK_BYTES))

    def _reap_forever(self, reap_interval_s: float, keep_interval_s: float) -> None:
        next_reap = time.monotonic() + reap_interval_s
        while not self._closed.wait(min(reap_interval_s, keep_interval_s)):
            self.keep_waiting()
            if time.monotonic() < next_reap:
                continue
            next_reap = time.monotonic() + reap_interval_s
            try:
                self.purge_expired()
            except Exception as exc:  # the reaper thread must survive a failed pass
                log.warning("query job reaper pass failed: %s", exc)


def _progress(run: QueryRun) -> tuple[Phase, float]:
    phase, fraction = run.progress
    known: Phase = phase if phase in PHASES else "planning"
    return known, min(1.0, max(0.0, float(fraction)))


def _with_progress(record: JobRecord, run: QueryRun) -> JobRecord:
    phase, fraction = _progress(run)
    return dataclasses.replace(record, phase=phase, fraction=fraction, rows_so_far=run.rows_so_far)


def _unexpired(record: JobRecord, now: float) -> JobRecord:
    if record.expires_at <= now:
        raise DependencyUnavailable(
            f"query job {record.job_id}, which holds this Idempotency-Key, has expired and is "
            "still being removed; retry shortly",
            code="idempotency_key_expiring",
        )
    return record


def _replayed(record: JobRecord, canonical: str, base_url: str) -> dict[str, Any]:
    if record.request != canonical:
        raise key_reused(
            holder="query job",
            holder_id=record.job_id,
            id_field="job_id",
            compared="request",
            new="query",
        )
    return record.to_json(base_url)


def _error(
    code: str, message: str, *, retryable: bool = False, remedy: str | None = _RESUBMIT
) -> dict[str, Any]:
    out: dict[str, Any] = {"code": code, "message": message, "retryable": retryable}
    if remedy is not None:
        out["remedy"] = remedy
    return out


def _outcome_error(outcome: dict[str, Any] | None) -> dict[str, Any]:
    """The outcome's ``error`` as a ``QueryOutcomeError``, or one naming the result state."""
    if outcome is None:
        return _error("outcome_missing", "the query ended without a queryOutcome")
    raw = outcome.get("error")
    state = str(outcome.get("resultState"))
    if not isinstance(raw, dict):
        return _error(state, f"the query ended {state}", remedy=None)
    error = _error(
        str(raw.get("code", state)),
        str(raw.get("message", f"the query ended {state}")),
        retryable=raw.get("retryable") is True,
        remedy=None,
    )
    if isinstance(raw.get("remedy"), str):
        error["remedy"] = raw["remedy"]
    return error


def _unavailable(exc: ObjectStoreError) -> DependencyUnavailable:
    return DependencyUnavailable(f"the object store failed: {exc}", code="object_store_unavailable")


def _closing() -> DependencyUnavailable:
    return DependencyUnavailable(
        "the query coordinator is shutting down; retry on another instance or later",
        code="coordinator_closing",
    )


@contextmanager
def _closing_iterator(lines: Iterator[str]) -> Iterator[None]:
    """Close a generator left early, which cancels its run (``QueryRun.lines``)."""
    try:
        yield
    finally:
        close = getattr(lines, "close", None)
        if callable(close):
            close()
