"""Every refusal of the gateway: documented status, ErrorResponse shape, Retry-After on 429/503.
The issue's bad-input list runs against both adapter families."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import pytest
from gateway_rig import (
    CID_VALUE,
    SCOPE,
    GatewayRig,
    body_of,
    entry,
    five_kinds,
    request_body,
)

from baml_studio.gateway.app import create_app
from baml_studio.gateway.authorize import Gateway
from baml_studio.gateway.config import GatewayConfig, PublisherLimits, Scope
from baml_studio.gateway.environments import StaticEnvironments
from baml_studio.gateway.models import ErrorResponse
from baml_studio.gateway.tokens import KeyRing, PublisherTokenVerifier, mint_publisher_token
from baml_studio.objectstore.errors import ObjectStoreUnavailable
from baml_studio.objectstore.port import ObjectInfo

DATA = body_of("x")
META = entry("meta_segment", DATA, sequence=1)


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = ErrorResponse.model_validate(response.json()).error
    assert set(response.json()["error"]) == {
        "code",
        "message",
        "request_id",
        "retryable",
        "details",
    }
    assert error.message and error.request_id
    assert error.retryable is (status in (429, 503))
    if status in (429, 503):
        assert int(response.headers["retry-after"]) >= 0
    if code is not None:
        assert error.code == code
    return response.json()["error"]


BAD_BODIES: list[tuple[str, Any, int, str]] = [
    ("unknown kind", request_body([{**META, "kind": "blob"}]), 400, "invalid_request"),
    (
        "checksum not 64 lowercase hex",
        request_body([{**META, "checksum_sha256": "AB" * 32}]),
        400,
        "invalid_request",
    ),
    (
        "checksum base64",
        request_body([{**META, "checksum_sha256": "q" * 44}]),
        400,
        "invalid_request",
    ),
    ("sequence 0", request_body([{**META, "sequence": 0}]), 400, "invalid_request"),
    ("sequence as string", request_body([{**META, "sequence": "1"}]), 400, "invalid_request"),
    (
        "101 objects",
        request_body([entry("data_segment", DATA, sequence=i) for i in range(1, 102)]),
        413,
        "too_many_objects",
    ),
    (
        "oversize object",
        request_body([{**META, "size_bytes": 256 * 2**20 + 1}]),
        413,
        "object_too_large",
    ),
    ("scope in the body", request_body([META], tenant_id="tn_other"), 403, "scope_mismatch"),
    ("own scope in the body", request_body([META], tenant_id=SCOPE.tenant), 400, "invalid_request"),
    ("bad euid", {**request_body([META]), "process_euid": "XYZ"}, 400, "invalid_request"),
    (
        "bad flush ulid",
        {**request_body([META]), "flush_id": "01J8ZK3V5N4Q2W8X7Y6T5R4E3U"},
        400,
        "invalid_request",
    ),
    (
        "value with codec 2",
        request_body([entry("value", DATA, cid=CID_VALUE, codec=2)]),
        400,
        "invalid_request",
    ),
    (
        "cid without prefix",
        request_body([entry("value", DATA, cid="ab" * 32, codec=1)]),
        400,
        "invalid_request",
    ),
    ("no objects", request_body([]), 400, "invalid_request"),
    ("not an object", [1, 2], 400, "invalid_json"),
    (
        "same key twice, two checksums",
        request_body([META, {**META, "checksum_sha256": "0" * 64}]),
        400,
        "duplicate_key",
    ),
]


@pytest.mark.parametrize(
    ("case", "body", "status", "code"), BAD_BODIES, ids=[c[0] for c in BAD_BODIES]
)
def test_gateway_bad_bodies(rig: GatewayRig, case: str, body: Any, status: int, code: str) -> None:
    assert_error(rig.authorize(body), status, code)


def test_gateway_bad_tokens(rig: GatewayRig) -> None:
    body = request_body([META])
    other_ring = KeyRing.generate()
    foreign = mint_publisher_token(other_ring, SCOPE, 60)
    expired = rig.token(ttl=60, now=time.time() - 3600)
    tampered = rig.token()[:-4] + "AAAA"
    for token, code in [
        ("not-a-jwt", "unauthenticated"),
        (foreign, "unknown_signing_key"),
        (expired, "token_expired"),
        (tampered, "unauthenticated"),
    ]:
        assert_error(rig.authorize(body, token=token), 401, code)
        response = rig.http.get("/v1/publisher/config", headers=rig.headers(token))
        assert_error(response, 401, code)
    missing = rig.http.post("/v1/uploads/authorize", json=body, headers={"X-Baml-Request-Id": "r1"})
    error = assert_error(missing, 401, "missing_token")
    assert error["request_id"] == "r1"
    assert missing.headers["www-authenticate"].startswith("Bearer")


def test_gateway_wrong_kind_and_scope_headers(dir_rig: GatewayRig) -> None:
    import jwt

    key = dir_rig.keys.load().active_key
    claims = {**SCOPE.as_dict(), "kind": "user", "exp": int(time.time()) + 60, "kid": key.kid}
    user_token = jwt.encode(claims, key.material, algorithm="HS256", headers={"kid": key.kid})
    assert_error(dir_rig.authorize(request_body([META]), token=user_token), 403, "wrong_token_kind")
    response = dir_rig.authorize(request_body([META]), **{"X-Baml-Environment-Id": "env_dev"})
    assert_error(response, 403, "scope_mismatch")
    same = dir_rig.authorize(request_body([META]), **{"X-Baml-Environment-Id": SCOPE.environment})
    assert same.status_code == 200


def test_gateway_unprovisioned_environment_is_409(dir_rig: GatewayRig) -> None:
    token = dir_rig.token(Scope("tn_acme", "prj_billing", "env_unprovisioned"))
    assert_error(
        dir_rig.authorize(request_body([META]), token=token), 409, "environment_not_provisioned"
    )
    config = dir_rig.http.get("/v1/publisher/config", headers=dir_rig.headers(token))
    assert config.status_code == 200 and config.json()["capture_enabled"] is False


def test_gateway_missing_request_id_and_routes(dir_rig: GatewayRig) -> None:
    headers = dir_rig.headers()
    del headers["X-Baml-Request-Id"]
    response = dir_rig.http.post(
        "/v1/uploads/authorize", json=request_body([META]), headers=headers
    )
    assert_error(response, 400, "missing_request_id")
    assert_error(
        dir_rig.http.post("/v1/uploads/authorize", content=b"{", headers=dir_rig.headers()),
        400,
        "invalid_json",
    )
    not_allowed = dir_rig.http.get("/v1/uploads/authorize")
    assert_error(not_allowed, 405, "method_not_allowed")
    assert not_allowed.headers["allow"] == "POST"  # as the control plane's 405s (was missing)
    assert_error(dir_rig.http.get("/v1/nothing"), 404, "not_found")
    # a stray slash: no 307 whose Location comes from the Host header
    for method, path in (("GET", "/v1/publisher/config/"), ("POST", "/v1/uploads/authorize/")):
        stray = dir_rig.http.request(
            method, path, headers={**dir_rig.headers(), "Host": "evil.example.com"},
            follow_redirects=False,
        )  # fmt: skip
        assert_error(stray, 404, "not_found")
        assert "location" not in stray.headers
    big = b" " * (4 * 2**20 + 1)
    assert_error(
        dir_rig.http.post("/v1/uploads/authorize", content=big, headers=dir_rig.headers()),
        413,
        "request_too_large",
    )


class _Store:
    """An object store whose ``head`` fails transiently, or blocks until released."""

    bucket = "b"

    def __init__(self) -> None:
        self.fail = True
        self.entered = threading.Event()
        self.release = threading.Event()

    def head(self, key: str) -> ObjectInfo:
        if self.fail:
            raise ObjectStoreUnavailable("connection refused", key=key)
        self.entered.set()
        self.release.wait(10)
        return ObjectInfo(key, len(DATA), META["checksum_sha256"], None, "e")

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


def _app(store: _Store, **config: Any) -> tuple[Any, str]:
    ring = KeyRing.generate()
    gateway = Gateway(
        store,  # type: ignore[arg-type]
        PublisherTokenVerifier(lambda: ring),
        StaticEnvironments([SCOPE]),
        GatewayConfig(**config),
    )
    return create_app(gateway), mint_publisher_token(ring, SCOPE, 60)


def asgi_call(app: Any, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """One request to ``app`` in process (no sockets)."""

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
            return await http.request(method, path, **kwargs)

    return asyncio.run(run())


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "X-Baml-Request-Id": "r"}


def test_gateway_store_unavailable_is_503() -> None:
    app, token = _app(_Store(), retry_after_seconds=7)
    response = asgi_call(
        app, "POST", "/v1/uploads/authorize", json=request_body([META]), headers=_headers(token)
    )
    error = assert_error(response, 503, "dependency_unavailable")
    assert response.headers["retry-after"] == "7"
    assert "connection refused" not in error["message"]


def test_gateway_concurrency_budget_is_429() -> None:
    store = _Store()
    store.fail = False
    app, token = _app(store, max_concurrent_authorize=1)

    async def scenario() -> tuple[httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
            first = asyncio.create_task(
                http.post(
                    "/v1/uploads/authorize", json=request_body([META]), headers=_headers(token)
                )
            )
            await asyncio.to_thread(store.entered.wait, 10)
            second = await http.post(
                "/v1/uploads/authorize", json=request_body([META]), headers=_headers(token)
            )
            store.release.set()
            return await first, second

    first, second = asyncio.run(scenario())
    assert first.status_code == 200 and first.json()["objects"][0]["state"] == "stored"
    assert_error(second, 429, "too_many_requests")


def test_gateway_limits_come_from_config() -> None:
    store = _Store()
    app, token = _app(
        store, limits=PublisherLimits(max_objects_per_authorize=2, max_object_bytes=10)
    )
    objects = [e for e, _ in five_kinds()[:3]]
    response = asgi_call(
        app, "POST", "/v1/uploads/authorize", json=request_body(objects), headers=_headers(token)
    )
    assert_error(response, 413, "too_many_objects")
    config = asgi_call(app, "GET", "/v1/publisher/config", headers=_headers(token)).json()
    assert (config["max_objects_per_authorize"], config["max_object_bytes"]) == (2, 10)
