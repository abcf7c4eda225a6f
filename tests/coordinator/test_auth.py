"""User tokens at the coordinator: real tokens issued into a SQLite metastore with a ControlKeys
ring, verified through a RemoteKeySet fetching the control plane's real JWKS and revocation
documents (a stub serving them, and once the real control plane, both on 127.0.0.1)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import jwt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from baml_studio.apierrors import (
    ApiError,
    BadRequest,
    DependencyUnavailable,
    Forbidden,
    Unauthenticated,
    error_body,
)
from baml_studio.control.identity import (
    ControlKeys,
    MemoryTokenRegistry,
    TokenIssuer,
    UserIdentity,
    jwks_document,
    revocations_document,
)
from baml_studio.control.identity_remote import RemoteKeySet
from baml_studio.control.metastore import Metastore
from baml_studio.control.model import DeploymentKind
from baml_studio.coordinator.auth import (
    REALM,
    RevocationListRegistry,
    UserTokenAuth,
    error_headers,
)
from baml_studio.gateway.config import Scope
from baml_studio.gateway.tokens import KeyRing, SigningKey
from projector.projector_control_rig import SCOPE_A, closed_port_url, control_plane, serve

NOW = float(int(time.time()))
TTL_S = 300.0
REFETCH_S = 10.0
TENANT, PROJECT = "tn_acme", "prj_billing"
PROD, DEV = "env_prod", "env_dev"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def control_stub(keys: ControlKeys, metastore: Metastore) -> Starlette:
    """The control plane's two public identity routes over its own document functions."""

    async def jwks(request: Request) -> JSONResponse:
        return JSONResponse(jwks_document(keys.ring()))

    async def revocations(request: Request) -> JSONResponse:
        return JSONResponse(revocations_document(metastore))

    return Starlette(
        routes=[
            Route("/.well-known/jwks.json", jwks),
            Route("/token-revocations", revocations),
        ]
    )


@dataclass
class Boundary:
    keys: ControlKeys
    metastore: Metastore
    issuer: TokenIssuer
    url: str
    cache_clock: Clock
    """The RemoteKeySet's cache clock (monotonic in production)."""
    clock: Clock
    """The wall clock the auth checks expiry with."""
    auth: UserTokenAuth

    def user(self, environments: tuple[str, ...] = (PROD,), erasure: bool = False) -> str:
        return self.issuer.issue_user(TENANT, PROJECT, environments, erasure, 3600).token


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def refusal(auth: UserTokenAuth, headers: dict[str, str]) -> ApiError:
    with pytest.raises(ApiError) as caught:
        auth.authenticate(headers)
    return caught.value


def provision(metastore: Metastore) -> None:
    metastore.create_tenant(TENANT)
    metastore.create_project(TENANT, PROJECT)
    for environment in (PROD, DEV):
        metastore.create_environment(TENANT, PROJECT, environment)
    metastore.create_deployment("dep_a", DeploymentKind.BYOC, "cell-1", tenant_id=TENANT)


@pytest.fixture
def boundary(tmp_path: Path) -> Iterator[Boundary]:
    keys = ControlKeys.in_dir(tmp_path / "control")
    clock = Clock(NOW)
    with Metastore.open(f"sqlite:///{tmp_path / 'metastore.db'}") as metastore:
        provision(metastore)
        issuer = TokenIssuer(keys.ring, metastore, clock)
        with serve(control_stub(keys, metastore)) as url:
            cache_clock = Clock(0.0)
            key_set = RemoteKeySet(
                url, ttl_s=TTL_S, refetch_interval_s=REFETCH_S, clock=cache_clock
            )
            with UserTokenAuth.remote(key_set, clock=clock, owned=True) as auth:
                yield Boundary(keys, metastore, issuer, url, cache_clock, clock, auth)


# --- valid tokens --------------------------------------------------------------------------


def test_valid_user_token(boundary: Boundary) -> None:
    issued = boundary.issuer.issue_user(TENANT, PROJECT, (PROD, DEV), True, 3600)
    identity = boundary.auth.authenticate(bearer(issued.token))
    assert identity == UserIdentity(
        TENANT,
        PROJECT,
        (PROD, DEV),
        True,
        issued.token_id,
        boundary.keys.ring().active,
        int(NOW),
        int(NOW) + 3600,
    )
    for name in ("authorization", "AUTHORIZATION"):
        assert boundary.auth.authenticate({name: f"bearer  {issued.token} "}) == identity


