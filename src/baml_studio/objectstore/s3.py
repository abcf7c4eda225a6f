"""The S3 adapter of the object store port, through boto3 (AWS or any S3-compatible store).

Create-only puts send ``If-None-Match: *`` and ``x-amz-checksum-sha256``; presigned PUT URLs are
SigV4 (forced: botocore's SigV2 fallback would not sign those headers) and sign
``If-None-Match``, ``x-amz-checksum-sha256`` and ``Content-Length``, so S3 refuses any other key,
size or checksum. Erasure deletes every version and delete marker of a key, so the bucket should
have versioning enabled (:meth:`S3ObjectStore.ensure_bucket`).
"""

from __future__ import annotations

import builtins
import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

from baml_studio.objectstore.config import MAX_PRESIGN_SECONDS, S3Config
from baml_studio.objectstore.errors import ChecksumMismatch, InvalidArgument
from baml_studio.objectstore.port import (
    ObjectInfo,
    PresignedPut,
    PutResult,
    required_put_headers,
    sha256_b64,
    sha256_hex_from_b64,
    validate_key,
    validate_range,
    validate_sha256,
)
from baml_studio.objectstore.s3_errors import VENDOR_ERRORS, map_error


def make_client(config: S3Config, endpoint_url: str | None) -> Any:
    """A boto3 S3 client for ``config`` (``Any``: boto3 ships no types)."""
    import boto3  # type: ignore[import-untyped]  # reason: boto3 ships no types
    from botocore.config import Config  # type: ignore[import-untyped]  # reason: as above

    client_config = Config(
        signature_version="s3v4",
        s3={"addressing_style": "path" if config.path_style else "auto"},
        connect_timeout=config.connect_timeout_seconds,
        read_timeout=config.read_timeout_seconds,
        retries={"max_attempts": config.max_attempts, "mode": "standard"},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    return boto3.session.Session().client(
        "s3",
        region_name=config.region,
        endpoint_url=endpoint_url,
        aws_access_key_id=config.access_key_id,
        aws_secret_access_key=config.secret_access_key,
        config=client_config,
    )


def _etag(raw: str | None) -> str:
    return (raw or "").strip('"')


def _checksum_hex(raw: str | None) -> str | None:
    """Hex of a full-object base64 SHA-256; ``None`` for absent or multipart (``…-N``) ones."""
    return sha256_hex_from_b64(raw) if raw else None


class S3ObjectStore:
    """The :class:`~baml_studio.objectstore.port.ObjectStore` over one S3 bucket."""

    def __init__(self, config: S3Config, *, client: Any = None, presign_client: Any = None) -> None:
        self._bucket = config.bucket
        self._client = client if client is not None else make_client(config, config.endpoint_url)
        if presign_client is None and config.presign_endpoint_url is not None:
            presign_client = make_client(config, config.presign_endpoint_url)
        self._presign_client = presign_client if presign_client is not None else self._client

    @property
    def bucket(self) -> str:
        return self._bucket

    @property
    def client(self) -> Any:
        """The boto3 client, for setup commands (notification configuration)."""
        return self._client

    def ensure_bucket(self, *, versioning: bool = True) -> None:
        """Create the bucket if it is missing and turn versioning on (idempotent)."""
        try:
            if not self._bucket_exists():
                region = self._client.meta.region_name
                extra: dict[str, Any] = {}
                if region and region != "us-east-1":
                    extra["CreateBucketConfiguration"] = {"LocationConstraint": region}
                self._client.create_bucket(Bucket=self._bucket, **extra)
            if versioning:
                self._client.put_bucket_versioning(
                    Bucket=self._bucket, VersioningConfiguration={"Status": "Enabled"}
                )
        except VENDOR_ERRORS as exc:
            raise map_error(exc, bucket=self._bucket) from exc

    def _bucket_exists(self) -> bool:
        try:
            self._client.head_bucket(Bucket=self._bucket)
        except VENDOR_ERRORS as exc:
            if _status(exc) == 404:
                return False
            raise
        return True

    def put_if_absent(self, key: str, data: bytes, sha256: str) -> PutResult:
        validate_key(key)
        validate_sha256(sha256, key=key)
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha256:  # S3 would answer BadDigest too; this saves the upload
            raise ChecksumMismatch(key, sha256, actual)
        try:
            response = self._client.put_object(
                Bucket=self._bucket,
                Key=key,
                Body=data,
                IfNoneMatch="*",
                ChecksumSHA256=sha256_b64(sha256),
            )
        except VENDOR_ERRORS as exc:
            raise map_error(exc, bucket=self._bucket, key=key, sha256=sha256) from exc
        return ObjectInfo(
            key, len(data), sha256, response.get("VersionId"), _etag(response["ETag"])
        )

    def head(self, key: str) -> ObjectInfo:
        validate_key(key)
        try:
            response = self._client.head_object(
                Bucket=self._bucket, Key=key, ChecksumMode="ENABLED"
            )
        except VENDOR_ERRORS as exc:
            raise map_error(exc, bucket=self._bucket, key=key) from exc
        return ObjectInfo(
            key=key,
            size=int(response["ContentLength"]),
            sha256=_checksum_hex(response.get("ChecksumSHA256")),
            version_id=response.get("VersionId"),
            etag=_etag(response.get("ETag")),
        )

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        validate_key(key)
        first, stop = validate_range(start, end, key=key)
        if stop is not None and stop == first:
            self.head(key)  # an empty range still needs the object to exist
            return b""
        params: dict[str, Any] = {"Bucket": self._bucket, "Key": key}
        if first > 0 or stop is not None:
            params["Range"] = f"bytes={first}-{'' if stop is None else stop - 1}"
        try:
            response = self._client.get_object(**params)
            body: bytes = response["Body"].read()
        except VENDOR_ERRORS as exc:
            if _is_unsatisfiable_range(exc):
                return b""  # start at or past the end of the object
            raise map_error(exc, bucket=self._bucket, key=key) from exc
        return body

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        paginator = self._client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self._bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    yield ObjectInfo(
                        item["Key"], int(item["Size"]), None, None, _etag(item["ETag"])
                    )
        except VENDOR_ERRORS as exc:
            raise map_error(exc, bucket=self._bucket) from exc

    def delete(self, key: str, *, all_versions: bool = True) -> None:
        validate_key(key)
        try:
            if not all_versions:
                self._client.delete_object(Bucket=self._bucket, Key=key)
                return
            for version_id in self._versions_of(key):
                self._client.delete_object(Bucket=self._bucket, Key=key, VersionId=version_id)
        except VENDOR_ERRORS as exc:
            raise map_error(exc, bucket=self._bucket, key=key) from exc

    def _versions_of(self, key: str) -> builtins.list[str]:
        """Version ids of every version and delete marker of exactly ``key``."""
        paginator = self._client.get_paginator("list_object_versions")
        found: builtins.list[str] = []
        for page in paginator.paginate(Bucket=self._bucket, Prefix=key):
            for entry in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]:
                if entry["Key"] == key:
                    found.append(entry.get("VersionId") or "null")
        return found

    def presign_put(self, key: str, size: int, sha256: str, expires_in: int) -> PresignedPut:
        validate_key(key)
        validate_sha256(sha256, key=key)
        if size < 0:
            raise InvalidArgument(f"size must be >= 0, got {size}", key=key)
        if not 1 <= expires_in <= MAX_PRESIGN_SECONDS:
            raise InvalidArgument(
                f"expires_in must be 1..{MAX_PRESIGN_SECONDS} seconds, got {expires_in}", key=key
            )
        params = {
            "Bucket": self._bucket,
            "Key": key,
            "IfNoneMatch": "*",
            "ChecksumSHA256": sha256_b64(sha256),
            "ContentLength": size,
        }
        try:
            url: str = self._presign_client.generate_presigned_url(
                "put_object", Params=params, ExpiresIn=expires_in, HttpMethod="PUT"
            )
        except VENDOR_ERRORS as exc:
            raise map_error(exc, bucket=self._bucket, key=key) from exc
        return PresignedPut(
            url=url,
            method="PUT",
            required_headers=required_put_headers(size, sha256),
            expires_at=_sigv4_expiry(url, expires_in),
        )


def _status(exc: Exception) -> int | None:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status is not None else None


def _is_unsatisfiable_range(exc: Exception) -> bool:
    response = getattr(exc, "response", None)
    code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
    return code == "InvalidRange" or _status(exc) == 416


def _sigv4_expiry(url: str, expires_in: int) -> datetime:
    """``X-Amz-Date + X-Amz-Expires`` from a SigV4 presigned URL."""
    query = parse_qs(urlsplit(url).query)
    try:
        signed_at = datetime.strptime(query["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        return signed_at + timedelta(seconds=int(query["X-Amz-Expires"][0]))
    except (KeyError, IndexError, ValueError):
        return datetime.now(UTC) + timedelta(seconds=expires_in)
