"""The gateway's two operations as plain functions of a request (no HTTP framework).

:class:`Gateway` takes the ``Authorization`` header, the other headers and the body, and returns
the JSON answer or raises a :class:`~baml_studio.gateway.errors.GatewayError`. Checks of
``POST /v1/uploads/authorize``, in order::

    X-Baml-Request-Id missing                                    400 missing_request_id
    token missing, malformed, unknown key, bad signature, expired 401
    token of another kind                                        403 wrong_token_kind
    X-Baml-Tenant-Id/-Project-Id/-Environment-Id naming another   403 scope_mismatch
    body over max_request_bytes                                  413 request_too_large
    body not a JSON object                                       400 invalid_json
    a scope field in the body naming another scope               403 scope_mismatch
    more than max_objects_per_authorize objects                  413 too_many_objects
    body not an AuthorizeUploadRequest (unknown kind, bad
      checksum, sequence 0, extra field, ...)                    400 invalid_request
    an object over max_object_bytes                              413 object_too_large
    one key listed with two sizes or checksums                   400 duplicate_key
    environment not provisioned                                  409 environment_not_provisioned
    concurrency budget exhausted                                 429 too_many_requests
    object store failed                                          503 dependency_unavailable

Scope comes only from the verified token. Each distinct key gets exactly one ``head``.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC
from typing import Any

import pydantic

from baml_studio.gateway.config import REMOTE_HEAD_CONCURRENCY, GatewayConfig, Scope
from baml_studio.gateway.environments import Environments
from baml_studio.gateway.errors import (
    BadRequest,
    DependencyUnavailable,
    Forbidden,
    NotProvisioned,
    PayloadTooLarge,
    TooManyRequests,
    Unauthenticated,
)
from baml_studio.gateway.keys import UploadEntry, evidence_prefix, object_key
from baml_studio.gateway.models import (
    AuthorizeUploadRequest,
    SegmentUploadObject,
    TableUploadObject,
    ValueUploadObject,
)
from baml_studio.gateway.tokens import PublisherIdentity, PublisherTokenVerifier
from baml_studio.jsontext import parse_json
from baml_studio.objectstore.errors import ObjectNotFound, ObjectStoreError
from baml_studio.objectstore.port import ObjectInfo, ObjectStore

log = logging.getLogger(__name__)

REQUEST_ID_HEADER = "x-baml-request-id"
SCOPE_HEADERS = {
    "x-baml-tenant-id": "tenant",
    "x-baml-project-id": "project",
    "x-baml-environment-id": "environment",
}
SCOPE_BODY_FIELDS = {
    "tenant": "tenant",
    "tenant_id": "tenant",
    "project": "project",
    "project_id": "project",
    "environment": "environment",
    "environment_id": "environment",
}


@dataclass(frozen=True, slots=True)
class _Existing:
    """The outcome of one ``head``: the object's info, or ``None`` when absent."""

    info: ObjectInfo | None


def request_id_of(headers: Mapping[str, str]) -> str:
    """The caller's request id (``headers`` lower-cased), or ``BadRequest``."""
    value = headers.get(REQUEST_ID_HEADER, "").strip()
    if not value:
        raise BadRequest(
            "send an X-Baml-Request-Id header (a UUIDv7 is recommended) with every request",
            code="missing_request_id",
        )
    return value


