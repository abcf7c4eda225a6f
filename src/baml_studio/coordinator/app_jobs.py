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

import logging
from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from baml_studio.apierrors import BadRequest
from baml_studio.control.identity import UserIdentity
from baml_studio.coordinator.app import _json
from baml_studio.coordinator.jobs import JobManager
from baml_studio.coordinator.run import QueryRequest
from baml_studio.httpbody import read_body
from baml_studio.httproutes import Refusals, idempotency_key

log = logging.getLogger(__name__)

MAX_JOB_BODY_BYTES = 1024 * 1024
NDJSON = "application/x-ndjson"
_NO_STORE = {"Cache-Control": "no-store"}
_REFUSALS = Refusals(log, id_prefix="cq")

Authenticate = Callable[[Request], UserIdentity]
BaseUrl = Callable[[Request], str]


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

    guarded = _REFUSALS.guarded
    return [
        Route("/v1/query-jobs", guarded("createQueryJob", create), methods=["POST"]),
        Route("/v1/query-jobs/{job_id}", guarded("getQueryJob", read), methods=["GET"]),
        Route("/v1/query-jobs/{job_id}", guarded("cancelQueryJob", cancel), methods=["DELETE"]),
        Route(
            "/v1/query-jobs/{job_id}/result",
            guarded("getQueryJobResult", result),
            methods=["GET"],
        ),
    ]


def parse_job_request(body: bytes) -> QueryRequest:
    """The ``ExecuteQueryRequest`` of a job: valid JSON, ``mode`` background or absent."""
    raw: Any = _json(body)
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
