"""Control-plane identity: the key ring, JWKS, issuing and verifying the three token kinds."""

from __future__ import annotations

import base64
import hashlib
import json
import stat
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.apierrors import (
    BadRequest,
    Conflict,
    DependencyUnavailable,
    Forbidden,
    NotFound,
    Unauthenticated,
)
from baml_studio.control.identity import (
    TOKEN_ID,
    ControlKeys,
    MemoryTokenRegistry,
    TokenIssuer,
    TokenVerifier,
    UserIdentity,
    WorkloadIdentity,
    bearer_token,
    jwks_document,
    new_token_id,
    revocations_document,
)
from baml_studio.control.model import TokenKind
from baml_studio.gateway.config import Scope
from baml_studio.gateway.errors import KeyringError
from baml_studio.gateway.tokens import (
    KeyRing,
    KeyRingFile,
    PublicKey,
    PublisherIdentity,
    PublisherTokenVerifier,
    SigningKey,
    mint_publisher_token,
)

NOW = float(int(time.time()))
"""A fixed clock near real time: the gateway's verifier reads the real clock."""
SCOPE = Scope("tn_acme", "prj_billing", "env_prod")
COMMON = {"kind", "tenant", "jti", "iat", "exp", "kid"}


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Parts:
    """A ring, a registry, an issuer and a verifier sharing one clock."""

    def __init__(self, ring: KeyRing | None = None) -> None:
        self.ring = ring or KeyRing.generate("EdDSA")
        self.clock = Clock()
        self.registry = MemoryTokenRegistry(self.clock)
        self.issuer = TokenIssuer(lambda: self.ring, self.registry, self.clock)
        self.verifier = TokenVerifier(lambda: self.ring, self.registry, 5, self.clock)

    def sign(self, claims: dict[str, Any], key: SigningKey | None = None) -> str:
        key = key or self.ring.active_key
        return jwt.encode(
            claims, key.signing_material(), algorithm=key.alg, headers={"kid": key.kid}
        )


def refusal(parts: Parts, token: str, kind: TokenKind = TokenKind.PUBLISHER) -> tuple[int, str]:
    with pytest.raises((Unauthenticated, Forbidden)) as caught:
        parts.verifier.verify(token, kind)
    return caught.value.status, caught.value.code


# --- keys --------------------------------------------------------------------------------------


def test_control_keys_created_once_0600_eddsa_then_rotated_and_retired(tmp_path: Path) -> None:
    keys = ControlKeys.in_dir(tmp_path / "control")
    ring = keys.ring()
    assert keys.path == tmp_path / "control" / "control-keys.json"
    assert stat.S_IMODE(keys.path.stat().st_mode) == 0o600
    assert [k.alg for k in ring.keys] == ["EdDSA"]
    assert keys.ring() == ring
    rotated = keys.rotate()
    assert rotated.active != ring.active and {ring.active, rotated.active} == {
        k.kid for k in rotated.keys
    }
    assert ControlKeys.in_dir(tmp_path / "control").ring() == rotated
    with pytest.raises(ValueError, match="active"):
        keys.retire(rotated.active)
    with pytest.raises(ValueError, match="no key"):
        keys.retire("k_nope")
    assert [k.kid for k in keys.retire(ring.active).keys] == [rotated.active]


def test_control_keys_refuse_a_shared_secret(tmp_path: Path) -> None:
    path = tmp_path / "control-keys.json"
    KeyRingFile(path).save(KeyRing.generate("EdDSA").rotated("HS256"))
    with pytest.raises(KeyringError, match="non-EdDSA"):
        ControlKeys(path).ring()


