"""Map botocore's exceptions to the port's typed errors (the S3 adapter's only error boundary)."""

from __future__ import annotations

from typing import Any

from botocore import exceptions as boto_exc  # type: ignore[import-untyped]  # reason: untyped

from baml_studio.objectstore.errors import (
    BucketNotFound,
    ChecksumMismatch,
    InvalidArgument,
    ObjectAlreadyExists,
    ObjectNotFound,
    ObjectStoreAccessDenied,
    ObjectStoreError,
    ObjectStoreUnavailable,
)

VENDOR_ERRORS: tuple[type[Exception], ...] = (boto_exc.ClientError, boto_exc.BotoCoreError)
"""Catch these around every boto3 call and pass them to :func:`map_error`."""

_NOT_FOUND = frozenset({"404", "NoSuchKey", "NotFound", "NoSuchVersion"})
_PRECONDITION = frozenset({"412", "PreconditionFailed"})
_BAD_DIGEST = frozenset({"BadDigest", "InvalidDigest", "XAmzContentSHA256Mismatch"})
_DENIED = frozenset(
    {
        "403",
        "AccessDenied",
        "AllAccessDisabled",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
    }
)
_TRANSIENT = frozenset(
    {
        "SlowDown",
        "ServiceUnavailable",
        "InternalError",
        "RequestTimeout",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "ConditionalRequestConflict",
        "OperationAborted",
    }
)


def _client_error(exc: Any, key: str | None, sha256: str | None, bucket: str) -> ObjectStoreError:
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    text = f"S3 {code or status} on bucket {bucket!r}, key {key!r}: {error.get('Message', exc)}"
    if code == "NoSuchBucket":
        return BucketNotFound(
            f"bucket {bucket!r} does not exist; create it (with versioning) or fix the config",
            key=key,
        )
    if key is not None and code in _NOT_FOUND:
        return ObjectNotFound(key)
    if key is not None and code in _PRECONDITION:
        return ObjectAlreadyExists(key)
    if key is not None and code in _BAD_DIGEST:
        return ChecksumMismatch(key, sha256 or "?", None)
    if code in _DENIED:
        return ObjectStoreAccessDenied(text + "; check the credentials and bucket policy", key=key)
    if code in _TRANSIENT or status >= 500 or status == 429:
        return ObjectStoreUnavailable(text, key=key)
    if code == "InvalidArgument" or status == 400:
        return InvalidArgument(text, key=key)
    return ObjectStoreError(text, key=key)


def map_error(
    exc: Exception, *, bucket: str, key: str | None = None, sha256: str | None = None
) -> ObjectStoreError:
    """The typed error for a botocore exception raised while operating on ``key``."""
    if isinstance(exc, boto_exc.ClientError):
        return _client_error(exc, key, sha256, bucket)
    if isinstance(exc, boto_exc.ConnectionError | boto_exc.HTTPClientError):
        return ObjectStoreUnavailable(f"S3 unreachable for key {key!r}: {exc}", key=key)
    if isinstance(
        exc,
        boto_exc.NoCredentialsError
        | boto_exc.PartialCredentialsError
        | boto_exc.CredentialRetrievalError,
    ):
        return ObjectStoreAccessDenied(f"no usable S3 credentials: {exc}", key=key)
    if isinstance(exc, boto_exc.ParamValidationError):
        return InvalidArgument(f"S3 rejected the request parameters: {exc}", key=key)
    return ObjectStoreError(f"S3 client error for key {key!r}: {exc}", key=key)
