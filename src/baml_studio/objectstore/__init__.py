"""The object store port and its two adapters.

- :class:`~baml_studio.objectstore.directory.DirectoryBucket`: the embedded default, a bucket as
  files on local disk, with HMAC-signed presigned PUT URLs served by
  :func:`~baml_studio.objectstore.presigned_http.handle_presigned_put`.
- :class:`~baml_studio.objectstore.s3.S3ObjectStore`: S3 or any S3-compatible store via boto3.

Both pass the conformance suite in ``tests/objectstore/``. boto3 is imported only when an S3
store is opened.
"""

from __future__ import annotations

from baml_studio.objectstore.config import DirectoryBucketConfig, S3Config
from baml_studio.objectstore.errors import (
    BucketNotFound,
    ChecksumMismatch,
    InvalidArgument,
    InvalidObjectKey,
    ObjectAlreadyExists,
    ObjectNotFound,
    ObjectStoreAccessDenied,
    ObjectStoreCorrupt,
    ObjectStoreError,
    ObjectStoreUnavailable,
    PresignedRequestRejected,
    SignatureExpired,
    SignatureInvalid,
)
from baml_studio.objectstore.port import ObjectInfo, ObjectStore, PresignedPut, PutResult

__all__ = [
    "BucketNotFound",
    "ChecksumMismatch",
    "DirectoryBucketConfig",
    "InvalidArgument",
    "InvalidObjectKey",
    "ObjectAlreadyExists",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "ObjectStoreAccessDenied",
    "ObjectStoreCorrupt",
    "ObjectStoreError",
    "ObjectStoreUnavailable",
    "PresignedPut",
    "PresignedRequestRejected",
    "PutResult",
    "S3Config",
    "SignatureExpired",
    "SignatureInvalid",
    "open_object_store",
]


def open_object_store(config: DirectoryBucketConfig | S3Config) -> ObjectStore:
    """The adapter the configuration names."""
    if isinstance(config, S3Config):
        from baml_studio.objectstore.s3 import S3ObjectStore

        return S3ObjectStore(config)
    from baml_studio.objectstore.directory import DirectoryBucket

    return DirectoryBucket(config)