def test_jwks_publishes_public_halves_only() -> None:
    ring = KeyRing.generate("EdDSA").rotated("HS256").rotated("EdDSA")
    document = jwks_document(ring)
    eddsa = [k for k in ring.keys if k.alg == "EdDSA"]
    assert [entry["kid"] for entry in document["keys"]] == [k.kid for k in eddsa]
    for entry, key in zip(document["keys"], eddsa, strict=True):
        assert set(entry) == {"kty", "crv", "x", "kid", "alg", "use"}
        assert (entry["kty"], entry["crv"], entry["alg"], entry["use"]) == (
            "OKP",
            "Ed25519",
            "EdDSA",
            "sig",
        )
        assert "=" not in entry["x"]
        raw = base64.urlsafe_b64decode(entry["x"] + "==")
        assert PublicKey.from_jwk(entry) == PublicKey(key.kid, raw)
    text = json.dumps(document)
    for key in ring.keys:
        assert base64.b64encode(key.material).decode() not in text
        assert key.material.decode("latin-1") not in text


def test_jwk_decoder_refuses_other_shapes() -> None:
    good = PublicKey.of(SigningKey.generate("EdDSA")).to_jwk()
    for bad in (
        {**good, "kty": "RSA"},
        {**good, "crv": "X25519"},
        {**good, "use": "enc"},
        {**good, "alg": "HS256"},
        {**good, "x": good["x"][:-4]},
        {k: v for k, v in good.items() if k != "kid"},
        {**good, "x": 5},
    ):
        with pytest.raises(ValueError):
            PublicKey.from_jwk(bad)
    with pytest.raises(ValueError):
        PublicKey.of(SigningKey.generate("HS256"))


# --- issuing -----------------------------------------------------------------------------------


def test_issue_each_kind_with_exactly_the_documented_claims() -> None:
    parts = Parts()
    user = parts.issuer.issue_user("tn_acme", "prj_billing", ["env_prod", "env_dev"], True, 3600)
    publisher = parts.issuer.issue_publisher(SCOPE, 86400)
    workload = parts.issuer.issue_workload("tn_acme", "dep_byoc1", "cell_eu1")
    extra = {
        user: {"project", "environments", "erasure"},
        publisher: {"project", "environment"},
        workload: {"deployment", "cell"},
    }
    for issued, names in extra.items():
        header = jwt.get_unverified_header(issued.token)
        claims = jwt.decode(issued.token, options={"verify_signature": False})
        assert header["alg"] == "EdDSA" and header["kid"] == parts.ring.active
        assert set(claims) == COMMON | names
        assert claims["jti"] == issued.token_id and TOKEN_ID.fullmatch(issued.token_id)
        assert claims["iat"] == int(NOW) and claims["exp"] == issued.expires_at
        record = parts.registry.get_token(issued.token_id)
        assert record == issued.record
        assert record.token_hash == hashlib.sha256(issued.token.encode()).hexdigest()
        assert issued.token not in repr(record)
    assert jwt.decode(user.token, options={"verify_signature": False})["environments"] == [
        "env_prod",
        "env_dev",
    ]
    assert workload.expires_at - int(NOW) == 900
    assert publisher.record.environments == ("env_prod",)
    assert set(publisher.as_json()) >= {"token", "token_id", "expires_at"}


def test_issue_refuses_bad_lifetimes_and_ids() -> None:
    issuer = Parts().issuer
    with pytest.raises(BadRequest, match="3600"):
        issuer.issue_workload("tn_acme", "dep", "cell", ttl_s=3601)
    with pytest.raises(BadRequest):
        issuer.issue_user("tn_acme", "prj", ["env"], ttl_s=25 * 3600)
    with pytest.raises(BadRequest):
        issuer.issue_publisher(SCOPE, ttl_s=0)
    with pytest.raises(BadRequest, match="environments"):
        issuer.issue_user("tn_acme", "prj", [])
    with pytest.raises(BadRequest, match="environments"):
        issuer.issue_user("tn_acme", "prj", "env_prod")
    with pytest.raises(BadRequest, match="not a valid id"):
        issuer.issue_user("tn_acme", "prj", ["a/b"])
    with pytest.raises(BadRequest, match="tenant"):
        issuer.issue_workload("tn acme", "dep", "cell")


