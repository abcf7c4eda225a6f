"""Publisher tokens: mint/verify with both algorithms, expiry, kind, rotation."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from gateway_rig import GatewayRig, body_of, entry, request_body
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.gateway.config import Scope
from baml_studio.gateway.errors import Forbidden, KeyringError, Unauthenticated
from baml_studio.gateway.tokens import (
    MIN_SECRET_BYTES,
    KeyRing,
    KeyRingFile,
    PublisherTokenVerifier,
    SigningKey,
    mint_publisher_token,
)
from json_fuzz import JSON_VALUES, mutations

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


# --- hostile input: the key ring file and bearer tokens ---------------------------------------

RING = KeyRing((SigningKey.generate("HS256", "k_hs"), SigningKey.generate("EdDSA", "k_ed")), "k_ed")
RING_JSON = json.loads(RING.to_json())


def ring_or_keyring_error(text: str) -> None:
    try:
        ring = KeyRing.from_json(text)
    except KeyringError as exc:
        assert exc.status == 500 and exc.message
        return
    assert KeyRing.from_json(ring.to_json()) == ring
    for key in ring.keys:
        key.verifying_material()  # loads: a ring that loads can verify
        assert key.alg != "HS256" or len(key.material) >= MIN_SECRET_BYTES


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200) | JSON_VALUES.map(json.dumps) | mutations(RING_JSON).map(json.dumps))
def test_fuzz_keyring_from_json_loads_or_raises_keyring_error(text: str) -> None:
    ring_or_keyring_error(text)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{}", 'a key ring is {"active"'),
        ("[]", 'a key ring is {"active"'),
        ('{"active": "a", "keys": 5}', 'a key ring is {"active"'),
        ('{"active": 5, "keys": []}', "active key id is 5"),
        ('{"active": "a", "keys": [{"kid": "a"}]}', "algorithm None is not one of"),
        ('{"active": "a", "keys": [null]}', "entry 0 is None"),
        ('{"active": "a", "keys": [{"kid": 7, "alg": "HS256"}]}', "entry 0 has kid 7"),
        ('{"active": "a", "keys": [{"kid": "a", "alg": "HS256", "secret": "!!"}]}',
         "its secret does not load"),
        ('{"active": "a", "keys": [{"kid": "a", "alg": "EdDSA", "private_key": 5}]}',
         "needs 'private_key' as a string"),
        ('{"active": "a", "keys": [{"kid": "a", "alg": "EdDSA", "private_key": "junk"}]}',
         "its private_key does not load"),
        ('{"active": "b", "keys": [{"kid": "a", "alg": "HS256", "secret": "' + "A" * 44 + '"}]}',
         "active key 'b' is not in the ring"),
        ("[" * 100_000, "not JSON"),
    ],
)  # fmt: skip
def test_malformed_keyrings_raise_keyring_error_naming_the_entry(text: str, fragment: str) -> None:
    with pytest.raises(KeyringError) as caught:
        KeyRing.from_json(text)
    assert fragment in caught.value.message


def test_a_keyring_file_that_does_not_parse_raises_keyring_error_naming_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "publisher-keys.json"
    for content in (b"[" * 100_000, b"\xff\xfe", b'{"active": "a", "keys": [{}]}'):
        path.write_bytes(content)
        with pytest.raises(KeyringError) as caught:
            KeyRingFile(path).load()
        assert str(path) in caught.value.message


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


CLAIMS = {
    **SCOPE.as_dict(),
    "kind": "publisher",
    "iat": 0,
    "exp": 2**32,
    "kid": "k_hs",
    "jti": "tok_1",
}


def _signed(claims: dict[str, Any], header: dict[str, Any]) -> str | None:
    key = RING.get("k_hs")
    assert key is not None
    try:
        return jwt.encode(claims, key.material, algorithm="HS256", headers=header)
    except (TypeError, ValueError, jwt.PyJWTError):  # a header or claim PyJWT will not write
        return None


TOKENS = (
    st.text(max_size=300)
    | st.from_regex(
        r"[A-Za-z0-9_=-]{0,40}\.[A-Za-z0-9_=-]{0,40}\.[A-Za-z0-9_=-]{0,40}", fullmatch=True
    )
    | st.builds(
        lambda header, claims: f"{_b64(header.encode())}.{_b64(claims.encode())}.c2ln",
        JSON_VALUES.map(json.dumps) | mutations({"alg": "HS256", "kid": "k_hs"}).map(json.dumps),
        JSON_VALUES.map(json.dumps),
    )
    | st.builds(_signed, mutations(CLAIMS), st.just({"kid": "k_hs"}))
    | st.builds(_signed, st.just(CLAIMS), mutations({"kid": "k_hs", "typ": "JWT"}))
)


@settings(max_examples=400, deadline=None)
@given(TOKENS)
def test_fuzz_verify_answers_401_403_or_an_identity(token: str | None) -> None:
    if token is None:
        return
    revoked = {"tok_revoked"}
    verifier = PublisherTokenVerifier(lambda: RING, is_revoked=revoked.__contains__)
    try:
        identity = verifier.verify(token)
    except (Unauthenticated, Forbidden) as exc:
        assert exc.status in (401, 403) and exc.message
        return
    assert isinstance(identity.scope, Scope) and type(identity.expires_at) is int
    assert identity.kid in ("k_hs", "k_ed") and identity.token_id not in revoked
