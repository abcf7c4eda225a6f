"""The gateway's ASGI app (Starlette).

Routes::

    GET  /v1/publisher/config            PublisherConfig (Cache-Control: max-age=300)
    POST /v1/uploads/authorize           AuthorizeUploadResponse
    PUT  /bucket/{bucket}/{key:path}     presigned create-only PUT, only when the store is a
                                         DirectoryBucket (S3-shaped XML answers, see
                                         objectstore/presigned_http.py)

Every other answer of the two API routes, and every unknown route or method, is JSON in the
``ErrorResponse`` shape; 429 and 503 carry ``Retry-After``. The blocking work (token check,
``head`` calls, presigning) runs in a worker thread.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from baml_studio.gateway.authorize import REQUEST_ID_HEADER, Gateway
from baml_studio.gateway.errors import GatewayError
from baml_studio.httpbody import read_body
from baml_studio.httproutes import Refusals
from baml_studio.objectstore.asgi import presigned_put_app
from baml_studio.objectstore.directory import DirectoryBucket
from baml_studio.objectstore.presign import PATH_PREFIX

log = logging.getLogger(__name__)

AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]
_REFUSALS = Refusals(log, id_prefix="gw", realm="baml-publisher")


def _headers(request: Request) -> dict[str, str]:
    return {name.lower(): value for name, value in request.headers.items()}


def create_app(
    gateway: Gateway,
    *,
    bucket: DirectoryBucket | None = None,
    routes: Sequence[BaseRoute] = (),
) -> AsgiApp:
    """The gateway app; with ``bucket`` it also serves that directory bucket's presigned PUTs;
    ``routes`` are served beside the gateway's (the query coordinator's)."""

    async def publisher_config(request: Request) -> Response:
        headers = _headers(request)
        try:
            config = await run_in_threadpool(gateway.publisher_config, headers)
        except GatewayError as exc:
            return _REFUSALS.refused("publisher_config", exc, headers.get(REQUEST_ID_HEADER))
        max_age = gateway.config.config_max_age_seconds
        return JSONResponse(config, headers={"Cache-Control": f"max-age={max_age}"})

    async def authorize(request: Request) -> Response:
        headers = _headers(request)
        try:
            body = await read_body(request, gateway.config.max_request_bytes)
            answer = await run_in_threadpool(gateway.authorize, headers, body)
        except GatewayError as exc:
            return _REFUSALS.refused("authorize", exc, headers.get(REQUEST_ID_HEADER))
        return JSONResponse(answer, headers={"Cache-Control": "no-store"})

    async def not_found(request: Request, exc: Exception) -> Response:
        return _REFUSALS.router_error(request, exc)

    async def internal(request: Request, exc: Exception) -> Response:
        log.error("gateway internal error on %s: %s", request.url.path, type(exc).__name__)
        return _REFUSALS.response(
            GatewayError("internal error; retry later or report it"),
            request.headers.get(REQUEST_ID_HEADER),
        )

    api = Starlette(
        routes=[
            Route("/v1/publisher/config", publisher_config, methods=["GET"]),
            Route("/v1/uploads/authorize", authorize, methods=["POST"]),
            *routes,
        ],
        exception_handlers={HTTPException: not_found, Exception: internal},
    )
    # no 307 from /v1/query/ to /v1/query: its Location was built from the Host header
    api.router.redirect_slashes = False
    if bucket is None:
        return api
    uploads = presigned_put_app(bucket, max_body_bytes=gateway.config.limits.max_object_bytes)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(PATH_PREFIX):
            await uploads(scope, receive, send)
        else:
            await api(scope, receive, send)

    return app
