"""The control plane's ASGI app (Starlette): the Boundary workload API of ``openapi.yaml``.

Routes::

    GET  /projection-schemas/{catalog_version}   ProjectionSchemaSet
    PUT  /projection-batches/{batch_id}           ProjectionBatchResponse (201 new, 200 repeat)
    POST /projection-erasures                     ProjectionErasureResponse
    POST /query-snapshots                         QuerySnapshot
    POST /resident-queries                        Arrow IPC stream
    GET  /.well-known/jwks.json                   the public key set (no token needed)
    GET  /token-revocations                       revoked token ids (no token needed)
    GET  /healthz                                 liveness

The workload routes are also served under ``/studio-data/v1`` (the spec's server path). Every
refusal, unknown route and internal error is JSON in the ``ErrorResponse`` shape; 429 and 503
carry ``Retry-After``. Logs carry ids and states, never SQL text, tokens or facts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import anyio.to_thread
from starlette._utils import get_route_path
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route, Router
from starlette.types import Receive, Scope, Send

from baml_studio.apierrors import (
    ApiError,
    BadRequest,
    Forbidden,
)
from baml_studio.control.service import Answer, ControlPlane
from baml_studio.httpbody import read_body
from baml_studio.httproutes import REQUEST_ID_HEADER, Refusals

log = logging.getLogger(__name__)

AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]
MAX_JSON_BODY = 1024 * 1024
BATCH_THREADS = 512
"""Projection batches handled at once; most of them wait in the fact store's coalescer for
their group, and the more wait together, the more batches share one ClickHouse insert (the
default thread pool's 40 would cap a group at 40)."""
_REFUSALS = Refusals(log, id_prefix="cp", realm="baml-workload")


def _respond(answer: Answer) -> Response:
    headers = dict(answer.headers or {})
    if answer.json is not None:
        return JSONResponse(answer.json, status_code=answer.status, headers=headers)
    return Response(answer.body or b"", answer.status, headers, media_type=answer.media_type)


def create_app(control: ControlPlane, *, on_started: Callable[[], None] | None = None) -> AsgiApp:
    """The app over ``control``. At startup it warms ``control`` up
    (:meth:`ControlPlane.warm_up`), then calls ``on_started`` (``serve control`` passes
    :func:`baml_studio.servergc.tune_for_serving`; tests leave their process's GC alone)."""
    batch_limit = control.config.batch_limits.max_body_bytes
    batch_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
        weakref.WeakKeyDictionary()
    )

    def _headers(request: Request) -> dict[str, str]:
        """The request's headers by lower-case name (the last of repeated ones), straight from
        the ASGI scope."""
        return {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in request.scope["headers"]
        }

    def _request_id(headers: dict[str, str], refusal: type[ApiError]) -> str:
        value = headers.get(REQUEST_ID_HEADER, "").strip()
        if not value:
            raise refusal("the X-Baml-Request-Id header is required", code="missing_request_id")
        return value

    def _batch_slots() -> asyncio.Semaphore:
        """:data:`BATCH_THREADS` batches at once, per event loop (made inside it)."""
        loop = asyncio.get_running_loop()
        slots = batch_slots.get(loop)
        if slots is None:
            slots = batch_slots[loop] = asyncio.Semaphore(BATCH_THREADS)
        return slots

    async def _run(
        request: Request,
        operation: str,
        call: Callable[[dict[str, str], bytes], Answer],
        limit: int,
        *,
        missing_request_id: type[ApiError] = BadRequest,
    ) -> Response:
        headers = _headers(request)
        request_id = headers.get(REQUEST_ID_HEADER)
        try:
            _request_id(headers, missing_request_id)
            body = await read_body(request, limit) if request.method in ("PUT", "POST") else b""
            answer = await run_in_threadpool(call, headers, body)
        except ApiError as exc:
            return _REFUSALS.refused(operation, exc, request_id)
        return _respond(answer)

    async def projection_schemas(request: Request) -> Response:
        version = request.path_params["catalog_version"]
        # getProjectionSchemas documents no 400: a missing request id is refused with 403
        return await _run(
            request,
            "projection_schemas",
            lambda h, _b: control.projection_schemas(h, version),
            0,
            missing_request_id=Forbidden,
        )

    async def projection_batch(request: Request) -> Response:
        return await _batch(request, request.path_params["batch_id"])

    async def _batch(request: Request, batch_id: str) -> Response:
        headers = _headers(request)
        request_id = headers.get(REQUEST_ID_HEADER)
        try:
            _request_id(headers, BadRequest)
            body = await read_body(request, batch_limit)
            async with _batch_slots():
                answer = await control.put_batch_async(headers, batch_id, body)
        except ApiError as exc:
            return _REFUSALS.refused("projection_batch", exc, request_id)
        return _respond(answer)

    async def projection_erasure(request: Request) -> Response:
        return await _run(request, "projection_erasure", control.erase, MAX_JSON_BODY)

    async def query_snapshot(request: Request) -> Response:
        return await _run(request, "query_snapshot", control.snapshot, MAX_JSON_BODY)

    async def resident_query(request: Request) -> Response:
        return await _run(request, "resident_query", control.resident_query, MAX_JSON_BODY)

    async def jwks(request: Request) -> Response:
        return _respond(await run_in_threadpool(control.jwks))

    async def revocations(request: Request) -> Response:
        try:
            return _respond(await run_in_threadpool(control.revocations))
        except ApiError as exc:
            return _REFUSALS.response(exc, request.headers.get(REQUEST_ID_HEADER))

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def http_error(request: Request, exc: Exception) -> Response:
        return _REFUSALS.router_error(request, exc)

    async def internal(request: Request, exc: Exception) -> Response:
        log.error(
            "control plane internal error on %s: %s",
            request.url.path,
            type(exc).__name__,
            exc_info=exc,
        )
        return _REFUSALS.response(
            ApiError("internal error; retry later or report it"),
            request.headers.get(REQUEST_ID_HEADER),
        )

    workload = [
        Route("/projection-schemas/{catalog_version}", projection_schemas, methods=["GET"]),
        Route("/projection-batches/{batch_id}", projection_batch, methods=["PUT"]),
        Route("/projection-erasures", projection_erasure, methods=["POST"]),
        Route("/query-snapshots", query_snapshot, methods=["POST"]),
        Route("/resident-queries", resident_query, methods=["POST"]),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await anyio.to_thread.run_sync(control.warm_up)  # also loads anyio's thread backend
        if on_started is not None:
            on_started()
        yield

    routed = Starlette(
        lifespan=lifespan,
        routes=[
            *workload,
            Mount("/studio-data/v1", routes=workload),
            Route("/.well-known/jwks.json", jwks, methods=["GET"]),
            Route("/token-revocations", revocations, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
        ],
        exception_handlers={HTTPException: http_error, Exception: internal},
    )
    # no 307 from /projection-schemas/v1/ to /projection-schemas/v1: its Location was built
    # from the Host header; a path with a stray slash is a 404 like any other unknown path
    routed.router.redirect_slashes = False
    for route in routed.routes:
        if isinstance(route, Mount) and isinstance(route.app, Router):
            route.app.redirect_slashes = False

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        """``PUT /projection-batches/{batch_id}`` straight to its handler (the projector
        sends one per execution, relation and partition: Starlette's middleware and router
        were ~10 % of the control plane's Python per batch); everything else routed."""
        batch_id = _batch_route(scope)
        if batch_id is None:
            await routed(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            response = await _batch(request, batch_id)
        except Exception as exc:  # answered as the router's handler answers it
            response = await internal(request, exc)
        await response(scope, receive, send)

    return app


BATCH_ROUTES = ("/projection-batches/", "/studio-data/v1/projection-batches/")


def _batch_route(scope: Scope) -> str | None:
    """The batch id of a ``PUT`` of one projection batch, matched as the router matches
    ``/projection-batches/{batch_id}`` (a non-empty last segment); ``None`` for any other
    request."""
    if scope["type"] != "http" or scope["method"] != "PUT":
        return None
    path = get_route_path(scope)
    for prefix in BATCH_ROUTES:
        if path.startswith(prefix):
            batch_id: str = path[len(prefix) :]
            return batch_id if batch_id and "/" not in batch_id else None
    return None
