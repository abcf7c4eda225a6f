"""The HTTP face of erasure: two Starlette routes over an :class:`~.manager.ErasureManager`.

Routes (openapi.yaml ``createErasure``, ``getErasure``)::

    POST /v1/erasures               202 Erasure (queued, or the Idempotency-Key's erasure)
    GET  /v1/erasures/{erasure_id}  200 Erasure

Both need a user token with the erasure permission (401 without a valid token, 403
``permission_denied`` without the permission). ``POST`` also needs ``Idempotency-Key`` (1 to
256 characters) and a body that is an ``ErasureRequest``. The environment comes from the
optional ``X-Baml-Environment-Id`` header (the body has no room for it), else the token's only
environment; the token must grant it (403 ``scope_mismatch``). Every refusal is an
``ErrorResponse``; blocking work runs in a worker thread. A ``GET`` of an erasure of another
scope is 404, like one that does not exist.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from baml_studio.apierrors import ApiError, BadRequest
from baml_studio.control.identity import UserIdentity
from baml_studio.coordinator.app_jobs import (
    MAX_IDEMPOTENCY_KEY_CHARS,
    REQUEST_ID_HEADER,
    error_response,
)
from baml_studio.coordinator.auth import UserTokenAuth
from baml_studio.erasure.manager import ErasureManager
from baml_studio.erasure.selector import parse_selector
from baml_studio.httpbody import read_body

log = logging.getLogger(__name__)

IDEMPOTENCY_HEADER = "idempotency-key"
ENVIRONMENT_HEADER = "x-baml-environment-id"
MAX_ERASURE_BODY_BYTES = 4 << 20
_NO_STORE = {"Cache-Control": "no-store"}

Authenticate = Callable[[Request], UserIdentity]


def erasure_routes(manager: ErasureManager, authenticate: Authenticate) -> list[Route]:
    """The two routes; ``authenticate`` verifies the caller's user token."""

    def authorised(request: Request) -> UserIdentity:
        identity = authenticate(request)
        UserTokenAuth.require_erasure(identity)
        return identity

    async def create(request: Request) -> Response:
        identity = await run_in_threadpool(authorised, request)
        key = idempotency_key(request)
        body = await read_body(request, MAX_ERASURE_BODY_BYTES)
        selector = parse_selector(body, max_items=manager.config.max_selector_items)
        scope = UserTokenAuth.scope_for(identity, environment(request))
        erasure, _ = await run_in_threadpool(manager.create, scope, selector, key)
        location = f"{str(request.base_url).rstrip('/')}/v1/erasures/{erasure['erasure_id']}"
        return JSONResponse(erasure, status_code=202, headers={**_NO_STORE, "Location": location})

    async def read(request: Request) -> Response:
        identity = await run_in_threadpool(authorised, request)
        erasure_id = request.path_params["erasure_id"]
        erasure = await run_in_threadpool(manager.get, erasure_id, identity)
        return JSONResponse(erasure, headers=_NO_STORE)

    return [
        Route("/v1/erasures", _guarded("createErasure", create), methods=["POST"]),
        Route("/v1/erasures/{erasure_id}", _guarded("getErasure", read), methods=["GET"]),
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
                operation, request_id, exc.status, exc.code,
            )  # fmt: skip
            return error_response(exc, request_id)

    return endpoint


def idempotency_key(request: Request) -> str:
    """The required ``Idempotency-Key``: 1 to 256 characters, else 400."""
    value = request.headers.get(IDEMPOTENCY_HEADER)
    if value is None:
        raise BadRequest(
            "POST /v1/erasures needs an Idempotency-Key header (1 to 256 characters, e.g. a "
            "UUID); resend the same key to get the same erasure back",
            code="missing_idempotency_key",
        )
    if not value or len(value) > MAX_IDEMPOTENCY_KEY_CHARS:
        raise BadRequest(
            f"Idempotency-Key has {len(value)} characters; send 1 to "
            f"{MAX_IDEMPOTENCY_KEY_CHARS} (e.g. a UUID)",
            code="invalid_idempotency_key",
        )
    return value


def environment(request: Request) -> str | None:
    """The ``X-Baml-Environment-Id`` header, if sent (non-empty)."""
    value = request.headers.get(ENVIRONMENT_HEADER)
    if value is not None and not value:
        raise BadRequest(
            "X-Baml-Environment-Id is empty; name an environment the token grants or omit it",
            code="invalid_environment_header",
        )
    return value
