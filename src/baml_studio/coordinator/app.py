"""The coordinator's HTTP routes, joined to the data plane's app (``serve dataplane``).

``POST /v1/query`` (executeQuery): a user token, an ``ExecuteQueryRequest`` with mode
``interactive``; answers ``application/x-ndjson``: one JSON object per row, then exactly one
``{"queryOutcome": …}``. Refusals before the stream (bad body, token, environment, the control
plane down while binding the snapshot) are ``ErrorResponse`` JSON with their status. The run
is pulled one line at a time on a worker thread; when the client goes away the run is cancelled
and finishes in the background with a ``cancelled`` outcome (logged, with ids and states only:
never SQL or values). Background jobs: :mod:`.app_jobs`. CORS for the configured Studio
origins wraps the whole app (:func:`with_cors`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from baml_studio.apierrors import ApiError, BadRequest
from baml_studio.control.identity import UserIdentity
from baml_studio.coordinator.run import QueryRequest, QueryRun
from baml_studio.httpbody import read_body
from baml_studio.httproutes import REQUEST_ID_HEADER, Refusals
from baml_studio.jsontext import parse_json

log = logging.getLogger(__name__)
NDJSON = "application/x-ndjson"
MAX_QUERY_BODY_BYTES = 1024 * 1024
CHUNK_BYTES = 64 * 1024
CHUNK_SECONDS = 0.05
_REFUSALS = Refusals(log, id_prefix="cq")

Authenticate = Callable[[Mapping[str, str]], UserIdentity]
Start = Callable[[QueryRequest, UserIdentity], QueryRun]


class LineStream:
    """Pulls a run's lines one at a time (each on a worker thread); :meth:`abandon` cancels the
    run and drains it in the background so its outcome is still produced and logged."""

    def __init__(self, run: QueryRun, request_id: str) -> None:
        self._run = run
        self._lines: Iterator[str] = run.lines()
        self._lock = threading.Lock()
        self._done = False
        self._request_id = request_id

    def next_line(self) -> str | None:
        with self._lock:
            if self._done:
                return None
            line = next(self._lines, None)
            if line is None:
                self._done = True
                self._log_end()
            return line

    def next_chunk(self) -> bytes | None:
        """The next lines, newline-terminated: as many as are ready within
        :data:`CHUNK_SECONDS` and :data:`CHUNK_BYTES` (one hop to a worker thread per chunk,
        not per row; the first row is not held back longer than that)."""
        parts: list[str] = []
        size = 0
        deadline = time.monotonic() + CHUNK_SECONDS
        while size < CHUNK_BYTES and (not parts or time.monotonic() < deadline):
            line = self.next_line()
            if line is None:
                break
            parts.append(line)
            size += len(line) + 1
        return ("\n".join(parts) + "\n").encode() if parts else None

    def abandon(self) -> None:
        self._run.cancel()
        threading.Thread(target=self._drain, name="query-drain", daemon=True).start()

    def _drain(self) -> None:
        while self.next_line() is not None:
            pass

    def _log_end(self) -> None:
        outcome = self._run.outcome() or {}
        error = outcome.get("error") or {}
        log.info(
            "query ended request_id=%s state=%s rows=%s code=%s",
            self._request_id,
            outcome.get("resultState"),
            outcome.get("rowsStreamed"),
            error.get("code"),
        )


def query_routes(start: Start, authenticate: Authenticate) -> list[BaseRoute]:
    async def execute(request: Request) -> Response:
        headers = {k.lower(): v for k, v in request.headers.items()}
        request_id = headers.get(REQUEST_ID_HEADER) or f"q_{uuid.uuid4().hex}"
        try:
            identity = await run_in_threadpool(authenticate, headers)
            raw = await read_body(request, MAX_QUERY_BODY_BYTES)
            query = QueryRequest.from_json(_json(raw))
            if query.mode != "interactive":
                raise BadRequest(
                    "POST /v1/query runs interactive queries; send mode background to "
                    "POST /v1/query-jobs",
                    code="invalid_mode",
                )
            run = await run_in_threadpool(start, query, identity)
        except ApiError as exc:
            return _REFUSALS.refused("query", exc, request_id)
        stream = LineStream(run, request_id)
        return StreamingResponse(
            _body(stream),
            media_type=NDJSON,
            headers={"Cache-Control": "no-store", "X-Baml-Request-Id": request_id},
        )

    return [Route("/v1/query", execute, methods=["POST"])]


async def _body(stream: LineStream) -> AsyncIterator[bytes]:
    finished = False
    try:
        while True:
            chunk = await run_in_threadpool(stream.next_chunk)
            if chunk is None:
                finished = True
                return
            yield chunk
    finally:
        if not finished:
            stream.abandon()


def _json(raw: bytes) -> Any:
    return parse_json(raw, _not_json)


def _not_json(reason: str) -> BadRequest:
    return BadRequest(f"the request body is not JSON: {reason}")


def with_cors(app: ASGIApp, origins: tuple[str, ...]) -> ASGIApp:
    """``app`` answering CORS for ``origins`` (Studio in the browser); unchanged without any."""
    if not origins:
        return app
    return CORSMiddleware(
        app,
        allow_origins=list(origins),
        allow_methods=["GET", "POST", "DELETE"],
        allow_headers=["Authorization", "Content-Type", "Idempotency-Key", "X-Baml-Request-Id"],
        expose_headers=["X-Baml-Request-Id", "Retry-After"],
        max_age=600,
    )
