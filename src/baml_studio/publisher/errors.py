"""The publisher's exception tree. Retry policy is ``isinstance`` on these types (``transient``).

::

    PublisherError
    ├── PackError                        a value pack that does not decode (terminal)
    │   ├── PackTruncated                bytes end before the header, manifest or an entry
    │   ├── PackBadMagic                 not ``BAMLPCK1``
    │   ├── PackUnsupportedVersion       a header version other than 1
    │   ├── PackManifestInvalid          manifest is not the canonical JSON shape
    │   ├── PackEntryInvalid             an entry's bytes fail its sha256, CID or codec
    │   └── PackFrameInvalid             not exactly one well-formed zstd frame, or too large
    ├── GatewayError                     the gateway answered badly or not at all
    │   ├── GatewayAuthError             401/403: stop shipping, keep files, retry config later
    │   ├── GatewayThrottled             429/503: back off with jitter (transient)
    │   ├── GatewayUnreachable           connection failed or timed out (transient)
    │   ├── GatewayRejected              any other 4xx (413, 409, 400): terminal for the request
    │   └── GatewayProtocolError         a 2xx whose body breaks the contract
    ├── UploadFailed                     a presigned PUT failed (transient; the object is retried)
    └── CaptureDisabled                  the configuration says ``capture_enabled: false``
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from baml_studio.format.errors import BamlStudioError


class PublisherError(BamlStudioError):
    """Base of every publisher error."""

    transient: ClassVar[bool] = False


class PackError(PublisherError):
    """A value pack that does not decode."""


class PackTruncated(PackError):
    pass


class PackBadMagic(PackError):
    pass


class PackUnsupportedVersion(PackError):
    pass


class PackManifestInvalid(PackError):
    pass


class PackEntryInvalid(PackError):
    pass


class PackFrameInvalid(PackError):
    pass


class GatewayError(PublisherError):
    """The gateway refused a request, or could not be reached."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        details: Mapping[str, Any] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.code = code
        self.details: dict[str, Any] = dict(details or {})
        """The ``ErrorResponse``'s ``error.details`` (e.g. a 413's ``index`` or ``limit``)."""


class GatewayAuthError(GatewayError):
    """401 or 403: the token is invalid or does not cover the environment."""


class GatewayThrottled(GatewayError):
    """429 or 503; ``retry_after`` is the server's ``Retry-After`` in seconds, if it sent one."""

    transient = True

    def __init__(
        self, message: str, *, status: int, code: str | None = None, retry_after: float | None
    ):
        super().__init__(message, status=status, code=code)
        self.retry_after = retry_after


class GatewayUnreachable(GatewayError):
    transient = True


class GatewayRejected(GatewayError):
    """A 4xx other than 401/403/429 (for example 413 or 409): do not repeat the same request.
    A 413 from authorize makes the flush split the request or drop the object it names."""


class GatewayProtocolError(GatewayError):
    """A response whose body does not follow openapi.yaml."""


class UploadFailed(PublisherError):
    """A presigned PUT did not store the object (network error, 5xx, 400 BadDigest, 403)."""

    transient = True

    def __init__(self, message: str, *, key: str, status: int | None = None):
        super().__init__(message)
        self.key = key
        self.status = status


class CaptureDisabled(PublisherError):
    """The gateway's configuration turned capture off; files stay in the local store."""

    transient = True
