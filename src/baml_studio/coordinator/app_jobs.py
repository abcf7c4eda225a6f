"""The HTTP face of background query jobs: four Starlette routes over a :class:`JobManager`.

Routes::

    POST   /v1/query-jobs                  202 QueryJob (queued, or the Idempotency-Key's job)
    GET    /v1/query-jobs/{job_id}         200 QueryJob
    DELETE /v1/query-jobs/{job_id}         200 QueryJob after the cancel
    GET    /v1/query-jobs/{job_id}/result  200 application/x-ndjson, 409 before success

The body of ``POST`` is an ``ExecuteQueryRequest`` whose ``mode`` is ``background`` or absent.
The environment is the body's ``environment_id``, or the token's only environment. Every refusal
is an ``ErrorResponse`` (:func:`baml_studio.apierrors.error_body`) with its status and headers;
blocking work (token check, SQLite, the object store) runs in a worker thread. Unknown routes and
methods are the enclosing app's to answer.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from baml_studio.apierrors import ApiError, BadRequest, error_body, error_headers
from baml_studio.control.identity import UserIdentity
from baml_studio.coordinator.jobs import JobManager
from baml_studio.coordinator.run import QueryRequest
from baml_studio.httpbody import read_body

log = logging.getLogger(__name__)

REQUEST_ID_HEADER = "x-baml-request-id"
IDEMPOTENCY_HEADER = "idempotency-key"
MAX_IDEMPOTENCY_KEY_CHARS = 256
MAX_JOB_BODY_BYTES = 1024 * 1024
NDJSON = "application/x-ndjson"
_NO_STORE = {"Cache-Control": "no-store"}

Authenticate = Callable[[Request], UserIdentity]
BaseUrl = Callable[[Request], str]


def error_response(error: ApiError, request_id: str | None) -> JSONResponse:
    """``error`` as an ``ErrorResponse`` with its status and headers."""
    return JSONResponse(
        error_body(error, request_id or f"cq_{uuid.uuid4().hex}"),
        status_code=error.status,
        headers=error_headers(error),
    )


def job_routes(
    manager: JobManager,
    authenticate: Authenticate,
    *,
    base_url: BaseUrl | None = None,
    max_body_bytes: int = MAX_JOB_BODY_BYTES,
) -> list[Route]:
    """The four routes. ``authenticate`` verifies the caller's user token (raising
    ``Unauthenticated`` or ``Forbidden``); ``base_url`` gives the public origin for
    ``result_url`` (default: the request's own base URL)."""

    def origin(request: Request) -> str:
        return base_url(request) if base_url is not None else str(request.base_url)

    async def create(request: Request) -> Response:
        identity = await run_in_threadpool(authenticate, request)
        key = idempotency_key(request)
        query = parse_job_request(await read_body(request, max_body_bytes))
        environment = choose_environment(query, identity)
        job, _ = await run_in_threadpool(
            manager.create, query, identity, environment, key, base_url=origin(request)
        )
        location = f"{origin(request).rstrip('/')}/v1/query-jobs/{job['job_id']}"
        headers = {**_NO_STORE, "Location": location}
        return JSONResponse(job, status_code=202, headers=headers)

    async def read(request: Request) -> Response:
        identity = await run_in_threadpool(authenticate, request)
        job_id = request.path_params["job_id"]
        job = await run_in_threadpool(manager.get, job_id, identity, base_url=origin(request))
        return JSONResponse(job, headers=_NO_STORE)

    async def cancel(request: Request) -> Response:
        identity = await run_in_threadpool(authenticate, request)
        job_id = request.path_params["job_id"]
        job = await run_in_threadpool(manager.cancel, job_id, identity, base_url=origin(request))
        return JSONResponse(job, headers=_NO_STORE)

    async def result(request: Request) -> Response:
        identity = await run_in_threadpool(authenticate, request)
        chunks = await run_in_threadpool(manager.result, request.path_params["job_id"], identity)
        return StreamingResponse(chunks, media_type=NDJSON, headers=_NO_STORE)

    return [
        Route("/v1/query-jobs", _guarded("createQueryJob", create), methods=["POST"]),
        Route("/v1/query-jobs/{job_id}", _guarded("getQueryJob", read), methods=["GET"]),
        Route("/v1/query-jobs/{job_id}", _guarded("cancelQueryJob", cancel), methods=["DELETE"]),
        Route(
            "/v1/query-jobs/{job_id}/result",
            _guarded("getQueryJobResult", result),
            methods=["GET"],
        ),
    ]


def _guarded(
    operation: str, handler: Callable[[Request], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` with every :class:`ApiError` answered as an ``ErrorResponse``."""

    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except ApiError as exc:
            request_id = request.headers.get(REQUEST_ID_HEADER)
            log.info(
                "%s refused request_id=%s status=%d code=%s",
                operation,
                request_id,
                exc.status,
                exc.code,
            )
            return error_response(exc, request_id)

    return endpoint


def idempotency_key(request: Request) -> str | None:
    """The optional ``Idempotency-Key``: 1 to 256 characters, else 400."""
    value = request.headers.get(IDEMPOTENCY_HEADER)
    if value is None:
        return None
    if not value or len(value) > MAX_IDEMPOTENCY_KEY_CHARS:
        raise BadRequest(
            f"Idempotency-Key has {len(value)} characters; send 1 to "
            f"{MAX_IDEMPOTENCY_KEY_CHARS} (e.g. a UUID), or omit it",
            code="invalid_idempotency_key",
        )
    return value


def parse_job_request(body: bytes) -> QueryRequest:
    """The ``ExecuteQueryRequest`` of a job: valid JSON, ``mode`` background or absent."""
    try:
        raw: Any = json.loads(body)
    except ValueError as exc:
        raise BadRequest(f"the request body is not JSON: {exc}") from exc
    query = QueryRequest.from_json(raw)
    if raw.get("mode", "background") != "background":
        raise BadRequest(
            "POST /v1/query-jobs runs queries as mode background; send mode background or omit "
            "it (use POST /v1/query for an interactive query)",
            code="invalid_mode",
        )
    return query


def choose_environment(query: QueryRequest, identity: UserIdentity) -> str:
    """The body's ``environment_id``, else the token's only environment, else 400."""
    if query.environment_id is not None:
        return query.environment_id
    if len(identity.environments) == 1:
        return identity.environments[0]
    raise BadRequest(
        f"the token grants environments {list(identity.environments)}; name one in environment_id",
        code="environment_required",
    )
