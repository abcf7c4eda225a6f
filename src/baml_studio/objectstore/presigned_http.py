"""The HTTP semantics of a presigned create-only PUT to the directory bucket, as a function of
the request (no sockets): the gateway mounts it at ``PUT /bucket/{bucket}/{key:path}``.

Checks, in order (each failure answers in the S3 XML error shape)::

    signature missing, malformed or not matching            403 SignatureDoesNotMatch
    URL past its expiry                                     403 AccessDenied
    bucket is not this bucket                               404 NoSuchBucket
    If-None-Match is not "*"                                403 AccessDenied
    Content-Length missing                                  411 MissingContentLength
    Content-Length not the signed size                      400 EntityTooLarge / EntityTooSmall
    body length not Content-Length                          400 IncompleteBody
    x-amz-checksum-sha256 missing                           400 InvalidRequest
    x-amz-checksum-sha256 not 32 bytes of base64            400 InvalidDigest
    x-amz-checksum-sha256 not the signed checksum           400 BadDigest
    body does not hash to it                                400 BadDigest (nothing stored)
    key already holds an object                             412 PreconditionFailed
    the store failed transiently                            503 ServiceUnavailable
    stored                                                  200 with ETag, x-amz-version-id
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple
from xml.sax.saxutils import escape

from baml_studio.objectstore.errors import (
    ChecksumMismatch,
    InvalidObjectKey,
    ObjectAlreadyExists,
    ObjectStoreError,
    SignatureExpired,
    SignatureInvalid,
)
from baml_studio.objectstore.port import sha256_b64, sha256_hex_from_b64

if TYPE_CHECKING:
    from baml_studio.objectstore.directory import DirectoryBucket


MAX_LENGTH_DIGITS = 19
"""The longest Content-Length read: 19 digits hold any size S3 takes (a signed 64-bit integer)."""

_NOT_XML_CHAR = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class HttpResponse(NamedTuple):
    """Status, headers and body of one response."""

    status: int
    headers: dict[str, str]
    body: bytes


def s3_error(status: int, code: str, message: str, resource: str) -> HttpResponse:
    """An S3-shaped XML error response."""
    request_id = uuid.uuid4().hex
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{_xml_text(code)}</Code><Message>{_xml_text(message)}</Message>"
        f"<Resource>{_xml_text(resource)}</Resource><RequestId>{request_id}</RequestId></Error>"
    ).encode()
    headers = {"Content-Type": "application/xml", "x-amz-request-id": request_id}
    if status == 503:
        headers["Retry-After"] = "1"
    return HttpResponse(status, headers, body)


def _xml_text(text: str) -> str:
    """``text`` escaped for XML, each character XML 1.0 cannot hold (control characters, from a
    key or bucket in the path, say) replaced by U+FFFD so the error body still parses."""
    return _NOT_XML_CHAR.sub("\ufffd", escape(text))


def handle_presigned_put(
    store: DirectoryBucket,
    bucket: str,
    key: str,
    query: Mapping[str, str],
    headers: Mapping[str, str],
    body: bytes,
) -> HttpResponse:
    """Verify and apply one presigned PUT. ``headers`` may use any letter case."""
    resource = f"/{bucket}/{key}"
    lowered = {name.lower(): value for name, value in headers.items()}
    try:
        signed = store.verify_presigned(bucket, key, query)
    except SignatureInvalid as exc:
        return s3_error(403, "SignatureDoesNotMatch", str(exc), resource)
    except SignatureExpired as exc:
        return s3_error(403, "AccessDenied", f"Request has expired: {exc}", resource)
    if bucket != store.bucket:
        return s3_error(
            404, "NoSuchBucket", f"this gateway serves bucket {store.bucket!r}", resource
        )
    rejected = _check_request(signed.size, signed.sha256, lowered, body, resource)
    if rejected is not None:
        return rejected
    try:
        info = store.put_if_absent(key, body, signed.sha256)
    except ObjectAlreadyExists as exc:
        return s3_error(412, "PreconditionFailed", str(exc), resource)
    except ChecksumMismatch as exc:
        return s3_error(400, "BadDigest", str(exc), resource)
    except InvalidObjectKey as exc:
        return s3_error(400, "InvalidArgument", str(exc), resource)
    except ObjectStoreError as exc:
        if exc.transient:
            return s3_error(503, "ServiceUnavailable", str(exc), resource)
        return s3_error(500, "InternalError", str(exc), resource)
    response_headers = {
        "ETag": f'"{info.etag}"',
        "x-amz-checksum-sha256": sha256_b64(signed.sha256),
        "Content-Length": "0",
    }
    if info.version_id is not None:
        response_headers["x-amz-version-id"] = info.version_id
    return HttpResponse(200, response_headers, b"")


def _check_request(
    size: int, sha256: str, headers: Mapping[str, str], body: bytes, resource: str
) -> HttpResponse | None:
    """The header and body checks against the signed size and checksum."""
    if_none_match = headers.get("if-none-match", "").strip()
    if if_none_match != "*":
        return s3_error(
            403,
            "AccessDenied",
            f"the URL is create-only: send 'If-None-Match: *' (got {if_none_match!r})",
            resource,
        )
    declared = headers.get("content-length")
    if declared is None:
        return s3_error(411, "MissingContentLength", "send Content-Length", resource)
    digits = declared.strip()
    if not (digits.isascii() and digits.isdigit() and len(digits) <= MAX_LENGTH_DIGITS):
        message = f"Content-Length {declared!r:.60} is not a byte count (up to 19 digits)"
        return s3_error(400, "InvalidArgument", message, resource)
    length = int(digits)
    if length != size:
        code = "EntityTooLarge" if length > size else "EntityTooSmall"
        message = f"Content-Length {length} differs from the signed size {size}"
        return s3_error(400, code, message, resource)
    if len(body) != length:
        message = f"received {len(body)} bytes, Content-Length says {length}"
        return s3_error(400, "IncompleteBody", message, resource)
    checksum = headers.get("x-amz-checksum-sha256")
    if checksum is None:
        message = "send x-amz-checksum-sha256 (base64 SHA-256) as in required_headers"
        return s3_error(400, "InvalidRequest", message, resource)
    declared_hex = sha256_hex_from_b64(checksum.strip())
    if declared_hex is None:
        message = f"x-amz-checksum-sha256 {checksum!r} is not a base64 SHA-256"
        return s3_error(400, "InvalidDigest", message, resource)
    if declared_hex != sha256:
        message = "x-amz-checksum-sha256 differs from the checksum the URL was signed for"
        return s3_error(400, "BadDigest", message, resource)
    return None  # the body's own hash is checked by put_if_absent (ChecksumMismatch → BadDigest)