def test_issue_refuses_a_shared_secret_ring() -> None:
    parts = Parts(KeyRing.generate("HS256"))
    with pytest.raises(KeyringError):
        parts.issuer.issue_publisher(SCOPE)
    assert parts.registry.list_tokens() == []


def test_token_ids_are_ulids_sorted_by_time() -> None:
    ids = [new_token_id(NOW + i) for i in range(50)]
    assert all(TOKEN_ID.fullmatch(i) for i in ids)
    assert ids == sorted(ids) and len(set(ids)) == 50


# --- verifying ---------------------------------------------------------------------------------


def test_verify_returns_each_kind_identity() -> None:
    parts = Parts()
    user = parts.issuer.issue_user("tn_acme", "prj_billing", ["env_prod", "env_dev"], True, 3600)
    got = parts.verifier.verify(user.token, TokenKind.USER)
    assert got == UserIdentity(
        "tn_acme",
        "prj_billing",
        ("env_prod", "env_dev"),
        True,
        user.token_id,
        parts.ring.active,
        int(NOW),
        user.expires_at,
    )
    assert got.scope("env_dev") == Scope("tn_acme", "prj_billing", "env_dev")
    with pytest.raises(Forbidden):
        got.scope("env_other")
    publisher = parts.issuer.issue_publisher(SCOPE)
    assert parts.verifier.verify(publisher.token, TokenKind.PUBLISHER) == PublisherIdentity(
        SCOPE, parts.ring.active, publisher.expires_at, publisher.token_id
    )
    workload = parts.issuer.issue_workload("tn_acme", "dep_byoc1", "cell_eu1", 600)
    assert parts.verifier.verify(workload.token, TokenKind.WORKLOAD) == WorkloadIdentity(
        "tn_acme",
        "dep_byoc1",
        "cell_eu1",
        workload.token_id,
        parts.ring.active,
        int(NOW),
        int(NOW) + 600,
    )


def test_control_publisher_tokens_verify_at_the_gateway() -> None:
    parts = Parts()
    issued = parts.issuer.issue_publisher(SCOPE, 3600)
    public = PublicKey.of(parts.ring.active_key)

    class PublicOnly:
        def get(self, kid: str) -> PublicKey | None:
            return public if kid == public.kid else None

    for source in (parts.ring, PublicOnly()):
        identity = PublisherTokenVerifier(lambda s=source: s).verify(issued.token)
        assert identity.scope == SCOPE and identity.token_id == issued.token_id
    asked: list[str] = []

    def is_revoked(token_id: str) -> bool:
        asked.append(token_id)
        return token_id == issued.token_id

    verifier = PublisherTokenVerifier(lambda: parts.ring, is_revoked=is_revoked)
    with pytest.raises(Unauthenticated) as caught:
        verifier.verify(issued.token)
    assert caught.value.code == "token_revoked"
    local = mint_publisher_token(parts.ring, SCOPE, 60)  # `tokens mint`: no jti, never revoked
    assert verifier.verify(local).token_id is None
    assert asked == [issued.token_id]


