"""The object store port: create-only puts verified by SHA-256, head, ranged get, list, delete
and presigned create-only PUT URLs.

Conventions shared by every adapter:

- ``sha256`` is always 64 lowercase hex digits (the form of ``checksum_sha256`` in the HTTP
  contract). The base64 form S3 uses on the wire (``x-amz-checksum-sha256``) appears only in
  :attr:`PresignedPut.required_headers`; :func:`sha256_b64` converts.
- ``etag`` is the entity tag without quotes (the form S3 event notifications carry): the MD5 hex
  of the bytes for a single-part upload.
- Byte ranges are half-open, ``[start, end)``, like Python slices; ``end`` past the object's end
  is clamped.
- Keys are S3 keys: ``/``-separated, no leading ``/``, no empty, ``.`` or ``..`` segment, at most
  1024 UTF-8 bytes (see :func:`validate_key`).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from baml_studio.objectstore.errors import InvalidArgument, InvalidObjectKey

MAX_KEY_BYTES = 1024
MAX_SEGMENT_BYTES = 255
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What the store knows about one stored object."""

    key: str
    """The object's key."""

    size: int
    """Size in bytes."""

    sha256: str | None
    """SHA-256 of the bytes, 64 lowercase hex. ``head`` always fills it for objects written
    through this port; ``list`` may leave it ``None`` (S3 listings carry no checksum)."""

    version_id: str | None
    """Store-assigned version id; ``None`` from S3 listings and unversioned S3 buckets."""

    etag: str
    """Entity tag without quotes (MD5 hex of the bytes for single-part uploads)."""


PutResult = ObjectInfo
"""What a successful ``put_if_absent`` returns: the new object's info."""


@dataclass(frozen=True, slots=True)
class PresignedPut:
    """A create-only upload URL bound to one key, size and SHA-256, valid until ``expires_at``."""

    url: str
    """Absolute URL; the request must go to exactly this URL."""

    method: str
    """Always ``PUT``."""

    required_headers: Mapping[str, str]
    """Headers the uploader must send unchanged: ``If-None-Match: *``, ``x-amz-checksum-sha256``
    (base64 SHA-256) and ``Content-Length``."""

    expires_at: datetime
    """UTC instant after which the URL is refused (403)."""


@runtime_checkable
class ObjectStore(Protocol):
    """One bucket. Every method raises only ``ObjectStoreError`` subclasses
    (:mod:`baml_studio.objectstore.errors`); only ``ObjectStoreUnavailable`` is transient."""

    @property
    def bucket(self) -> str:
        """The bucket name."""

    def put_if_absent(self, key: str, data: bytes, sha256: str) -> PutResult:
        """Store ``data`` under ``key`` only if no object exists there.

        Raises ``ChecksumMismatch`` (nothing stored) when ``data`` does not hash to ``sha256``,
        ``ObjectAlreadyExists`` (stored object untouched) when the key is taken.
        """

    def head(self, key: str) -> ObjectInfo:
        """Size, checksum, version id and etag of the object, or ``ObjectNotFound``."""

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """The bytes ``[start, end)`` of the object (whole object by default), or
        ``ObjectNotFound``. ``end`` past the end is clamped; ``start`` at or past it gives
        ``b""``."""

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, in ascending key order (by code point,
        which is UTF-8 byte order)."""

    def delete(self, key: str, *, all_versions: bool = True) -> None:
        """Remove the object. With ``all_versions`` every stored version and delete marker goes
        too (erasure). Deleting a missing key is not an error."""

    def presign_put(self, key: str, size: int, sha256: str, expires_in: int) -> PresignedPut:
        """A create-only PUT URL for exactly ``size`` bytes hashing to ``sha256``, valid for
        ``expires_in`` seconds. Uploads through it get 412 when the key exists, 400 ``BadDigest``
        on a checksum mismatch, and 403 when the signature is bad or expired."""


def validate_key(key: str) -> str:
    """Return ``key`` if it is a key every adapter can hold, else raise ``InvalidObjectKey``."""
    if not isinstance(key, str) or not key:
        raise InvalidObjectKey(f"object key must be a non-empty string, got {key!r}", key=None)
    encoded = key.encode("utf-8", errors="surrogatepass")
    if len(encoded) > MAX_KEY_BYTES:
        raise InvalidObjectKey(
            f"object key is {len(encoded)} UTF-8 bytes; the limit is {MAX_KEY_BYTES}", key=key
        )
    if "\x00" in key or "\\" in key:
        raise InvalidObjectKey(f"object key {key!r} contains NUL or a backslash", key=key)
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidObjectKey(
                f"object key {key!r} has an empty, '.' or '..' segment; use keys like "
                "'evidence/v1/<tenant>/...' with no leading, trailing or doubled '/'",
                key=key,
            )
        if len(segment.encode("utf-8", errors="surrogatepass")) > MAX_SEGMENT_BYTES:
            raise InvalidObjectKey(
                f"a segment of object key {key!r} exceeds {MAX_SEGMENT_BYTES} bytes", key=key
            )
    return key


def validate_sha256(sha256: str, *, key: str | None = None) -> str:
    """Return ``sha256`` if it is 64 lowercase hex digits, else raise ``InvalidArgument``."""
    if not isinstance(sha256, str) or not _SHA256_HEX.fullmatch(sha256):
        raise InvalidArgument(f"sha256 must be 64 lowercase hex digits, got {sha256!r}", key=key)
    return sha256


def validate_range(start: int | None, end: int | None, *, key: str) -> tuple[int, int | None]:
    """Normalise a half-open byte range; ``InvalidArgument`` for a negative or reversed one."""
    first = 0 if start is None else start
    if first < 0 or (end is not None and end < first):
        raise InvalidArgument(
            f"byte range [{start}, {end}) is invalid; need 0 <= start <= end", key=key
        )
    return first, end


def sha256_b64(sha256_hex: str) -> str:
    """The base64 form of a hex SHA-256 (the value of ``x-amz-checksum-sha256``)."""
    return base64.b64encode(bytes.fromhex(sha256_hex)).decode("ascii")


def sha256_hex_from_b64(value: str) -> str | None:
    """The hex form of a base64 SHA-256, or ``None`` if ``value`` is not 32 base64 bytes."""
    try:
        raw = base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return None
    return raw.hex() if len(raw) == 32 else None


def required_put_headers(size: int, sha256_hex: str) -> dict[str, str]:
    """The headers every presigned create-only PUT must carry."""
    return {
        "If-None-Match": "*",
        "x-amz-checksum-sha256": sha256_b64(sha256_hex),
        "Content-Length": str(size),
    }