def test_expired_token_within_and_past_the_leeway(boundary: Boundary) -> None:
    token = boundary.issuer.issue_user(TENANT, PROJECT, (PROD,), ttl_s=60).token
    boundary.clock.now = NOW + 64  # exp was 4 s ago: inside the 5 s leeway
    assert boundary.auth.authenticate(bearer(token)).expires_at == int(NOW) + 60
    boundary.clock.now = NOW + 65
    error = refusal(boundary.auth, bearer(token))
    assert (error.status, error.code) == (401, "token_expired")
    assert error_headers(error)["WWW-Authenticate"] == f'Bearer realm="{REALM}"'


def test_token_issued_in_the_future_is_refused(boundary: Boundary) -> None:
    token = boundary.user()
    boundary.clock.now = NOW - 60
    assert refusal(boundary.auth, bearer(token)).code == "invalid_token"


def test_revoked_token_is_refused_once_the_list_refreshes(boundary: Boundary) -> None:
    revoked = boundary.issuer.issue_user(TENANT, PROJECT, (PROD,), ttl_s=3600)
    kept = boundary.user()
    assert boundary.auth.authenticate(bearer(revoked.token)).token_id == revoked.token_id
    assert boundary.metastore.revoke_token(revoked.token_id)
    assert boundary.auth.authenticate(bearer(revoked.token))  # the cached list: up to TTL late
    boundary.cache_clock.now += TTL_S
    error = refusal(boundary.auth, bearer(revoked.token))
    assert (error.status, error.code) == (401, "token_revoked")
    assert revoked.token_id in error.message
    assert boundary.auth.authenticate(bearer(kept)).environments == (PROD,)


@pytest.mark.parametrize("kind", ["publisher", "workload"])
def test_other_token_kinds_are_forbidden(boundary: Boundary, kind: str) -> None:
    if kind == "publisher":
        token = boundary.issuer.issue_publisher(Scope(TENANT, PROJECT, PROD), 3600).token
    else:
        token = boundary.issuer.issue_workload(TENANT, "dep_a", "cell-1", 600).token
    error = refusal(boundary.auth, bearer(token))
    assert (error.status, error.code) == (403, "wrong_token_kind")
    assert isinstance(error, Forbidden) and "user token" in error.message
    assert "WWW-Authenticate" not in error_headers(error)


# --- garbage and forgeries -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({}, "missing_token"),
        ({"Authorization": ""}, "missing_token"),
        ({"Authorization": "Bearer"}, "missing_token"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, "missing_token"),
        ({"Authorization": "Bearer two words"}, "missing_token"),
        ({"X-Token": "Bearer x"}, "missing_token"),
        ({"Authorization": "Bearer not-a-jwt"}, "invalid_token"),
        ({"Authorization": "Bearer a.b.c"}, "invalid_token"),
        ({"Authorization": "Bearer ééé"}, "invalid_token"),
    ],
)
def test_missing_or_garbled_header_is_401_with_a_challenge(
    boundary: Boundary, headers: dict[str, str], code: str
) -> None:
    error = refusal(boundary.auth, headers)
    assert isinstance(error, Unauthenticated) and (error.status, error.code) == (401, code)
    assert error_headers(error) == {"WWW-Authenticate": 'Bearer realm="baml-user"'}
    assert set(error_body(error, "req_1")["error"]) == {
        "code",
        "message",
        "request_id",
        "retryable",
        "details",
    }


def test_tampered_and_unsigned_tokens_are_refused(boundary: Boundary) -> None:
    token = boundary.user((PROD,))
    kid = boundary.keys.ring().active
    claims = jwt.decode(token, options={"verify_signature": False})
    header, _, signature = token.split(".")
    widened = jwt.encode({**claims, "environments": [PROD, DEV]}, "x" * 32, algorithm="HS256")
    spliced = f"{header}.{widened.split('.')[1]}.{signature}"
    assert refusal(boundary.auth, bearer(spliced)).code == "invalid_token"
    unsigned = jwt.encode(claims, "", algorithm="none", headers={"kid": kid})
    assert refusal(boundary.auth, bearer(unsigned)).code == "invalid_token"
    shared = jwt.encode(claims, "s" * 32, algorithm="HS256", headers={"kid": kid})
    assert refusal(boundary.auth, bearer(shared)).code == "invalid_token"