class Gateway:
    """Publisher config and upload authorization over one object store."""

    def __init__(
        self,
        store: ObjectStore,
        verifier: PublisherTokenVerifier,
        environments: Environments,
        config: GatewayConfig,
    ) -> None:
        self._store = store
        self._verifier = verifier
        self._environments = environments
        self._config = config
        self._inflight = 0
        self._lock = threading.Lock()

    @property
    def config(self) -> GatewayConfig:
        return self._config

    def identify(self, headers: Mapping[str, str]) -> PublisherIdentity:
        """The verified token's identity; scope headers must agree with it."""
        authorization = headers.get("authorization", "")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated(
                "send 'Authorization: Bearer <publisher token>'", code="missing_token"
            )
        identity = self._verifier.verify(token.strip())
        for header, part in SCOPE_HEADERS.items():
            if header in headers:
                _check_scope_value(identity.scope, part, headers[header], where=header)
        return identity

    def publisher_config(self, headers: Mapping[str, str]) -> dict[str, Any]:
        """``GET /v1/publisher/config``: capture is off for an unprovisioned environment."""
        request_id = request_id_of(headers)
        identity = self.identify(headers)
        provisioned = self._environments.is_provisioned(identity.scope)
        log.info(
            "publisher config request_id=%s scope=%s provisioned=%s",
            request_id,
            _scope_text(identity.scope),
            provisioned,
        )
        return self._config.limits.as_publisher_config(
            capture_enabled=self._config.limits.capture_enabled and provisioned
        )

    def authorize(self, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
        """``POST /v1/uploads/authorize``; ``headers`` lower-cased."""
        request_id = request_id_of(headers)
        identity = self.identify(headers)
        request = self._parse(body, identity.scope)
        if not self._environments.is_provisioned(identity.scope):
            raise NotProvisioned(
                f"environment {_scope_text(identity.scope)} has no evidence prefix "
                f"({evidence_prefix(identity.scope)}) on this gateway; provision it first",
                details={"scope": identity.scope.as_dict()},
            )
        keys = self._keys(identity.scope, request)
        with self._slot():
            existing = self._head_all(sorted(set(keys)))
        answers = [
            self._answer(entry, key, existing[key])
            for entry, key in zip(request.objects, keys, strict=True)
        ]
        states = Counter(answer["state"] for answer in answers)
        log.info(
            "authorize request_id=%s flush_id=%s process_euid=%s scope=%s objects=%d %s",
            request_id,
            request.flush_id,
            request.process_euid,
            _scope_text(identity.scope),
            len(answers),
            " ".join(f"{state}={count}" for state, count in sorted(states.items())),
        )
        for answer in answers:
            log.debug(
                "authorize request_id=%s kind=%s key=%s state=%s",
                request_id,
                answer["kind"],
                answer["key"],
                answer["state"],
            )
        return {"flush_id": request.flush_id, "objects": answers}

    def _parse(self, body: bytes, scope: Scope) -> AuthorizeUploadRequest:
        limits = self._config.limits
        if len(body) > self._config.max_request_bytes:
            raise PayloadTooLarge(
                f"the request body has {len(body)} bytes; the limit is "
                f"{self._config.max_request_bytes}; split the flush into several requests",
                code="request_too_large",
            )
        raw = parse_json(body, _not_json)
        if not isinstance(raw, dict):
            raise BadRequest("the body must be a JSON object", code="invalid_json")
        for name, part in SCOPE_BODY_FIELDS.items():
            if name in raw:
                _check_scope_value(scope, part, raw[name], where=f"body field {name!r}")
        objects = raw.get("objects")
        if isinstance(objects, list) and len(objects) > limits.max_objects_per_authorize:
            raise PayloadTooLarge(
                f"the request lists {len(objects)} objects; at most "
                f"{limits.max_objects_per_authorize} per call, make several calls",
                code="too_many_objects",
                details={"count": len(objects), "limit": limits.max_objects_per_authorize},
            )
        try:
            request = AuthorizeUploadRequest.model_validate(raw, strict=True)
        except pydantic.ValidationError as exc:
            raise BadRequest(
                "the body is not a valid AuthorizeUploadRequest: " + _summary(exc),
                details={"errors": _errors(exc)},
            ) from exc
        for index, entry in enumerate(request.objects):
            if entry.size_bytes > limits.max_object_bytes:
                raise PayloadTooLarge(
                    f"objects[{index}] ({entry.kind}) has {entry.size_bytes} bytes; the limit "
                    f"is max_object_bytes={limits.max_object_bytes}; it cannot be shipped",
                    code="object_too_large",
                    details={"index": index, "size_bytes": entry.size_bytes},
                )
        return request

    @staticmethod
    def _keys(scope: Scope, request: AuthorizeUploadRequest) -> list[str]:
        keys = [
            object_key(scope, request.process_euid, request.flush_id, entry)
            for entry in request.objects
        ]
        seen: dict[str, tuple[int, str]] = {}
        for index, (entry, key) in enumerate(zip(request.objects, keys, strict=True)):
            identity = (entry.size_bytes, entry.checksum_sha256)
            if seen.setdefault(key, identity) != identity:
                raise BadRequest(
                    f"objects[{index}] names key {key} again with another size or checksum",
                    code="duplicate_key",
                    details={"index": index, "key": key},
                )
        return keys

    def _slot(self) -> _Slot:
        return _Slot(self)

    def _head_all(self, keys: list[str]) -> dict[str, _Existing]:
        limit = self._config.head_concurrency or REMOTE_HEAD_CONCURRENCY
        workers = max(1, min(limit, len(keys)))
        if workers == 1:
            return {key: self._head(key) for key in keys}
        with ThreadPoolExecutor(workers, thread_name_prefix="gateway-head") as pool:
            return dict(zip(keys, pool.map(self._head, keys), strict=True))

    def _head(self, key: str) -> _Existing:
        try:
            return _Existing(self._store.head(key))
        except ObjectNotFound:
            return _Existing(None)
        except ObjectStoreError as exc:
            raise self._unavailable(exc) from exc

    def _unavailable(self, exc: ObjectStoreError) -> DependencyUnavailable:
        log.warning("object store failed: %s: %s", type(exc).__name__, exc)
        return DependencyUnavailable(
            "the object store is unavailable; retry with backoff",
            details={"dependency": "object_store"},
            retry_after=self._config.retry_after_seconds,
        )

    def _answer(self, entry: UploadEntry, key: str, existing: _Existing) -> dict[str, Any]:
        answer: dict[str, Any] = {"kind": entry.kind}
        if isinstance(entry, SegmentUploadObject):
            answer["sequence"] = entry.sequence
        elif isinstance(entry, ValueUploadObject | TableUploadObject):
            answer["cid"] = entry.cid
        answer["key"] = key
        info = existing.info
        if info is not None:
            same = info.sha256 == entry.checksum_sha256 and info.size == entry.size_bytes
            answer["state"] = "stored" if same else "conflict"
            return answer
        try:
            presigned = self._store.presign_put(
                key,
                entry.size_bytes,
                entry.checksum_sha256,
                self._config.limits.upload_url_ttl_seconds,
            )
        except ObjectStoreError as exc:
            raise self._unavailable(exc) from exc
        answer["state"] = "upload_required"
        answer["upload_url"] = presigned.url
        answer["required_headers"] = dict(presigned.required_headers)
        answer["expires_at"] = (
            presigned.expires_at.astimezone(UTC).replace(microsecond=0).isoformat()
        ).replace("+00:00", "Z")
        return answer


class _Slot:
    """One unit of the authorize concurrency budget; 429 when none is left."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    def __enter__(self) -> None:
        gateway = self._gateway
        with gateway._lock:
            if gateway._inflight >= gateway._config.max_concurrent_authorize:
                raise TooManyRequests(
                    f"{gateway._inflight} authorize requests are in flight; retry later",
                    retry_after=gateway._config.retry_after_seconds,
                )
            gateway._inflight += 1

    def __exit__(self, *exc_info: object) -> None:
        with self._gateway._lock:
            self._gateway._inflight -= 1


def _check_scope_value(scope: Scope, part: str, value: object, *, where: str) -> None:
    expected = getattr(scope, part)
    if value != expected:
        raise Forbidden(
            f"{where} names {part} {value!r} but the publisher token is for {expected!r}; "
            "scope comes only from the token, so drop the field or use a token for that scope",
            code="scope_mismatch",
            details={"field": where, "token_scope": scope.as_dict()},
        )


def _not_json(reason: str) -> BadRequest:
    return BadRequest(f"the body is not JSON: {reason}", code="invalid_json")


def _scope_text(scope: Scope) -> str:
    return f"{scope.tenant}/{scope.project}/{scope.environment}"


def _errors(exc: pydantic.ValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": [str(part) for part in error["loc"]], "type": error["type"], "msg": error["msg"]}
        for error in exc.errors(include_url=False, include_input=False)[:20]
    ]


def _summary(exc: pydantic.ValidationError) -> str:
    first = exc.errors(include_url=False, include_input=False)[:3]
    text = "; ".join(
        f"{'.'.join(str(p) for p in error['loc']) or 'body'}: {error['msg']}" for error in first
    )
    more = exc.error_count() - len(first)
    return text + (f" (and {more} more)" if more > 0 else "")
