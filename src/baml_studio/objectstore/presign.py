"""HMAC-signed presigned PUT URLs for the directory bucket.

A URL is ``<base>/bucket/<bucket>/<quoted key>?<params>`` with the parameters

=========================== =====================================================
``X-Baml-Algorithm``        ``BAML-HMAC-SHA256``
``X-Baml-Expires``          absolute expiry, Unix seconds (valid while ``now <= expires``)
``X-Baml-Content-Length``   the exact size in bytes the upload must have
``X-Baml-Checksum-Sha256``  the SHA-256 (64 lowercase hex) the body must hash to
``X-Baml-Signature``        HMAC-SHA256 (hex) of the string to sign, keyed by the secret
=========================== =====================================================

The string to sign is the compact JSON array
``["BAML-HMAC-SHA256","PUT",bucket,key,size,sha256,expires]`` (UTF-8), so every bound field is
unambiguous whatever characters the key holds. :func:`verify` is constant-time in the signature.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote, urlencode

from baml_studio.objectstore.errors import InvalidArgument, SignatureExpired, SignatureInvalid
from baml_studio.objectstore.port import PresignedPut, required_put_headers, validate_sha256

ALGORITHM = "BAML-HMAC-SHA256"
PARAM_ALGORITHM = "X-Baml-Algorithm"
PARAM_EXPIRES = "X-Baml-Expires"
PARAM_SIZE = "X-Baml-Content-Length"
PARAM_SHA256 = "X-Baml-Checksum-Sha256"
PARAM_SIGNATURE = "X-Baml-Signature"
_WHOLE_NUMBER = re.compile(r"0|[1-9][0-9]{0,18}")
PATH_PREFIX = "/bucket/"
"""Route of presigned PUTs on the gateway: ``PUT /bucket/{bucket}/{key:path}``."""


@dataclass(frozen=True, slots=True)
class SignedPut:
    """The fields a verified presigned URL is bound to."""

    bucket: str
    key: str
    size: int
    sha256: str
    expires: int


def string_to_sign(bucket: str, key: str, size: int, sha256: str, expires: int) -> bytes:
    """The canonical bytes the signature covers."""
    fields = [ALGORITHM, "PUT", bucket, key, size, sha256, expires]
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _signature(secret: bytes, bucket: str, key: str, size: int, sha256: str, expires: int) -> str:
    message = string_to_sign(bucket, key, size, sha256, expires)
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def presigned_url(base_url: str, bucket: str, key: str, query: Mapping[str, str]) -> str:
    """``<base>/bucket/<bucket>/<key>?<query>`` with the key percent-encoded (``/`` kept)."""
    path = f"{PATH_PREFIX}{bucket}/{quote(key, safe='/')}"
    return f"{base_url.rstrip('/')}{path}?{urlencode(query)}"


class PresignSigner:
    """Signs and verifies presigned PUT URLs with one HMAC secret and one clock."""

    def __init__(
        self, secret: bytes, base_url: str, clock: Callable[[], float] = time.time
    ) -> None:
        self._secret = secret
        self._base_url = base_url
        self._clock = clock

    def now(self) -> float:
        """The signer's clock (Unix seconds)."""
        return self._clock()

    def sign(self, bucket: str, key: str, size: int, sha256: str, expires_in: int) -> PresignedPut:
        """A URL bound to ``bucket``, ``key``, ``size`` and ``sha256``, valid ``expires_in`` s."""
        expires = int(self._clock()) + expires_in
        query = {
            PARAM_ALGORITHM: ALGORITHM,
            PARAM_EXPIRES: str(expires),
            PARAM_SIZE: str(size),
            PARAM_SHA256: sha256,
            PARAM_SIGNATURE: _signature(self._secret, bucket, key, size, sha256, expires),
        }
        return PresignedPut(
            url=presigned_url(self._base_url, bucket, key, query),
            method="PUT",
            required_headers=required_put_headers(size, sha256),
            expires_at=datetime.fromtimestamp(expires, UTC),
        )

    def verify(self, bucket: str, key: str, query: Mapping[str, str]) -> SignedPut:
        """The bound fields of a presigned request, or ``SignatureInvalid``/``SignatureExpired``.

        ``query`` holds the decoded query parameters; ``bucket`` and ``key`` come from the path.
        """
        if query.get(PARAM_ALGORITHM) != ALGORITHM:
            raise SignatureInvalid(
                f"presigned URL must carry {PARAM_ALGORITHM}={ALGORITHM}; request a new URL "
                "from POST /v1/uploads/authorize",
                key=key,
            )
        try:
            expires = _whole_number(query[PARAM_EXPIRES], PARAM_EXPIRES)
            size = _whole_number(query[PARAM_SIZE], PARAM_SIZE)
            sha256 = validate_sha256(query[PARAM_SHA256], key=key)
            signature = query[PARAM_SIGNATURE]
        except (KeyError, ValueError, TypeError) as exc:
            raise SignatureInvalid(
                f"presigned URL parameters are missing or malformed ({exc}); need "
                f"{PARAM_EXPIRES}, {PARAM_SIZE}, {PARAM_SHA256} and {PARAM_SIGNATURE}",
                key=key,
            ) from None
        except InvalidArgument as exc:
            raise SignatureInvalid(f"{PARAM_SHA256}: {exc}", key=key) from None
        expected = _signature(self._secret, bucket, key, size, sha256, expires)
        if not hmac.compare_digest(expected.encode("ascii"), signature.encode("utf-8")):
            raise SignatureInvalid(
                "the presigned URL's signature does not match its bucket, key, size, checksum "
                "and expiry; send the URL exactly as authorized",
                key=key,
            )
        if self._clock() > expires:
            expired_at = datetime.fromtimestamp(expires, UTC).isoformat()
            raise SignatureExpired(
                f"the presigned URL expired at {expired_at}; re-authorize to get a fresh URL",
                key=key,
            )
        return SignedPut(bucket=bucket, key=key, size=size, sha256=sha256, expires=expires)


def _whole_number(text: str, name: str) -> int:
    """A parameter as :meth:`PresignSigner.sign` writes it: decimal ASCII digits without sign,
    padding or separators, at most 19 (``int`` alone would also take ``+1``, `` 1``, ``1_0``
    and other digits, so one signature would fit several URLs)."""
    if not (isinstance(text, str) and _WHOLE_NUMBER.fullmatch(text)):
        raise ValueError(f"{name} must be 1 to 19 decimal digits, got {text!r:.40}")
    return int(text)
