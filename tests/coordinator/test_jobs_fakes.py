"""Fakes shared by the ``test_jobs*.py`` files (this module holds no tests): a gated fake
:class:`QueryRun`, a fake ``start``, a job rig over a directory bucket in ``tmp_path``, the
openapi.yaml validator and a polling helper."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema_rs
import yaml

from baml_studio.apierrors import ApiError
from baml_studio.control.identity import UserIdentity
from baml_studio.coordinator.jobs import JobManager
from baml_studio.coordinator.jobs_store import JobStore
from baml_studio.coordinator.run import QueryRequest, outcome_line, row_line
from baml_studio.objectstore.config import DirectoryBucketConfig
from baml_studio.objectstore.directory import DirectoryBucket

_BESIDE = Path(__file__).resolve().parents[3] / "shared" / "spec"  # <repo>/../shared/spec
SPEC = Path(os.environ.get("BAML_SPEC_DIR", str(_BESIDE))) / "openapi.yaml"
BASE = "https://dp.example.com"
SNAPSHOT = {
    "snapshotId": "snap_01J8ZK4B2C3D4E5F6G7H8J9K0M",
    "catalogVersion": "2026-09-01",
    "generation": "gen_7",
    "lanceVersion": 1842,
}


def query(sql: str = "SELECT 1", **extra: Any) -> QueryRequest:
    body = {
        "sql": sql,
        "parameters": [],
        "catalog_version": "2026-09-01",
        "budget": {
            "max_wall_ms": 5000,
            "max_result_rows": 1000,
            "max_result_bytes": 8388608,
            "max_private_bytes_read": 0,
        },
        **extra,
    }
    return QueryRequest.from_json(body)


def user(
    tenant: str = "t1", project: str = "p1", environments: tuple[str, ...] = ("prod",)
) -> UserIdentity:
    return UserIdentity(tenant, project, environments, False, "tok_X", "kid", 0, 2**40)


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.002)


class FakeRun:
    """``rows`` row lines then one outcome line. With ``hold_at`` it stops before row
    ``hold_at`` (setting ``holding``) until :meth:`release` or :meth:`cancel`."""

    def __init__(
        self,
        rows: int = 3,
        *,
        hold_at: int | None = None,
        result_state: str = "complete",
        error: dict[str, Any] | None = None,
    ) -> None:
        self._rows, self._hold_at = rows, hold_at
        self._result_state, self._error = result_state, error
        self.holding = threading.Event()
        self.started = threading.Event()
        self.cancelled = threading.Event()
        self._wake = threading.Event()
        self.rows_so_far = 0
        self.progress: tuple[str, float] = ("planning", 0.0)
        self._outcome: dict[str, Any] | None = None
        self.emitted: list[str] = []
        self.kept = 0
        """Calls of :meth:`keep` (lease renewals)."""
        self.keep_error: Exception | None = None

    @property
    def snapshot(self) -> dict[str, Any]:
        return dict(SNAPSHOT)

    def keep(self) -> None:
        if self.keep_error is not None:
            raise self.keep_error
        self.kept += 1

    def release(self) -> None:
        self._wake.set()

    def cancel(self) -> None:
        self.cancelled.set()
        self._wake.set()

    def outcome(self) -> dict[str, Any] | None:
        return self._outcome

    def lines(self) -> Iterator[str]:
        self.started.set()
        for i in range(self._rows):
            if i == self._hold_at:
                self.holding.set()
                self._wake.wait()
            if self.cancelled.is_set():
                break
            self.rows_so_far += 1
            self.progress = ("private", self.rows_so_far / self._rows)
            yield self._emit(row_line({"n": i, "text": f"row {i}"}))
        self._outcome = self._final()
        yield self._emit(outcome_line(self._outcome))

    def _emit(self, line: str) -> str:
        self.emitted.append(line)
        return line

    def _final(self) -> dict[str, Any]:
        state = "cancelled" if self.cancelled.is_set() else self._result_state
        outcome: dict[str, Any] = {
            "queryCompleted": state in ("complete", "incomplete"),
            "resultState": state,
            "snapshot": dict(SNAPSHOT),
            "rowsStreamed": self.rows_so_far,
            "valueEvaluations": {"attempted": 0, "available": 0, "unavailable": 0, "byReason": {}},
            "privateState": {"indexed": 0, "pending": 0},
        }
        if self._error is not None:
            outcome["error"] = self._error
        return outcome

    def result_bytes(self) -> bytes:
        return "".join(line + "\n" for line in self.emitted).encode("utf-8")


@dataclass
class FakeStart:
    """The coordinator's ``start``: hands out ``queued`` runs (a fresh FakeRun when empty), or
    raises ``refuse``."""

    queued: list[FakeRun] = field(default_factory=list)
    refuse: ApiError | None = None
    calls: list[tuple[QueryRequest, UserIdentity]] = field(default_factory=list)
    runs: list[FakeRun] = field(default_factory=list)

    def __call__(self, request: QueryRequest, identity: UserIdentity) -> FakeRun:
        self.calls.append((request, identity))
        if self.refuse is not None:
            raise self.refuse
        run = self.queued.pop(0) if self.queued else FakeRun()
        self.runs.append(run)
        return run


class Clock:
    """A wall clock tests move by hand."""

    def __init__(self, now: float = 1_790_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class Rig:
    manager: JobManager
    store: JobStore
    objects: DirectoryBucket
    start: FakeStart
    clock: Clock
    path: Path


def bucket(tmp_path: Path) -> DirectoryBucket:
    config = DirectoryBucketConfig(
        root=tmp_path / "buckets",
        bucket="evidence-test",
        presign_base_url="http://127.0.0.1:1",
        signing_secret=b"s" * 32,
    )
    return DirectoryBucket(config)


@contextmanager
def job_rig(tmp_path: Path, objects: Any = None, **options: Any) -> Iterator[Rig]:
    """A JobManager over ``DIR/coordinator/jobs.sqlite`` and a directory bucket; closed after."""
    clock = Clock()
    path = tmp_path / "coordinator" / "jobs.sqlite"
    store = JobStore(path, clock=clock)
    directory = bucket(tmp_path)
    start = FakeStart()
    manager = JobManager(store, objects or directory, start, clock=clock, **options)
    try:
        yield Rig(manager, store, directory, start, clock, path)
    finally:
        for run in start.runs:
            run.release()
        manager.close()
        store.close()


def schemas() -> dict[str, Any]:
    document = yaml.safe_load(SPEC.read_text(encoding="utf-8"))
    return dict(document["components"]["schemas"])


_VALIDATORS: dict[str, Any] = {}


def check_schema(name: str, data: Any) -> None:
    """Validate ``data`` against ``components.schemas[name]`` of openapi.yaml, formats too."""
    if name not in _VALIDATORS:
        document = {"$ref": f"#/components/schemas/{name}", "components": {"schemas": schemas()}}
        _VALIDATORS[name] = jsonschema_rs.validator_for(document, validate_formats=True)
    errors = [str(e) for e in _VALIDATORS[name].iter_errors(data)]
    assert not errors, f"{name}: {errors} in {data!r}"
