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

from typing import Any

from baml_studio.apierrors import (
    DEFAULT_RETRY_AFTER_S,
    ApiError,
    BadRequest,
    Conflict,
    DependencyUnavailable,
    Forbidden,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    TooManyRequests,
    Unauthenticated,
)
from baml_studio.apierrors import error_body as _error_body
from baml_studio.apierrors import error_headers as _error_headers

GatewayError = ApiError
"""The gateway's errors are the shared API errors (:mod:`baml_studio.apierrors`)."""

__all__ = [
    "DEFAULT_RETRY_AFTER_S",
    "BadRequest",
    "DependencyUnavailable",
    "Forbidden",
    "GatewayError",
    "InvalidKeyField",
    "KeyringError",
    "MethodNotAllowed",
    "NotFound",
    "NotProvisioned",
    "PayloadTooLarge",
    "TooManyRequests",
    "Unauthenticated",
    "error_body",
    "error_headers",
]


class InvalidKeyField(BadRequest):
    code = "invalid_key_field"


class NotProvisioned(Conflict):
    code = "environment_not_provisioned"


class KeyringError(ApiError):
    """The publisher token key file cannot be read, parsed or written."""

    status = 500
    code = "keyring_error"


def error_body(error: ApiError, request_id: str) -> dict[str, Any]:
    """The ``ErrorResponse`` JSON for ``error``."""
    return _error_body(error, request_id)


def error_headers(error: ApiError) -> dict[str, str]:
    """``Retry-After`` for transient errors, ``WWW-Authenticate`` for 401."""
    return _error_headers(error, realm="baml-publisher")