def test_token_of_another_signing_key(boundary: Boundary, tmp_path: Path) -> None:
    assert boundary.auth.authenticate(bearer(boundary.user()))
    stranger = ControlKeys.in_dir(tmp_path / "stranger")
    elsewhere = TokenIssuer(stranger.ring, MemoryTokenRegistry(), Clock(NOW))
    token = elsewhere.issue_user(TENANT, PROJECT, (PROD,), ttl_s=600).token
    pending = refusal(boundary.auth, bearer(token))  # key set fetched just now: cannot tell yet
    assert isinstance(pending, DependencyUnavailable) and pending.code == "signing_key_pending"
    assert int(error_headers(pending)["Retry-After"]) >= 1
    boundary.cache_clock.now += REFETCH_S
    error = refusal(boundary.auth, bearer(token))
    assert (error.status, error.code) == (401, "unknown_signing_key")

    same_kid = SigningKey.generate("EdDSA", kid=boundary.keys.ring().active)
    impostor = TokenIssuer(lambda: KeyRing((same_kid,), same_kid.kid), MemoryTokenRegistry())
    forged = impostor.issue_user(TENANT, PROJECT, (PROD, DEV), True, 600).token
    assert refusal(boundary.auth, bearer(forged)).code == "invalid_token"


def test_rotated_key_verifies_after_a_refetch(boundary: Boundary) -> None:
    old = boundary.user()
    assert boundary.auth.authenticate(bearer(old))
    boundary.keys.rotate()
    new = boundary.user()
    boundary.cache_clock.now += REFETCH_S
    assert boundary.auth.authenticate(bearer(new)).kid == boundary.keys.ring().active
    assert boundary.auth.authenticate(bearer(old))


