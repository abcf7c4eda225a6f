"""What the HTTP services' Starlette routes share: an :class:`~baml_studio.apierrors.ApiError`
answered as an ``ErrorResponse`` and logged with ids only (:class:`Refusals`), and the
``Idempotency-Key`` header.

Each service names its own request id prefix (used when the client sent no
``X-Baml-Request-Id``), its ``WWW-Authenticate`` realm and its logger; the body, status and
headers are :func:`~baml_studio.apierrors.error_body` and
:func:`~baml_studio.apierrors.error_headers` for all of them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from baml_studio.apierrors import (
    ApiError,
    BadRequest,
    MethodNotAllowed,
    NotFound,
    error_body,
    error_headers,
)

REQUEST_ID_HEADER = "x-baml-request-id"
IDEMPOTENCY_HEADER = "idempotency-key"
MAX_IDEMPOTENCY_KEY_CHARS = 256

Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class Refusals:
    """How one service answers and logs its refusals."""

    log: logging.Logger
    id_prefix: str
    """A request without ``X-Baml-Request-Id`` gets ``<id_prefix>_<32 hex>`` in its answer."""
    realm: str = "baml"
    """The ``WWW-Authenticate`` realm of a 401."""

    def response(self, error: ApiError, request_id: str | None) -> JSONResponse:
        """``error`` as an ``ErrorResponse`` with its status and headers."""
        return JSONResponse(
            error_body(error, request_id or f"{self.id_prefix}_{uuid.uuid4().hex}"),
            status_code=error.status,
            headers=error_headers(error, realm=self.realm),
        )

    def refused(self, operation: str, error: ApiError, request_id: str | None) -> JSONResponse:
        """:meth:`response`, after logging the refusal (operation, request id, status, code:
        never the message, which may quote the request)."""
        self.log.info(
            "%s refused request_id=%s status=%d code=%s",
            operation,
            request_id,
            error.status,
            error.code,
        )
        return self.response(error, request_id)

    def router_error(self, request: Request, exc: Exception) -> JSONResponse:
        """The router's own refusals (no route, a route without the method) as an
        ``ErrorResponse``, with the router's headers (``Allow`` of a 405)."""
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        error: ApiError
        if status == 405:
            error = MethodNotAllowed(f"{request.method} is not allowed on {request.url.path}")
        elif status == 404:
            error = NotFound(f"no route {request.method} {request.url.path}")
        else:
            error = ApiError(f"HTTP {status}")
            error.status = status
        response = self.response(error, request.headers.get(REQUEST_ID_HEADER))
        if isinstance(exc, HTTPException) and exc.headers:
            response.headers.update(exc.headers)
        return response

    def guarded(self, operation: str, handler: Handler) -> Handler:
        """``handler`` with every :class:`ApiError` it raises answered by :meth:`refused`."""

        async def endpoint(request: Request) -> Response:
            try:
                return await handler(request)
            except ApiError as exc:
                return self.refused(operation, exc, request.headers.get(REQUEST_ID_HEADER))

        return endpoint


def idempotency_key(request: Request) -> str | None:
    """The optional ``Idempotency-Key``: absent, or 1 to 256 characters (else 400)."""
    value = request.headers.get(IDEMPOTENCY_HEADER)
    return None if value is None else _checked_key(value, ", or omit it")


def required_idempotency_key(request: Request, missing: str) -> str:
    """The ``Idempotency-Key`` of 1 to 256 characters; absent, 400 ``missing_idempotency_key``
    with the message ``missing``."""
    value = request.headers.get(IDEMPOTENCY_HEADER)
    if value is None:
        raise BadRequest(missing, code="missing_idempotency_key")
    return _checked_key(value, "")


def _checked_key(value: str, hint: str) -> str:
    if not value or len(value) > MAX_IDEMPOTENCY_KEY_CHARS:
        raise BadRequest(
            f"Idempotency-Key has {len(value)} characters; send 1 to "
            f"{MAX_IDEMPOTENCY_KEY_CHARS} (e.g. a UUID){hint}",
            code="invalid_idempotency_key",
        )
    return value
