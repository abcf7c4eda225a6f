"""Typed errors of the gateway, each one HTTP answer in the ``ErrorResponse`` shape.

Exception tree::

    BamlStudioError
    └── GatewayError                   .status .code .retryable .details .retry_after
        ├── BadRequest                 400 a body or header that does not match openapi.yaml
        │   └── InvalidKeyField        400 a field a key is computed from is out of range
        ├── Unauthenticated            401 token missing, malformed, badly signed or expired
        ├── Forbidden                  403 a valid token of the wrong kind, or another scope
        ├── NotFound                   404 no such route
        ├── MethodNotAllowed           405 the route exists with another method
        ├── NotProvisioned             409 the token's environment has no evidence prefix
        ├── PayloadTooLarge            413 an object over max_object_bytes, too many objects,
        │                                  or a body over the request limit
        ├── TooManyRequests            429 transient: concurrency budget exceeded
        ├── DependencyUnavailable      503 transient: the object store failed
        └── KeyringError               500 the token key file is missing or unreadable

``retryable`` is true only for 429 and 503, which also carry ``Retry-After`` (seconds).
:func:`error_body` renders any of them as ``{"error": {code, message, request_id, retryable,
details}}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from baml_studio.format.errors import BamlStudioError

DEFAULT_RETRY_AFTER_S = 1


class GatewayError(BamlStudioError):
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


class BadRequest(GatewayError):
    status = 400
    code = "invalid_request"


class InvalidKeyField(BadRequest):
    code = "invalid_key_field"


class Unauthenticated(GatewayError):
    status = 401
    code = "unauthenticated"


class Forbidden(GatewayError):
    status = 403
    code = "forbidden"


class NotFound(GatewayError):
    status = 404
    code = "not_found"


class MethodNotAllowed(GatewayError):
    status = 405
    code = "method_not_allowed"


class NotProvisioned(GatewayError):
    status = 409
    code = "environment_not_provisioned"


class PayloadTooLarge(GatewayError):
    status = 413
    code = "payload_too_large"


class _Transient(GatewayError):
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


class KeyringError(GatewayError):
    """The publisher token key file cannot be read, parsed or written."""

    status = 500
    code = "keyring_error"


def error_body(error: GatewayError, request_id: str) -> dict[str, Any]:
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


def error_headers(error: GatewayError) -> dict[str, str]:
    """``Retry-After`` for transient errors, ``WWW-Authenticate`` for 401."""
    headers: dict[str, str] = {}
    if error.retry_after is not None:
        headers["Retry-After"] = str(error.retry_after)
    if error.status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="baml-publisher"'
    return headers
