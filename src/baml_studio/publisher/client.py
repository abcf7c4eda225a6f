"""HTTP adapter for the gateway's two publisher operations and the presigned PUTs (httpx).

Every failure becomes a :mod:`baml_studio.publisher.errors` type: 401/403 →
``GatewayAuthError``; 429/503 → ``GatewayThrottled`` with ``Retry-After``; connection errors →
``GatewayUnreachable``; other 4xx → ``GatewayRejected``; other 5xx → ``GatewayThrottled``
without a hint (transient). Presigned URLs never appear in messages or logs.
"""

from __future__ import annotations

import email.utils
import enum
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from baml_studio.jsontext import parse_json
from baml_studio.publisher.config import PublisherConfig
from baml_studio.publisher.errors import (
    GatewayAuthError,
    GatewayError,
    GatewayProtocolError,
    GatewayRejected,
    GatewayThrottled,
    GatewayUnreachable,
    UploadFailed,
)
from baml_studio.wirenumbers import ascii_whole_number

STATES = frozenset({"upload_required", "stored", "conflict"})


@dataclass(frozen=True, slots=True)
class Authorized:
    """One ``AuthorizedObject`` of the response."""

    kind: str
    key: str
    state: str
    upload_url: str | None = None
    required_headers: Mapping[str, str] | None = None


class PutOutcome(enum.Enum):
    CREATED = "created"
    EXISTS = "exists"
    """412: the create-only precondition failed; the object is already there."""


class GatewayPort(Protocol):
    """What a flush needs from the gateway and the bucket."""

    def authorize(
        self, process_euid: str, flush_id: str, objects: Sequence[Mapping[str, Any]]
    ) -> list[Authorized]: ...

    def put(self, url: str, headers: Mapping[str, str], body: bytes) -> PutOutcome: ...


NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


class GatewayClient:
    """Sync client; thread-safe for concurrent PUTs (httpx pools connections)."""

    def __init__(
        self,
        base_url: str,
        token: str | Callable[[], str],
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """``token`` is the publisher token, or a callable asked before every request (a
        :class:`~baml_studio.tokenfile.TokenFile`: a rotated token is used at once).
        ``transport`` is a test seam (fault injection: lost responses, held PUTs); the
        default None keeps httpx's own connection-pooling transport."""
        self._base = base_url.rstrip("/")
        self.token = token
        limits = httpx.Limits(max_connections=16)
        if transport is None:
            # Headers and body go out as separate writes; with Nagle's algorithm the body then
            # waits for the peer's delayed ACK (tens of ms per PUT). Send small writes at once.
            transport = httpx.HTTPTransport(limits=limits, socket_options=NODELAY)
        self._transport = transport
        self._http = httpx.Client(timeout=timeout, limits=limits, transport=transport)

    def close(self) -> None:
        self._http.close()

    def get_config(self) -> PublisherConfig:
        response = self._request("GET", "/v1/publisher/config")
        return PublisherConfig.from_json(_json(response))

    def authorize(
        self, process_euid: str, flush_id: str, objects: Sequence[Mapping[str, Any]]
    ) -> list[Authorized]:
        body = {"process_euid": process_euid, "flush_id": flush_id, "objects": list(objects)}
        data = _json(self._request("POST", "/v1/uploads/authorize", json=body))
        rows = data.get("objects") if isinstance(data, dict) else None
        if not isinstance(rows, list) or len(rows) != len(objects):
            raise GatewayProtocolError(
                f"authorize answered {rows!r:.80} for {len(objects)} objects"
            )
        return [_authorized(row) for row in rows]

    def put(self, url: str, headers: Mapping[str, str], body: bytes) -> PutOutcome:
        request = self._http.build_request("PUT", url, content=body, headers=dict(headers))
        try:
            # straight to the transport: a presigned PUT needs none of the client's auth,
            # redirect, cookie or hook handling, about a fifth of a PUT's CPU in this process
            response = self._transport.handle_request(request)
            try:
                response.read()
            finally:
                response.close()
        except httpx.HTTPError as exc:
            raise UploadFailed(f"PUT failed: {type(exc).__name__}", key=_key_of(url)) from exc
        if response.status_code in (200, 201, 204):
            return PutOutcome.CREATED
        if response.status_code == 412:
            return PutOutcome.EXISTS
        raise UploadFailed(
            f"PUT answered {response.status_code}", key=_key_of(url), status=response.status_code
        )

    def _request(self, method: str, path: str, json: Any = None) -> httpx.Response:
        token = self.token() if callable(self.token) else self.token
        headers = {"Authorization": f"Bearer {token}", "X-Baml-Request-Id": str(uuid.uuid4())}
        try:
            response = self._http.request(method, self._base + path, json=json, headers=headers)
        except httpx.HTTPError as exc:
            raise GatewayUnreachable(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        status = response.status_code
        if status < 300:
            return response
        code, message, details = _error_body(response)
        text = f"{method} {path} answered {status} {code}: {message}"
        if status in (401, 403):
            raise GatewayAuthError(text, status=status, code=code)
        if status in (429, 503) or status >= 500:
            retry = retry_after_seconds(response.headers.get("Retry-After"))
            raise GatewayThrottled(text, status=status, code=code, retry_after=retry)
        raise GatewayRejected(text, status=status, code=code, details=details)


RETRY_AFTER_MAX_DIGITS = 12
"""Longest ``Retry-After`` in seconds that is read (about 31,000 years); a longer one is
unreadable."""


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds: ASCII digits (RFC 9110 ``delay-seconds``), or an HTTP date;
    None if absent or unreadable (other digits such as ``"²"``, an absurdly long number, any
    other text), so that the caller keeps its own backoff: a malformed header never fails a
    request."""
    if not value:
        return None
    value = value.strip()
    seconds = ascii_whole_number(value, max_digits=RETRY_AFTER_MAX_DIGITS)
    if seconds is not None:
        return float(seconds)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _key_of(url: str) -> str:
    return httpx.URL(url).path


def _json(response: httpx.Response) -> Any:
    return parse_json(
        response.content, lambda reason: GatewayProtocolError(f"response is not JSON: {reason}")
    )


def _error_body(response: httpx.Response) -> tuple[str, str, dict[str, Any]]:
    """``code``, ``message`` and ``details`` of an ``ErrorResponse`` (details: {} if absent)."""
    try:
        error = parse_json(response.content, ValueError)["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        return "unknown", response.text[:200], {}
    details = error.get("details")
    return code, message, details if isinstance(details, dict) else {}


def _authorized(row: Any) -> Authorized:
    if not isinstance(row, dict) or row.get("state") not in STATES:
        raise GatewayProtocolError(f"bad authorized object {row!r:.120}")
    kind, key, state = row.get("kind"), row.get("key"), row["state"]
    if not isinstance(kind, str) or not isinstance(key, str):
        raise GatewayProtocolError(f"authorized object lacks kind or key: {row!r:.120}")
    if state != "upload_required":
        return Authorized(kind, key, state)
    url, headers = row.get("upload_url"), row.get("required_headers")
    if not isinstance(url, str) or not isinstance(headers, dict):
        raise GatewayProtocolError(f"upload_required without url or headers for {key}")
    return Authorized(kind, key, state, url, {str(k): str(v) for k, v in headers.items()})


__all__ = ["Authorized", "GatewayClient", "GatewayError", "GatewayPort", "PutOutcome"]