def test_refusals_and_their_codes() -> None:
    parts = Parts()
    issued = parts.issuer.issue_publisher(SCOPE, 60)
    claims = jwt.decode(issued.token, options={"verify_signature": False})
    other = KeyRing.generate("EdDSA")
    forged_key = SigningKey(parts.ring.active, "EdDSA", other.active_key.material)

    assert refusal(parts, "not a jwt") == (401, "invalid_token")
    assert refusal(parts, parts.sign(claims, other.active_key)) == (401, "unknown_signing_key")
    assert refusal(parts, parts.sign(claims, forged_key)) == (401, "invalid_token")
    # a tampered signature: one character inside it changed (all six of its bits count there;
    # the last character's low bits do not, so a changed tail could decode to the same bytes)
    token = issued.token
    tampered = token[:-10] + ("B" if token[-10] == "A" else "A") + token[-9:]
    assert refusal(parts, tampered) == (401, "invalid_token")
    for name in sorted(COMMON):
        partial = {k: v for k, v in claims.items() if k != name}
        assert refusal(parts, parts.sign(partial)) == (401, "invalid_token"), name
    unrecorded = {**claims, "jti": new_token_id(NOW)}
    assert refusal(parts, parts.sign(unrecorded)) == (401, "invalid_token")
    same_id_other_text = {**claims, "iat": claims["iat"] - 1}
    assert refusal(parts, parts.sign(same_id_other_text)) == (401, "invalid_token")
    no_environment = {k: v for k, v in claims.items() if k != "environment"}
    assert refusal(parts, parts.sign(no_environment)) == (401, "invalid_token")
    assert refusal(parts, issued.token, TokenKind.WORKLOAD) == (403, "wrong_token_kind")
    assert refusal(parts, issued.token, TokenKind.USER) == (403, "wrong_token_kind")

    parts.clock.now = NOW + 60 + 5
    assert refusal(parts, issued.token) == (401, "token_expired")
    parts.clock.now = NOW + 60 + 4
    assert parts.verifier.verify(issued.token, TokenKind.PUBLISHER).scope == SCOPE

    assert parts.registry.revoke_token(issued.token_id) is True
    assert parts.registry.revoke_token(issued.token_id) is False
    assert refusal(parts, issued.token) == (401, "token_revoked")


def test_refuses_symmetric_algorithm_confusion() -> None:
    parts = Parts()
    issued = parts.issuer.issue_publisher(SCOPE, 60)
    claims = jwt.decode(issued.token, options={"verify_signature": False})
    public_bytes = PublicKey.of(parts.ring.active_key).raw
    confused = jwt.encode(
        claims, public_bytes, algorithm="HS256", headers={"kid": parts.ring.active}
    )
    assert refusal(parts, confused) == (401, "invalid_token")
    unsigned = jwt.encode(claims, None, algorithm="none", headers={"kid": parts.ring.active})
    assert refusal(parts, unsigned) == (401, "invalid_token")


def test_a_snapshot_signed_with_the_same_ring_is_not_a_token() -> None:
    parts = Parts()
    snapshot_like = {**SCOPE.as_dict(), "kind": "snapshot", "exp": int(NOW) + 60}
    assert refusal(parts, parts.sign({**snapshot_like, "kid": parts.ring.active})) == (
        401,
        "invalid_token",
    )


def test_registry_outage_is_not_a_401() -> None:
    parts = Parts()
    issued = parts.issuer.issue_workload("tn_acme", "dep", "cell")
    parts.registry.fail = DependencyUnavailable("metastore down")
    with pytest.raises(DependencyUnavailable):
        parts.verifier.verify(issued.token, TokenKind.WORKLOAD)


def test_rotated_key_ring_verifies_old_tokens_until_retired() -> None:
    parts = Parts()
    old = parts.issuer.issue_publisher(SCOPE, 600)
    old_kid = parts.ring.active
    parts.ring = parts.ring.rotated()
    new = parts.issuer.issue_publisher(SCOPE, 600)
    assert jwt.get_unverified_header(new.token)["kid"] == parts.ring.active != old_kid
    for token in (old.token, new.token):
        assert parts.verifier.verify(token, TokenKind.PUBLISHER).scope == SCOPE
    parts.ring = parts.ring.without(old_kid)
    assert refusal(parts, old.token) == (401, "unknown_signing_key")
    assert parts.verifier.verify(new.token, TokenKind.PUBLISHER).scope == SCOPE


# --- rotation and revocation -------------------------------------------------------------------


