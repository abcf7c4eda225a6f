"""Query snapshot ids: issued ones resolve; any other text, any token, and any claims signed by
the ring's own key give 400 ``invalid_snapshot`` or ``snapshot_expired``, never another error."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import jwt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.apierrors import BadRequest
from baml_studio.control.snapshots import (
    MAX_EXPIRES_AT,
    PREFIX,
    InvalidSnapshot,
    SnapshotExpired,
    issue,
    resolve,
)
from baml_studio.gateway.config import Scope
from baml_studio.gateway.tokens import KeyRing, SigningKey
from json_fuzz import JSON_VALUES, mutations

RING = KeyRing((SigningKey.generate("HS256", "k_hs"), SigningKey.generate("EdDSA", "k_ed")), "k_hs")
SCOPE = Scope("tn_a", "prj_a", "env_a")
NOW = 1_800_000_000
CLAIMS = {
    **SCOPE.as_dict(),
    "kind": "snapshot",
    "catalog_version": "2026-09-01",
    "generation": "gen_1",
    "exp": NOW + 60,
    "kid": "k_hs",
    "nonce": "abc",
}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _signed(claims: Any, header: Any) -> str | None:
    key = RING.get("k_hs")
    assert key is not None
    try:
        token = jwt.encode(claims, key.material, algorithm="HS256", headers=header)
    except (TypeError, ValueError, jwt.PyJWTError):  # a header or claim PyJWT will not write
        return None
    return PREFIX + token


SNAPSHOT_IDS = (
    st.text(max_size=200)
    | st.text(max_size=200).map(lambda text: PREFIX + text)
    | st.builds(
        lambda header, claims: f"{PREFIX}{_b64(header.encode())}.{_b64(claims.encode())}.c2ln",
        JSON_VALUES.map(json.dumps) | mutations({"alg": "HS256", "kid": "k_hs"}).map(json.dumps),
        JSON_VALUES.map(json.dumps),
    )
    | st.builds(_signed, mutations(CLAIMS), st.just({"kid": "k_hs"}))
    | st.builds(
        _signed,
        st.builds(lambda exp: {**CLAIMS, "exp": exp}, st.integers() | st.floats()),
        st.just({"kid": "k_hs"}),
    )
    | st.builds(_signed, st.just(CLAIMS), mutations({"kid": "k_hs", "typ": "JWT"}))
)


@settings(max_examples=400, deadline=None)
@given(SNAPSHOT_IDS)
def test_fuzz_snapshot_ids_resolve_or_answer_400(snapshot_id: str | None) -> None:
    if snapshot_id is None:
        return
    try:
        snapshot = resolve(RING, snapshot_id, now=NOW)
    except (InvalidSnapshot, SnapshotExpired) as exc:
        assert exc.status == 400 and exc.message
        json.dumps(exc.details)
        return
    assert snapshot.expires_at > NOW and isinstance(snapshot.generation, str)
    assert snapshot.as_json()["snapshot_id"] == snapshot_id


def test_an_issued_snapshot_resolves_until_it_expires() -> None:
    made = issue(RING, SCOPE, "2026-09-01", "gen_1", 60, now=NOW)
    assert resolve(RING, made.snapshot_id, now=NOW) == made
    with pytest.raises(SnapshotExpired) as caught:
        resolve(RING, made.snapshot_id, now=NOW + 60)
    assert caught.value.details == {"expires_at": made.as_json()["expires_at"]}


@pytest.mark.parametrize(
    ("claims", "fragment"),
    [
        ({**CLAIMS, "exp": -(10**20)}, "claim exp must be whole seconds"),
        ({**CLAIMS, "exp": -62_135_596_801}, "claim exp must be whole seconds"),
        ({**CLAIMS, "exp": MAX_EXPIRES_AT + 1}, "claim exp must be whole seconds"),
        ({**CLAIMS, "exp": float("inf")}, "claim exp must be whole seconds"),
        ({**CLAIMS, "exp": 1e300}, "claim exp must be whole seconds"),
        ({**CLAIMS, "exp": True}, "claim exp must be whole seconds"),
        ({**CLAIMS, "generation": {"g": 1}}, "claim generation is dict, not a string"),
        ({**CLAIMS, "catalog_version": 7}, "claim catalog_version is int, not a string"),
    ],
)
def test_signed_claims_out_of_range_are_invalid_snapshots(
    claims: dict[str, Any], fragment: str
) -> None:
    snapshot_id = _signed(claims, {"kid": "k_hs"})
    assert snapshot_id is not None
    with pytest.raises(InvalidSnapshot) as caught:
        resolve(RING, snapshot_id, now=time.time())
    assert fragment in caught.value.message


def test_a_snapshot_id_of_deep_json_is_invalid() -> None:
    deep = f"{PREFIX}{_b64(b'[' * 5000)}.{_b64(b'{}')}.c2ln"
    with pytest.raises(BadRequest) as caught:
        resolve(RING, deep)
    assert caught.value.code == "invalid_snapshot"