def test_before_the_first_fetch_it_is_503_not_401(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = closed_port_url()
    with caplog.at_level(logging.WARNING, logger="baml_studio.coordinator.auth"):
        auth = UserTokenAuth.open(tmp_path / "keys", url)
    assert any(url in r.getMessage() for r in caplog.records)
    with auth:
        error = refusal(auth, bearer(jwt.encode({"a": 1}, "k" * 32, headers={"kid": "k1"})))
    assert isinstance(error, DependencyUnavailable) and error.retryable
    assert error.code == "control_plane_unavailable"
    assert "Retry-After" in error_headers(error)
    assert not (tmp_path / "keys").exists()  # no local ring when the control plane is named


# --- scope and permissions -----------------------------------------------------------------


def test_scope_for_one_environment(boundary: Boundary) -> None:
    identity = boundary.auth.authenticate(bearer(boundary.user((PROD,))))
    assert UserTokenAuth.scope_for(identity, None) == Scope(TENANT, PROJECT, PROD)
    assert boundary.auth.scope_for(identity, PROD) == Scope(TENANT, PROJECT, PROD)
    for other in (DEV, "", "env_prod ", "../env_prod"):
        with pytest.raises(Forbidden) as caught:
            UserTokenAuth.scope_for(identity, other)
        assert caught.value.code == "scope_mismatch" and PROD in caught.value.message


def test_scope_for_several_environments(boundary: Boundary) -> None:
    identity = boundary.auth.authenticate(bearer(boundary.user((PROD, DEV))))
    assert UserTokenAuth.scope_for(identity, DEV) == Scope(TENANT, PROJECT, DEV)
    assert UserTokenAuth.scope_for(identity, PROD) == Scope(TENANT, PROJECT, PROD)
    with pytest.raises(BadRequest) as caught:
        UserTokenAuth.scope_for(identity, None)
    error = caught.value
    assert (error.status, error.code) == (400, "environment_required")
    assert error.details == {"environments": [PROD, DEV]}
    assert PROD in error.message and DEV in error.message
    with pytest.raises(Forbidden) as mismatch:
        UserTokenAuth.scope_for(identity, "env_staging")
    assert mismatch.value.code == "scope_mismatch"


def test_require_erasure(boundary: Boundary) -> None:
    allowed = boundary.auth.authenticate(bearer(boundary.user(erasure=True)))
    UserTokenAuth.require_erasure(allowed)
    denied = boundary.auth.authenticate(bearer(boundary.user(erasure=False)))
    with pytest.raises(Forbidden) as caught:
        UserTokenAuth.require_erasure(denied)
    assert (caught.value.status, caught.value.code) == (403, "permission_denied")
    assert denied.token_id in caught.value.message and "--erasure" in caught.value.message


# --- the embedded key source ---------------------------------------------------------------


def test_local_ring_with_the_metastore_applies_every_check(tmp_path: Path) -> None:
    with Metastore.open(f"sqlite:///{tmp_path / 'metastore.db'}") as metastore:
        provision(metastore)
        issuer = TokenIssuer(ControlKeys.in_dir(tmp_path / "control").ring, metastore)
        auth = UserTokenAuth.local(tmp_path / "control", metastore)
        issued = issuer.issue_user(TENANT, PROJECT, (PROD,), ttl_s=600)
        assert auth.authenticate(bearer(issued.token)).token_id == issued.token_id
        metastore.revoke_token(issued.token_id)
        assert refusal(auth, bearer(issued.token)).code == "token_revoked"  # at once
        unrecorded = TokenIssuer(
            ControlKeys.in_dir(tmp_path / "control").ring, MemoryTokenRegistry()
        ).issue_user(TENANT, PROJECT, (PROD,), ttl_s=600)
        assert refusal(auth, bearer(unrecorded.token)).code == "invalid_token"


def test_open_without_a_url_uses_the_local_ring(tmp_path: Path) -> None:
    auth = UserTokenAuth.open(tmp_path / "keys")
    keys = ControlKeys.in_dir(tmp_path / "keys")
    assert keys.path.exists()  # created on first use, as the control plane does
    issued = TokenIssuer(keys.ring, MemoryTokenRegistry()).issue_user(
        TENANT, PROJECT, (PROD, DEV), ttl_s=600
    )
    identity = auth.authenticate(bearer(issued.token))
    assert identity.environments == (PROD, DEV) and not identity.erasure
    other = TokenIssuer(ControlKeys.in_dir(tmp_path / "other").ring, MemoryTokenRegistry())
    stranger = other.issue_user(TENANT, PROJECT, (PROD,), ttl_s=600).token
    assert refusal(auth, bearer(stranger)).code == "unknown_signing_key"
    auth.close()


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.text(max_size=300))
def test_any_header_value_is_refused_with_an_api_error(tmp_path: Path, value: str) -> None:
    auth = UserTokenAuth.local(tmp_path / "fuzz")
    for headers in ({"Authorization": value}, {"Authorization": f"Bearer {value}"}):
        with pytest.raises(Unauthenticated):
            auth.authenticate(headers)


def test_revocation_list_registry_is_read_only() -> None:
    registry = RevocationListRegistry({"tok_gone"}.__contains__)
    assert registry.token_state("tok_gone", "hash") == "revoked"
    assert registry.token_state("tok_here", "hash") == "active"
    assert registry.get_token("tok_here") is None
    with pytest.raises(TypeError, match="read-only"):
        registry.revoke_token("tok_here")
    with pytest.raises(TypeError, match="cannot list"):
        registry.revoked_token_ids()


# --- the real control plane ----------------------------------------------------------------


def test_real_control_plane_tokens_and_revocations(
    tmp_path: Path, chdb_dsn: str, fact_database: str
) -> None:
    with control_plane(tmp_path / "control", chdb_dsn, fact_database) as rig:
        issuer = TokenIssuer(rig.control.keys, rig.control.metastore)
        issued = issuer.issue_user(SCOPE_A.tenant, SCOPE_A.project, [SCOPE_A.environment], True)
        cache_clock = Clock(0.0)
        key_set = RemoteKeySet(rig.url, ttl_s=TTL_S, clock=cache_clock)
        with UserTokenAuth.open(tmp_path / "unused", rig.url, key_set=key_set) as auth:
            identity = auth.authenticate(bearer(issued.token))
            assert auth.scope_for(identity, None) == SCOPE_A
            auth.require_erasure(identity)
            workload = refusal(auth, bearer(rig.token_a))
            assert workload.code == "wrong_token_kind"
            rig.control.metastore.revoke_token(issued.token_id)
            cache_clock.now += TTL_S
            assert refusal(auth, bearer(issued.token)).code == "token_revoked"
        assert not (tmp_path / "unused").exists()
