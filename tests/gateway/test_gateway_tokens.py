"""Publisher tokens: mint/verify with both algorithms, expiry, kind, rotation."""

from __future__ import annotations

import time
from pathlib import Path

import jwt
import pytest
from gateway_rig import GatewayRig, body_of, entry, request_body

from baml_studio.gateway.config import Scope
from baml_studio.gateway.errors import Forbidden, KeyringError, Unauthenticated
from baml_studio.gateway.tokens import (
    KeyRing,
    KeyRingFile,
    PublisherTokenVerifier,
    mint_publisher_token,
)

SCOPE = Scope("tn_acme", "prj_billing", "env_prod")


@pytest.mark.parametrize("alg", ["HS256", "EdDSA"])
def test_gateway_token_round_trip(alg: str) -> None:
    ring = KeyRing.generate(alg)  # type: ignore[arg-type]
    token = mint_publisher_token(ring, SCOPE, 60)
    identity = PublisherTokenVerifier(lambda: ring).verify(token)
    assert identity.scope == SCOPE and identity.kid == ring.active
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["kind"] == "publisher" and claims["kid"] == ring.active
    assert {"tenant", "project", "environment", "exp", "iat"} <= set(claims)
    assert jwt.get_unverified_header(token)["alg"] == alg


def test_gateway_token_refusals() -> None:
    ring = KeyRing.generate()
    verifier = PublisherTokenVerifier(lambda: ring, leeway_seconds=0)
    with pytest.raises(Unauthenticated) as expired:
        verifier.verify(mint_publisher_token(ring, SCOPE, 10, now=time.time() - 60))
    assert expired.value.code == "token_expired"
    key = ring.active_key
    wrong_kind = jwt.encode(
        {**SCOPE.as_dict(), "kind": "user", "exp": int(time.time()) + 60, "kid": key.kid},
        key.material,
        algorithm="HS256",
        headers={"kid": key.kid},
    )
    with pytest.raises(Forbidden):
        verifier.verify(wrong_kind)
    no_env = jwt.encode(
        {
            "tenant": "t",
            "project": "p",
            "kind": "publisher",
            "exp": int(time.time()) + 60,
            "kid": key.kid,
        },
        key.material,
        algorithm="HS256",
        headers={"kid": key.kid},
    )
    with pytest.raises(Unauthenticated):
        verifier.verify(no_env)
    unsigned = jwt.encode(
        {**SCOPE.as_dict(), "kind": "publisher", "exp": int(time.time()) + 60, "kid": key.kid},
        None,
        algorithm="none",
        headers={"kid": key.kid},
    )
    with pytest.raises(Unauthenticated):
        verifier.verify(unsigned)


def test_gateway_key_rotation_over_http(dir_rig: GatewayRig) -> None:
    body = request_body([entry("meta_segment", body_of("m"), sequence=1)])
    old_kid = dir_rig.keys.load().active
    old_token = dir_rig.token()
    dir_rig.keys.save(dir_rig.keys.load().rotated())
    new_token = dir_rig.token()
    assert dir_rig.keys.load().active != old_kid
    assert dir_rig.authorize(body, token=old_token).status_code == 200
    dir_rig.keys.save(dir_rig.keys.load().without(old_kid))
    refused = dir_rig.authorize(body, token=old_token)
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "unknown_signing_key"
    assert dir_rig.authorize(body, token=new_token).status_code == 200


def test_gateway_keyring_file(tmp_path: Path) -> None:
    path = tmp_path / "k" / "publisher-keys.json"
    keys = KeyRingFile(path)
    with pytest.raises(KeyringError):
        keys.load()
    ring = keys.load_or_create("EdDSA")
    assert path.stat().st_mode & 0o777 == 0o600
    assert KeyRingFile(path).load() == ring
    with pytest.raises(ValueError):
        ring.without(ring.active)
    path.write_text("{", encoding="utf-8")
    with pytest.raises(KeyringError):
        KeyRingFile(path).load()
