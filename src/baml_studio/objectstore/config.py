"""Configuration of the two object store adapters, read once at the entry point."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from baml_studio.objectstore.errors import InvalidArgument

MIN_SECRET_BYTES = 32
MAX_PRESIGN_SECONDS = 7 * 24 * 3600
"""S3's limit for a SigV4 presigned URL; the directory bucket keeps the same bound."""

_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def validate_bucket_name(name: str) -> str:
    """Return ``name`` if it is a valid S3 bucket name (3–63 of ``a-z 0-9 . -``)."""
    if not _BUCKET_NAME.fullmatch(name) or ".." in name:
        raise InvalidArgument(
            f"bucket name {name!r} is invalid: use 3-63 characters of a-z, 0-9, '.' and '-', "
            "starting and ending with a letter or digit"
        )
    return name


@dataclass(frozen=True, slots=True)
class DirectoryBucketConfig:
    """The embedded default: one bucket as a directory tree on local disk."""

    root: Path
    """Directory holding every bucket; this bucket lives in ``<root>/<bucket>/``."""

    bucket: str
    """Bucket name (S3 naming rules), also the first path segment of presigned URLs."""

    presign_base_url: str
    """Base URL of the gateway that serves presigned PUTs, e.g. ``http://127.0.0.1:8080``.
    URLs are ``<base>/bucket/<bucket>/<key>?X-Baml-...``."""

    signing_secret: bytes = field(repr=False)
    """HMAC-SHA256 key for presigned URLs, at least 32 bytes; keep it out of logs."""

    def __post_init__(self) -> None:
        validate_bucket_name(self.bucket)
        if len(self.signing_secret) < MIN_SECRET_BYTES:
            raise InvalidArgument(
                f"signing_secret has {len(self.signing_secret)} bytes; need at least "
                f"{MIN_SECRET_BYTES} (e.g. os.urandom(32))"
            )
        if not self.presign_base_url.startswith(("http://", "https://")):
            raise InvalidArgument(
                f"presign_base_url {self.presign_base_url!r} must start with http:// or https://"
            )


@dataclass(frozen=True, slots=True)
class S3Config:
    """S3 (or any S3-compatible store) through boto3."""

    bucket: str
    """Bucket name; versioning should be enabled so erasure can remove prior versions."""

    region: str = "us-east-1"
    """AWS region of the bucket (SigV4 signs with it)."""

    endpoint_url: str | None = None
    """Endpoint override for S3-compatible stores and tests; ``None`` means AWS."""

    presign_endpoint_url: str | None = None
    """Endpoint placed in presigned URLs when uploaders reach the store by another address;
    ``None`` uses ``endpoint_url``."""

    access_key_id: str | None = None
    """Static credentials; ``None`` uses boto3's default credential chain."""

    secret_access_key: str | None = field(default=None, repr=False)
    """Secret for ``access_key_id``; keep it out of logs."""

    path_style: bool = True
    """Path-style addressing (``<endpoint>/<bucket>/<key>``); needed by most emulators."""

    connect_timeout_seconds: float = 5.0
    """Socket connect timeout per attempt."""

    read_timeout_seconds: float = 60.0
    """Socket read timeout per attempt."""

    max_attempts: int = 3
    """botocore retry attempts (standard mode) before a transient error reaches the caller."""

    def __post_init__(self) -> None:
        validate_bucket_name(self.bucket)
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise InvalidArgument("set both access_key_id and secret_access_key, or neither")
