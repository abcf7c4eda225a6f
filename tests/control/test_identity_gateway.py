"""Control-plane publisher tokens at the real gateway, which verifies them with a RemoteKeySet
fetched from a real control-plane stub (both served by uvicorn on 127.0.0.1)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from baml_studio.cli_gateway import serve as serve_group
from baml_studio.control.identity import (
    ControlKeys,
    MemoryTokenRegistry,
    TokenIssuer,
    jwks_document,
    revocations_document,
)
from baml_studio.control.identity_remote import RemoteKeySet
from baml_studio.gateway.service import DataplaneConfig, load_dataplane_config, open_dataplane
from baml_studio.gateway.tokens import KeyRing, mint_publisher_token
from gateway.gateway_rig import SCOPE, body_of, bound_socket, entry, http_put, request_body, serve

TTL_S = 300.0
REFETCH_S = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def control_stub(keys: ControlKeys, registry: MemoryTokenRegistry) -> Starlette:
    """The two public identity routes of the control plane, over the library functions."""

    async def jwks(request: Request) -> JSONResponse:
        return JSONResponse(jwks_document(keys.ring()))

    async def revocations(request: Request) -> JSONResponse:
        return JSONResponse(revocations_document(registry))

    return Starlette(
        routes=[
            Route("/.well-known/jwks.json", jwks),
            Route("/token-revocations", revocations),
        ]
    )


@dataclass
class Planes:
    keys: ControlKeys
    registry: MemoryTokenRegistry
    issuer: TokenIssuer
    clock: Clock
    control_url: str
    gateway: httpx.Client

    def authorize(self, token: str, sequence: int = 1) -> httpx.Response:
        body = request_body([entry("meta_segment", body_of(f"m{sequence}"), sequence=sequence)])
        headers = {
            "Authorization": f"Bearer {token}",
            "X-Baml-Request-Id": f"req-{os.urandom(4).hex()}",
        }
        return self.gateway.post("/v1/uploads/authorize", json=body, headers=headers)


@contextmanager
def control_plane(tmp_path: Path) -> Iterator[tuple[ControlKeys, MemoryTokenRegistry, str]]:
    keys = ControlKeys.in_dir(tmp_path / "control")
    registry = MemoryTokenRegistry()
    with serve(control_stub(keys, registry), bound_socket()) as url:
        yield keys, registry, url


@pytest.fixture
def planes(tmp_path: Path) -> Iterator[Planes]:
    """Control stub, then the gateway (directory bucket) verifying with a RemoteKeySet whose
    cache clock the test moves."""
    clock = Clock()
    with control_plane(tmp_path) as (keys, registry, control_url):
        key_set = RemoteKeySet(control_url, ttl_s=TTL_S, refetch_interval_s=REFETCH_S, clock=clock)
        sock = bound_socket()
        config = DataplaneConfig(
            data_dir=tmp_path / "dp",
            public_base_url=f"http://127.0.0.1:{sock.getsockname()[1]}",
            control_plane_url=control_url,
        )
        dataplane = open_dataplane(config, key_set=key_set)
        dataplane.environments.add(SCOPE)
        try:
            with serve(dataplane.app, sock) as url, httpx.Client(base_url=url, timeout=10) as http:
                yield Planes(
                    keys, registry, TokenIssuer(keys.ring, registry), clock, control_url, http
                )
        finally:
            dataplane.close()


def code_of(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


def test_control_publisher_token_uploads_through_the_gateway(planes: Planes) -> None:
    token = planes.issuer.issue_publisher(SCOPE, 3600).token
    response = planes.authorize(token)
    assert response.status_code == 200, response.text
    [obj] = response.json()["objects"]
    assert obj["state"] == "upload_required"
    put = http_put(obj["upload_url"], body_of("m1"), obj["required_headers"])
    assert put.status == 200, put.body
    assert [o["state"] for o in planes.authorize(token).json()["objects"]] == ["stored"]


def test_revoked_token_is_refused_once_the_cache_refreshes(planes: Planes) -> None:
    issued = planes.issuer.issue_publisher(SCOPE, 3600)
    assert planes.authorize(issued.token).status_code == 200
    planes.registry.revoke_token(issued.token_id)
    assert planes.authorize(issued.token).status_code == 200  # cached list: up to TTL_S late
    planes.clock.now += TTL_S
    refused = planes.authorize(issued.token)
    assert refused.status_code == 401 and code_of(refused) == "token_revoked"
    other = planes.issuer.issue_publisher(SCOPE, 3600)
    assert planes.authorize(other.token).status_code == 200


def test_token_of_an_unknown_key_is_refused(planes: Planes) -> None:
    stranger = mint_publisher_token(KeyRing.generate("EdDSA"), SCOPE, 600)
    assert planes.authorize(planes.issuer.issue_publisher(SCOPE, 600).token).status_code == 200
    pending = planes.authorize(stranger)  # the key set was fetched just now: cannot tell yet
    assert pending.status_code == 503 and code_of(pending) == "signing_key_pending"
    assert int(pending.headers["Retry-After"]) >= 1
    planes.clock.now += REFETCH_S
    refused = planes.authorize(stranger)
    assert refused.status_code == 401 and code_of(refused) == "unknown_signing_key"
    unsigned = planes.authorize("not-a-token")
    assert unsigned.status_code == 401


def test_rotated_ring_verifies_old_tokens_until_the_old_key_is_retired(planes: Planes) -> None:
    old_kid = planes.keys.ring().active
    old = planes.issuer.issue_publisher(SCOPE, 3600).token
    assert planes.authorize(old).status_code == 200
    planes.keys.rotate()
    new = planes.issuer.issue_publisher(SCOPE, 3600).token
    planes.clock.now += REFETCH_S
    assert planes.authorize(new, 2).status_code == 200  # unknown kid: fetched again at once
    assert planes.authorize(old, 3).status_code == 200
    planes.keys.retire(old_kid)
    assert planes.authorize(old, 4).status_code == 200  # cached key set: up to TTL_S late
    planes.clock.now += TTL_S
    refused = planes.authorize(old, 5)
    assert refused.status_code == 401 and code_of(refused) == "unknown_signing_key"
    assert planes.authorize(new, 6).status_code == 200


def test_open_dataplane_wires_the_control_plane_url(tmp_path: Path) -> None:
    with control_plane(tmp_path) as (keys, registry, control_url):
        sock = bound_socket()
        config = load_dataplane_config(
            tmp_path / "dp",
            host="127.0.0.1",
            port=sock.getsockname()[1],
            control_plane_url=control_url,
        )
        dataplane = open_dataplane(config)
        dataplane.environments.add(SCOPE)
        assert not config.keys_path.exists()  # the local key file is not used
        issuer = TokenIssuer(keys.ring, registry)
        try:
            with serve(dataplane.app, sock) as url, httpx.Client(base_url=url, timeout=10) as http:
                planes = Planes(keys, registry, issuer, Clock(), control_url, http)
                assert planes.authorize(issuer.issue_publisher(SCOPE, 600).token).status_code == 200
                local = mint_publisher_token(KeyRing.generate("EdDSA"), SCOPE, 600)
                assert planes.authorize(local).status_code in (401, 503)
        finally:
            dataplane.close()


def test_serve_dataplane_control_plane_option() -> None:
    runner = CliRunner()
    shown = runner.invoke(serve_group, ["dataplane", "--help"])
    assert shown.exit_code == 0 and "--control-plane" in shown.output
    bad = runner.invoke(
        serve_group, ["dataplane", "--data", "unused", "--control-plane", "control.example"]
    )
    assert bad.exit_code == 2 and "http" in bad.output
    with pytest.raises(ValueError, match="control_plane_url"):
        DataplaneConfig(data_dir=Path("x"), public_base_url="http://x", control_plane_url="ftp://x")
