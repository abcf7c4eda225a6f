"""The S3 adapter beyond the conformance suite: error mapping at the boto boundary, an
unreachable endpoint, a missing bucket, and the presign endpoint override."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from botocore.exceptions import (  # type: ignore[import-untyped]  # reason: untyped
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    ReadTimeoutError,
)
from objectstore_harness import s3_store_config, sha

from baml_studio.objectstore import (
    BucketNotFound,
    ChecksumMismatch,
    InvalidArgument,
    ObjectAlreadyExists,
    ObjectNotFound,
    ObjectStoreAccessDenied,
    ObjectStoreError,
    ObjectStoreUnavailable,
    S3Config,
    open_object_store,
)
from baml_studio.objectstore.s3 import S3ObjectStore
from baml_studio.objectstore.s3_errors import map_error
from ministack_fixture import free_port


def client_error(code: str, status: int) -> ClientError:
    response = {
        "Error": {"Code": code, "Message": "m"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, "PutObject")


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("404", 404, ObjectNotFound),
        ("NoSuchKey", 404, ObjectNotFound),
        ("PreconditionFailed", 412, ObjectAlreadyExists),
        ("BadDigest", 400, ChecksumMismatch),
        ("InvalidDigest", 400, ChecksumMismatch),
        ("NoSuchBucket", 404, BucketNotFound),
        ("AccessDenied", 403, ObjectStoreAccessDenied),
        ("SignatureDoesNotMatch", 403, ObjectStoreAccessDenied),
        ("SlowDown", 503, ObjectStoreUnavailable),
        ("InternalError", 500, ObjectStoreUnavailable),
        ("ConditionalRequestConflict", 409, ObjectStoreUnavailable),
        ("Whatever", 502, ObjectStoreUnavailable),
        ("InvalidArgument", 400, InvalidArgument),
        ("MethodNotAllowed", 405, ObjectStoreError),
    ],
)
def test_client_errors_map_to_typed_errors(code: str, status: int, expected: type) -> None:
    error = map_error(client_error(code, status), bucket="bkt", key="k", sha256="ab" * 32)
    assert type(error) is expected
    assert error.transient is (expected is ObjectStoreUnavailable)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), ObjectStoreUnavailable),
        (ReadTimeoutError(endpoint_url="http://127.0.0.1:1"), ObjectStoreUnavailable),
        (NoCredentialsError(), ObjectStoreAccessDenied),
        (ParamValidationError(report="bad"), InvalidArgument),
    ],
)
def test_botocore_errors_map_to_typed_errors(exc: Exception, expected: type) -> None:
    assert type(map_error(exc, bucket="bkt", key="k")) is expected


def test_unreachable_endpoint_is_transient() -> None:
    config = S3Config(
        bucket="bkt",
        endpoint_url=f"http://127.0.0.1:{free_port()}",
        access_key_id="test",
        secret_access_key="test",
        connect_timeout_seconds=0.5,
        max_attempts=1,
    )
    store = open_object_store(config)
    with pytest.raises(ObjectStoreUnavailable) as caught:
        store.head("k")
    assert caught.value.transient
    assert isinstance(caught.value.__cause__, EndpointConnectionError)


def test_missing_bucket_is_reported(ministack_endpoint: str, ministack_s3: Any) -> None:
    store = S3ObjectStore(
        s3_store_config(ministack_endpoint, f"missing-{uuid.uuid4().hex[:16]}"), client=ministack_s3
    )
    with pytest.raises(BucketNotFound, match="does not exist"):
        store.put_if_absent("k", b"x", sha(b"x"))
    with pytest.raises(BucketNotFound):
        list(store.list())


def test_ensure_bucket_is_idempotent_and_versioned(
    ministack_endpoint: str, ministack_s3: Any
) -> None:
    bucket = f"ens-{uuid.uuid4().hex[:16]}"
    store = S3ObjectStore(s3_store_config(ministack_endpoint, bucket), client=ministack_s3)
    store.ensure_bucket()
    store.ensure_bucket()
    status = ministack_s3.get_bucket_versioning(Bucket=bucket).get("Status")
    assert status == "Enabled"


def test_presign_endpoint_override(ministack_endpoint: str) -> None:
    config = s3_store_config(ministack_endpoint, "some-bucket")
    public = S3Config(
        bucket=config.bucket,
        endpoint_url=config.endpoint_url,
        presign_endpoint_url="http://uploads.example.test:9000",
        access_key_id="test",
        secret_access_key="test",
    )
    presigned = S3ObjectStore(public).presign_put("a/b", 3, sha(b"abc"), 60)
    assert presigned.url.startswith("http://uploads.example.test:9000/some-bucket/a/b?")


def test_secrets_stay_out_of_repr() -> None:
    config = S3Config(bucket="bkt", access_key_id="AKIA", secret_access_key="s3cr3t")
    assert "s3cr3t" not in repr(config)
    with pytest.raises(InvalidArgument, match="both"):
        S3Config(bucket="bkt", access_key_id="AKIA")
