"""A small stand-in for the coordinator's query API, served by uvicorn on 127.0.0.1.

``POST /v1/query`` answers by SQL text (see :data:`SCENARIOS` and :meth:`StubCoordinator.query`);
the jobs follow a script of states, one step per ``GET``; a succeeded job's result is a 303 to
a second server (another origin, like a presigned bucket URL) that records what it was sent.
Every request is validated against the contract (``QueryRequest.from_json``) and recorded.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from baml_studio.apierrors import (
    ApiError,
    BadRequest,
    Conflict,
    DependencyUnavailable,
    NotFound,
    Unauthenticated,
    error_body,
)
from baml_studio.coordinator.run import QueryRequest, outcome_line, row_line
from projector.projector_control_rig import serve

TOKEN = "good-token"

ROWS: list[dict[str, Any]] = [
    {"call_id": "c1", "fqn": "ExtractInvoice", "args": {"document": "INV-1"}, "output": None},
    {"call_id": "c2", "fqn": "Summarize", "args": {"text": "a\u2028b ünï"}, "output": "x" * 70},
    {"call_id": "c3", "fqn": "ScoreCustomer", "args": [1, 2.5, True], "output": {"score": 7}},
]


def outcome(state: str = "complete", rows: int = len(ROWS), **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "queryCompleted": state in ("complete", "incomplete"),
        "resultState": state,
        "snapshot": {"catalogVersion": "v1", "generation": "gen_7", "lanceVersion": 12},
        "rowsStreamed": rows,
        "valueEvaluations": {"attempted": 3, "available": 3, "unavailable": 0, "byReason": {}},
        "privateState": {"indexed": rows, "pending": 0},
    }
    out.update(extra)
    return out


BUDGET_ERROR = {"code": "E_QUERY_BUDGET_EXCEEDED", "message": "over 2 rows", "retryable": False}
SCENARIOS: dict[str, list[str]] = {
    "SELECT rows": [*map(row_line, ROWS), outcome_line(outcome())],
    "SELECT empty": [outcome_line(outcome(rows=0))],
    "SELECT cut": [*map(row_line, ROWS[:2])],
    "SELECT garbage": [row_line(ROWS[0]), "{not json", outcome_line(outcome())],
    "SELECT scalar": [row_line(ROWS[0]), "[1, 2]", outcome_line(outcome())],
    "SELECT extra": [row_line(ROWS[0]), outcome_line(outcome(rows=1)), row_line(ROWS[1])],
    "SELECT budget": [
        *map(row_line, ROWS[:2]),
        outcome_line(outcome("budget_exhausted", 2, error=BUDGET_ERROR)),
    ],
    "SELECT incomplete": [
        *map(row_line, ROWS),
        outcome_line(
            outcome(
                "incomplete",
                valueEvaluations={
                    "attempted": 3,
                    "available": 2,
                    "unavailable": 1,
                    "byReason": {"pending": 1},
                },
            )
        ),
    ],
}
"""SQL → the NDJSON lines ``POST /v1/query`` answers with (a 200 stream)."""

ERRORS: dict[str, ApiError] = {
    "SELECT nope": BadRequest("unknown column 'nope'", code="invalid_sql"),
    "SELECT unavailable": DependencyUnavailable("the control plane did not answer"),
}

JOB_SCRIPTS: dict[str, list[tuple[str, str, float, int]]] = {
    "SELECT job_ok": [
        ("queued", "planning", 0.0, 0),
        ("running", "resident", 0.3, 1),
        ("running", "private", 0.7, 2),
        ("succeeded", "writing", 1.0, 3),
    ],
    "SELECT job_budget": [("running", "private", 0.5, 2), ("failed", "private", 0.5, 2)],
    "SELECT job_cancelled": [("running", "private", 0.2, 0), ("cancelled", "private", 0.2, 0)],
    "SELECT job_forever": [("running", "private", 0.1, 0)],
}
"""SQL → (state, phase, fraction, rows_so_far) for each successive ``GET`` of the job."""


@dataclass
class Job:
    job_id: str
    script: list[tuple[str, str, float, int]]
    step: int = 0
    cancelled: bool = False

    def to_json(self, result_url: str) -> dict[str, Any]:
        state, phase, fraction, rows = self.script[min(self.step, len(self.script) - 1)]
        if self.cancelled and state in ("queued", "running"):
            state = "cancelled"
        job: dict[str, Any] = {
            "job_id": self.job_id,
            "state": state,
            "progress": {"phase": phase, "fraction": fraction},
            "rows_so_far": rows,
            "snapshot": {"catalogVersion": "v1", "generation": "gen_7", "lanceVersion": 12},
            "created_at": "2026-09-09T10:20:00Z",
            "updated_at": "2026-09-09T10:20:04Z",
            "expires_at": "2026-09-10T10:20:00Z",
        }
        if state == "succeeded":
            job["result_url"] = result_url
        if state == "failed":
            job["error"] = BUDGET_ERROR
        return job


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any = None


@dataclass
class StubCoordinator:
    blob_url: str = ""
    """Base URL of the second server the result redirect points to."""
    seen: list[Seen] = field(default_factory=list)
    blob_seen: list[Seen] = field(default_factory=list)
    jobs: dict[str, Job] = field(default_factory=dict)
    by_key: dict[str, str] = field(default_factory=dict)
    extra_lines: dict[str, list[str]] = field(default_factory=dict)
    """Per-test scenarios (SQL → lines), e.g. a real local run's output."""
    flaky_gets: int = 0
    """The next this-many job GETs answer 503."""
    blob_cut: bool = False
    """The result object ends after its rows, without the outcome line."""
    release: threading.Event = field(default_factory=threading.Event)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def reset(self) -> None:
        """Forget the requests seen and any pending 503s (the jobs stay)."""
        self.seen.clear()
        self.blob_seen.clear()
        self.flaky_gets = 0
        self.blob_cut = False

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/query", self.query, methods=["POST"]),
                Route("/v1/query-jobs", self.create_job, methods=["POST"]),
                Route("/v1/query-jobs/{job_id}", self.job, methods=["GET", "DELETE"]),
                Route("/v1/query-jobs/{job_id}/result", self.result, methods=["GET"]),
            ]
        )

    def blob_app(self) -> Starlette:
        return Starlette(routes=[Route("/results/{job_id}", self.blob, methods=["GET"])])

    async def _admit(self, request: Request) -> Any:
        body = await request.json() if request.method == "POST" else None
        self.seen.append(Seen(request.method, request.url.path, dict(request.headers), body))
        if request.headers.get("authorization") != f"Bearer {TOKEN}":
            raise Unauthenticated("the user token is invalid or expired")
        return body

    async def query(self, request: Request) -> Response:
        try:
            body = await self._admit(request)
            parsed = QueryRequest.from_json(body)
            if parsed.mode != "interactive":
                raise BadRequest("mode must be interactive here")
            if parsed.sql in ERRORS:
                raise ERRORS[parsed.sql]
        except ApiError as exc:
            return _error(exc, request)
        if parsed.sql == "SELECT drop":
            return StreamingResponse(_drop(), media_type="application/x-ndjson")
        if parsed.sql == "SELECT hang":
            return StreamingResponse(self._hang(), media_type="application/x-ndjson")
        if parsed.sql == "SELECT html":
            return Response("<html>bad gateway</html>", 502, media_type="text/html")
        lines = self.extra_lines.get(parsed.sql) or SCENARIOS.get(parsed.sql)
        if lines is None:
            return _error(BadRequest(f"no scenario {parsed.sql!r}", code="invalid_sql"), request)
        return Response("".join(line + "\n" for line in lines), media_type="application/x-ndjson")

    async def _hang(self) -> AsyncIterator[bytes]:
        yield (row_line(ROWS[0]) + "\n").encode()
        while not self.release.is_set():
            await asyncio.sleep(0.01)  # held until the test releases it

    async def create_job(self, request: Request) -> Response:
        try:
            body = await self._admit(request)
            parsed = QueryRequest.from_json(body)
            key = request.headers.get("idempotency-key")
            if not key:
                raise BadRequest("the Idempotency-Key header is required")
            if parsed.mode != "background":
                raise BadRequest("mode must be background here")
            if parsed.sql not in JOB_SCRIPTS:
                raise BadRequest(f"unknown column in {parsed.sql!r}", code="invalid_sql")
        except ApiError as exc:
            return _error(exc, request)
        if key not in self.by_key:
            job_id = f"job_{next(self._ids)}"
            self.jobs[job_id] = Job(job_id, JOB_SCRIPTS[parsed.sql])
            self.by_key[key] = job_id
        job = self.jobs[self.by_key[key]]
        return JSONResponse(job.to_json(self._result_url(request, job)), 202)

    async def job(self, request: Request) -> Response:
        try:
            await self._admit(request)
            job = self._job(request)
            if request.method == "GET" and self.flaky_gets > 0:
                self.flaky_gets -= 1
                raise DependencyUnavailable("the job store did not answer")
        except ApiError as exc:
            return _error(exc, request)
        if request.method == "DELETE":
            job.cancelled = True
        else:
            job.step += 1
        return JSONResponse(job.to_json(self._result_url(request, job)))

    async def result(self, request: Request) -> Response:
        try:
            await self._admit(request)
            job = self._job(request)
            if job.to_json("")["state"] != "succeeded":
                raise Conflict(f"job {job.job_id} has not succeeded")
        except ApiError as exc:
            return _error(exc, request)
        return RedirectResponse(f"{self.blob_url}/results/{job.job_id}", 303)

    async def blob(self, request: Request) -> Response:
        self.blob_seen.append(Seen("GET", request.url.path, dict(request.headers)))
        lines = [*map(row_line, ROWS)] + ([] if self.blob_cut else [outcome_line(outcome())])
        return Response("".join(x + "\n" for x in lines), media_type="application/x-ndjson")

    def _job(self, request: Request) -> Job:
        job = self.jobs.get(request.path_params["job_id"])
        if job is None:
            raise NotFound(f"no job {request.path_params['job_id']}")
        return job

    def _result_url(self, request: Request, job: Job) -> str:
        return str(request.base_url).rstrip("/") + f"/v1/query-jobs/{job.job_id}/result"


async def _drop() -> AsyncIterator[bytes]:
    yield (row_line(ROWS[0]) + "\n").encode()
    raise RuntimeError("stub: the connection drops mid-stream")


def _error(exc: ApiError, request: Request) -> JSONResponse:
    request_id = request.headers.get("x-baml-request-id", "")
    return JSONResponse(error_body(exc, request_id), exc.status)


@contextmanager
def stub_coordinator() -> Iterator[tuple[StubCoordinator, str]]:
    """The stub and its base URL, with the result server on another port."""
    stub = StubCoordinator()
    with (
        serve(stub.blob_app(), log_level="critical") as blob_url,
        serve(stub.app(), log_level="critical") as url,
    ):
        stub.blob_url = blob_url
        try:
            yield stub, url
        finally:
            stub.release.set()


def lines_of(text: str) -> list[Any]:
    """NDJSON split on ``\n`` only (``str.splitlines`` would also split at U+2028)."""
    return [json.loads(line) for line in text.split("\n") if line]