def test_rotate_token_keeps_claims_and_the_old_one_until_revoked() -> None:
    parts = Parts()
    old = parts.issuer.issue_user("tn_acme", "prj", ["env_a", "env_b"], True, 7200)
    parts.clock.now += 100
    new = parts.issuer.rotate(old.token_id)
    assert new.record.replaces == old.token_id and new.token_id != old.token_id
    assert new.expires_at == int(parts.clock.now) + 7200
    before = parts.verifier.verify(old.token, TokenKind.USER)
    after = parts.verifier.verify(new.token, TokenKind.USER)
    assert (after.tenant, after.project, after.environments, after.erasure) == (
        before.tenant,
        before.project,
        before.environments,
        before.erasure,
    )
    parts.registry.revoke_token(old.token_id)
    assert refusal(parts, old.token, TokenKind.USER) == (401, "token_revoked")
    assert parts.verifier.verify(new.token, TokenKind.USER).token_id == new.token_id
    with pytest.raises(Conflict):
        parts.issuer.rotate(old.token_id)
    with pytest.raises(NotFound):
        parts.issuer.rotate(new_token_id(NOW))
    assert parts.issuer.rotate(new.token_id, ttl_s=60).expires_at == int(parts.clock.now) + 60


def test_revocations_document_lists_unexpired_revoked_ids() -> None:
    parts = Parts()
    short = parts.issuer.issue_publisher(SCOPE, 10)
    long = parts.issuer.issue_publisher(SCOPE, 1000)
    kept = parts.issuer.issue_publisher(SCOPE, 1000)
    for issued in (short, long):
        parts.registry.revoke_token(issued.token_id)
    assert revocations_document(parts.registry) == {
        "revoked": sorted([short.token_id, long.token_id])
    }
    parts.clock.now += 11
    assert revocations_document(parts.registry) == {"revoked": [long.token_id]}
    assert [r.token_id for r in parts.registry.list_tokens("tn_acme")] == [kept.token_id]
    assert len(parts.registry.list_tokens(include_revoked=True)) == 3
    with pytest.raises(NotFound):
        parts.registry.revoke_token(new_token_id(NOW))


# --- bearer header -----------------------------------------------------------------------------


def test_bearer_token_parsing() -> None:
    assert bearer_token({"Authorization": "Bearer abc.def.ghi"}) == "abc.def.ghi"
    assert bearer_token({"authorization": "bearer  abc "}) == "abc"
    assert bearer_token({"AUTHORIZATION": "Bearer x"}) == "x"
    for headers in (
        {},
        {"authorization": ""},
        {"authorization": "Basic abc"},
        {"authorization": "Bearer"},
        {"authorization": "Bearer a b"},
    ):
        with pytest.raises(Unauthenticated) as caught:
            bearer_token(headers)
        assert caught.value.status == 401


# --- properties --------------------------------------------------------------------------------

ids = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True)


@settings(max_examples=40, deadline=None)
@given(
    tenant=ids,
    project=ids,
    environments=st.lists(ids, min_size=1, max_size=4, unique=True),
    erasure=st.booleans(),
    ttl=st.integers(1, 24 * 3600),
)
def test_user_tokens_round_trip(
    tenant: str, project: str, environments: list[str], erasure: bool, ttl: int
) -> None:
    parts = PARTS
    issued = parts.issuer.issue_user(tenant, project, environments, erasure, ttl)
    got = parts.verifier.verify(issued.token, TokenKind.USER)
    assert (got.tenant, got.project, got.environments, got.erasure) == (
        tenant,
        project,
        tuple(environments),
        erasure,
    )
    assert got.expires_at == int(NOW) + ttl


PARTS = Parts()
_GOOD = PARTS.issuer.issue_publisher(SCOPE, 600).token


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=300), st.binary(max_size=300).map(lambda b: b.decode("latin-1"))))
def test_verify_fuzz_only_refuses(text: str) -> None:
    with pytest.raises((Unauthenticated, Forbidden)):
        PARTS.verifier.verify(text, TokenKind.PUBLISHER)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(_GOOD) - 1), st.sampled_from("AQw_-.x"))
def test_verify_fuzz_mutated_token(position: int, char: str) -> None:
    mutated = _GOOD[:position] + char + _GOOD[position + 1 :]
    if mutated == _GOOD:
        return
    # even a change base64url ignores is refused: the registry holds the hash of the exact text
    with pytest.raises((Unauthenticated, Forbidden)):
        PARTS.verifier.verify(mutated, TokenKind.PUBLISHER)
