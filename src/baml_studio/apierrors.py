"""Typed HTTP API errors shared by the gateway and the control plane.

Each error is one HTTP answer in the ``ErrorResponse`` shape of ``openapi.yaml``::

    BamlStudioError
    └── ApiError                       .status .code .retryable .details .retry_after
        ├── BadRequest                 400 a body, header or path that does not match the contract
        ├── Unauthenticated            401 token missing, malformed, badly signed, expired, revoked
        ├── Forbidden                  403 a valid token of the wrong kind, or another scope
        ├── NotFound                   404 no such route or resource within the caller's scope
        ├── MethodNotAllowed           405 the route exists with another method
        ├── Conflict                   409 idempotency, digest or state conflict
        ├── PayloadTooLarge            413 a body or a result over its limit
        ├── TooManyRequests            429 transient: concurrency or rate budget exceeded
        └── DependencyUnavailable      503 transient: a store the service depends on failed

``retryable`` is true only for 429 and 503, which also carry ``Retry-After`` (seconds).
:func:`error_body` renders any of them as ``{"error": {code, message, request_id, retryable,
details}}``; :func:`error_headers` gives the headers that go with it. :func:`key_reused` is
the 409 of an ``Idempotency-Key`` sent again with a different request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from baml_studio.format.errors import BamlStudioError

DEFAULT_RETRY_AFTER_S = 1


class ApiError(BamlStudioError):
    """One refused request; ``code`` is a stable snake_case name, ``details`` is JSON-able."""

    status = 500
    code = "internal_error"
    retryable = False

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        details: Mapping[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details: dict[str, Any] = dict(details or {})
        self.retry_after = retry_after


class BadRequest(ApiError):
    status = 400
    code = "invalid_request"


class Unauthenticated(ApiError):
    status = 401
    code = "unauthenticated"


class Forbidden(ApiError):
    status = 403
    code = "forbidden"


class NotFound(ApiError):
    status = 404
    code = "not_found"


class MethodNotAllowed(ApiError):
    status = 405
    code = "method_not_allowed"


class Conflict(ApiError):
    status = 409
    code = "conflict"


class PayloadTooLarge(ApiError):
    status = 413
    code = "payload_too_large"


class _Transient(ApiError):
    retryable = True

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        details: Mapping[str, Any] | None = None,
        retry_after: int | None = DEFAULT_RETRY_AFTER_S,
    ) -> None:
        super().__init__(message, code=code, details=details, retry_after=retry_after)


class TooManyRequests(_Transient):
    status = 429
    code = "too_many_requests"


class DependencyUnavailable(_Transient):
    status = 503
    code = "dependency_unavailable"


def key_reused(*, holder: str, holder_id: str, id_field: str, compared: str, new: str) -> Conflict:
    """409 ``idempotency_key_reused``: the key already names ``holder`` ``holder_id`` (e.g. query
    job ``job_…``, its id in ``details[id_field]``), made from a different ``compared`` (e.g.
    request); a ``new`` one (e.g. query) needs a new key."""
    return Conflict(
        f"Idempotency-Key was already used for {holder} {holder_id} with a different "
        f"{compared}; send a new key for a new {new}",
        code="idempotency_key_reused",
        details={id_field: holder_id},
    )


def error_body(error: ApiError, request_id: str) -> dict[str, Any]:
    """The ``ErrorResponse`` JSON for ``error``."""
    return {
        "error": {
            "code": error.code,
            "message": error.message,
            "request_id": request_id,
            "retryable": error.retryable,
            "details": error.details,
        }
    }


def error_headers(error: ApiError, *, realm: str = "baml") -> dict[str, str]:
    """``Retry-After`` for transient errors, ``WWW-Authenticate`` for 401."""
    headers: dict[str, str] = {}
    if error.retry_after is not None:
        headers["Retry-After"] = str(error.retry_after)
    if error.status == 401:
        headers["WWW-Authenticate"] = f'Bearer realm="{realm}"'
    return headers
