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
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from baml_studio.apierrors import BadRequest
from baml_studio.control.identity import UserIdentity
from baml_studio.coordinator.auth import UserTokenAuth
from baml_studio.erasure.manager import ErasureManager
from baml_studio.erasure.selector import parse_selector
from baml_studio.httpbody import read_body
from baml_studio.httproutes import Refusals, required_idempotency_key

log = logging.getLogger(__name__)

ENVIRONMENT_HEADER = "x-baml-environment-id"
MAX_ERASURE_BODY_BYTES = 4 << 20
_NO_STORE = {"Cache-Control": "no-store"}
_REFUSALS = Refusals(log, id_prefix="cq")
_MISSING_KEY = (
    "POST /v1/erasures needs an Idempotency-Key header (1 to 256 characters, e.g. a UUID); "
    "resend the same key to get the same erasure back"
)

Authenticate = Callable[[Request], UserIdentity]


def erasure_routes(manager: ErasureManager, authenticate: Authenticate) -> list[Route]:
    """The two routes; ``authenticate`` verifies the caller's user token."""

    def authorised(request: Request) -> UserIdentity:
        identity = authenticate(request)
        UserTokenAuth.require_erasure(identity)
        return identity

    async def create(request: Request) -> Response:
        identity = await run_in_threadpool(authorised, request)
        key = required_idempotency_key(request, _MISSING_KEY)
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

    guarded = _REFUSALS.guarded
    return [
        Route("/v1/erasures", guarded("createErasure", create), methods=["POST"]),
        Route("/v1/erasures/{erasure_id}", guarded("getErasure", read), methods=["GET"]),
    ]


def environment(request: Request) -> str | None:
    """The ``X-Baml-Environment-Id`` header, if sent (non-empty)."""
    value = request.headers.get(ENVIRONMENT_HEADER)
    if value is not None and not value:
        raise BadRequest(
            "X-Baml-Environment-Id is empty; name an environment the token grants or omit it",
            code="invalid_environment_header",
        )
    return value
