"""Typed errors of the object store port.

Exception tree::

    BamlStudioError
    └── ObjectStoreError                 any object store failure; ``.key`` when one key is involved
        ├── InvalidObjectKey             a key the store cannot hold (empty, ``..``, too long, ...)
        ├── InvalidArgument              a bad checksum format, size, range or expiry
        ├── ObjectNotFound               no object under the key
        ├── ObjectAlreadyExists          create-only put: the key is taken (S3 412)
        ├── ChecksumMismatch             the bytes do not hash to the declared SHA-256 (BadDigest)
        ├── PresignedRequestRejected     a presigned PUT failed verification (directory bucket)
        │   ├── SignatureInvalid         missing, malformed or tampered signature parameters
        │   └── SignatureExpired         the URL was used after its expiry
        ├── ObjectStoreAccessDenied      the store refused our credentials (403 from S3)
        ├── BucketNotFound               the configured bucket does not exist
        ├── ObjectStoreCorrupt           directory bucket state not written by this port
        └── ObjectStoreUnavailable       transient: connection, timeout, 5xx, throttling, OS errors

``transient`` is True only for :class:`ObjectStoreUnavailable`: retrying the same call may
succeed. Every other error is terminal for the same input. Adapters wrap vendor errors
(botocore, ``OSError``) with ``raise ... from exc``; nothing else escapes the port.
"""

from __future__ import annotations

from baml_studio.format.errors import BamlStudioError


class ObjectStoreError(BamlStudioError):
    """Any failure of an object store operation."""

    transient = False

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class InvalidObjectKey(ObjectStoreError):
    """The key cannot name an object in this store."""


class InvalidArgument(ObjectStoreError):
    """A checksum, size, byte range or expiry outside what the port accepts."""


class ObjectNotFound(ObjectStoreError):
    """No object exists under the key."""

    def __init__(self, key: str) -> None:
        super().__init__(f"no object under key {key!r}", key=key)


class ObjectAlreadyExists(ObjectStoreError):
    """A create-only put found the key already taken; the stored object is unchanged."""

    def __init__(self, key: str) -> None:
        super().__init__(
            f"an object already exists under key {key!r}; objects are create-only, "
            "so HEAD it and compare checksums instead of writing again",
            key=key,
        )


class ChecksumMismatch(ObjectStoreError):
    """The bytes do not match the declared SHA-256; nothing was stored."""

    def __init__(self, key: str, expected: str, actual: str | None) -> None:
        detail = f", the bytes hash to {actual}" if actual else ""
        super().__init__(
            f"checksum mismatch for key {key!r}: declared sha256 {expected}{detail}; "
            "nothing was stored — recompute the SHA-256 over the exact bytes sent",
            key=key,
        )
        self.expected = expected
        self.actual = actual


class PresignedRequestRejected(ObjectStoreError):
    """A presigned PUT did not pass verification."""


class SignatureInvalid(PresignedRequestRejected):
    """Signature parameters are missing, malformed, or do not match the request."""


class SignatureExpired(PresignedRequestRejected):
    """The presigned URL was used after ``expires_at``."""


class ObjectStoreAccessDenied(ObjectStoreError):
    """The store rejected the configured credentials or policy for this operation."""


class BucketNotFound(ObjectStoreError):
    """The configured bucket does not exist."""


class ObjectStoreCorrupt(ObjectStoreError):
    """On-disk state of the directory bucket that this port never writes (a missing sidecar)."""


class ObjectStoreUnavailable(ObjectStoreError):
    """A transient failure: the store could not be reached or failed internally. Retry."""

    transient = True
