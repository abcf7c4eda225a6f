"""RemoteKeySet: caching, early refetch on an unknown kid (rate-limited), last good copy."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import httpx
import pytest

from baml_studio.apierrors import DependencyUnavailable
from baml_studio.control.identity import jwks_document
from baml_studio.control.identity_remote import RemoteKeySet
from baml_studio.gateway.tokens import KeyRing, PublicKey

URL = "https://control.test"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeControl:
    """The two documents over httpx.MockTransport; ``down`` makes every request fail."""

    def __init__(self, ring: KeyRing) -> None:
        self.ring = ring
        self.revoked: list[str] = []
        self.down = False
        self.jwks_override: Any = None
        self.calls: Counter[str] = Counter()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls[request.url.path] += 1
        if self.down:
            raise httpx.ConnectError("refused", request=request)
        if request.url.path == "/.well-known/jwks.json":
            document = self.jwks_override or jwks_document(self.ring)
            return httpx.Response(200, json=document)
        if request.url.path == "/token-revocations":
            return httpx.Response(200, json={"revoked": self.revoked})
        return httpx.Response(404, json={})

    def key_set(self, clock: Clock, **options: Any) -> RemoteKeySet:
        client = httpx.Client(transport=httpx.MockTransport(self))
        return RemoteKeySet(URL + "/", client=client, clock=clock, **options)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def control() -> FakeControl:
    return FakeControl(KeyRing.generate("EdDSA"))


def test_remote_keys_cached_for_ttl(control: FakeControl, clock: Clock) -> None:
    keys = control.key_set(clock, ttl_s=300)
    kid = control.ring.active
    assert keys.get(kid) == PublicKey.of(control.ring.active_key)
    for _ in range(5):
        assert keys.get(kid) is not None
        assert keys.is_revoked("tok_x") is False
    assert control.calls == {"/.well-known/jwks.json": 1, "/token-revocations": 1}
    clock.now += 299
    keys.get(kid)
    keys.is_revoked("tok_x")
    assert control.calls == {"/.well-known/jwks.json": 1, "/token-revocations": 1}
    control.revoked = ["tok_x"]
    clock.now += 1
    assert keys.is_revoked("tok_x") is True
    keys.get(kid)
    assert control.calls == {"/.well-known/jwks.json": 2, "/token-revocations": 2}


def test_unknown_kid_refetches_at_most_once_per_interval(
    control: FakeControl, clock: Clock
) -> None:
    keys = control.key_set(clock, ttl_s=300, refetch_interval_s=10)
    assert keys.get(control.ring.active) is not None
    clock.now += 10
    assert keys.get("k_forged") is None
    assert control.calls["/.well-known/jwks.json"] == 2
    with pytest.raises(DependencyUnavailable) as pending:
        keys.get("k_forged_again")
    assert pending.value.code == "signing_key_pending" and pending.value.retry_after == 10
    clock.now += 4
    for _ in range(20):
        with pytest.raises(DependencyUnavailable):
            keys.get("k_forged_again")
    assert control.calls["/.well-known/jwks.json"] == 2
    control.ring = control.ring.rotated()
    clock.now += 6
    assert keys.get(control.ring.active) == PublicKey.of(control.ring.active_key)
    assert control.calls["/.well-known/jwks.json"] == 3


def test_unreachable_control_plane_serves_last_good_copy(
    control: FakeControl, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    keys = control.key_set(clock, ttl_s=300, refetch_interval_s=10)
    control.revoked = ["tok_gone"]
    assert keys.refresh() is True
    kid = control.ring.active
    control.down = True
    clock.now += 1000
    with caplog.at_level(logging.WARNING, logger="baml_studio.control.identity_remote"):
        assert keys.get(kid) is not None
        assert keys.is_revoked("tok_gone") is True
        assert keys.refresh() is False
    messages = [r.getMessage() for r in caplog.records]
    assert any("jwks.json" in m and "ConnectError" in m for m in messages)
    attempts = control.calls["/.well-known/jwks.json"]
    for _ in range(10):
        keys.get(kid)
    assert control.calls["/.well-known/jwks.json"] == attempts
    control.down = False
    clock.now += 10
    assert keys.get(kid) is not None
    assert control.calls["/.well-known/jwks.json"] == attempts + 1


def test_never_fetched_is_503_not_401(control: FakeControl, clock: Clock) -> None:
    control.down = True
    keys = control.key_set(clock)
    with pytest.raises(DependencyUnavailable) as caught:
        keys.get("k_any")
    assert caught.value.status == 503 and caught.value.retry_after
    with pytest.raises(DependencyUnavailable):
        keys.is_revoked("tok_any")


@pytest.mark.parametrize(
    "document",
    [
        {"keys": "nope"},
        {"nothing": []},
        ["keys"],
    ],
)
def test_bad_documents_keep_the_last_good_copy(
    control: FakeControl, clock: Clock, document: Any
) -> None:
    keys = control.key_set(clock, ttl_s=300, refetch_interval_s=10)
    kid = control.ring.active
    assert keys.get(kid) is not None
    control.jwks_override = document
    clock.now += 300
    assert keys.get(kid) is not None
    assert control.calls["/.well-known/jwks.json"] == 2


def test_non_ed25519_entries_are_skipped(control: FakeControl, clock: Clock) -> None:
    good = jwks_document(control.ring)["keys"][0]
    control.jwks_override = {
        "keys": [{"kty": "RSA", "kid": "k_rsa", "n": "x", "e": "AQAB"}, {"kid": 3}, good]
    }
    keys = control.key_set(clock, refetch_interval_s=10)
    assert keys.get(good["kid"]) is not None
    clock.now += 10
    assert keys.get("k_rsa") is None


def test_http_error_status_and_bad_json_keep_the_last_good_copy(clock: Clock) -> None:
    ring = KeyRing.generate("EdDSA")
    answers = iter(
        [
            httpx.Response(200, json=jwks_document(ring)),
            httpx.Response(500, text="boom"),
            httpx.Response(200, text="{not json"),
        ]
    )
    client = httpx.Client(transport=httpx.MockTransport(lambda request: next(answers)))
    keys = RemoteKeySet(URL, client=client, clock=clock, ttl_s=1, refetch_interval_s=1)
    assert keys.get(ring.active) is not None
    for _ in range(2):
        clock.now += 1
        assert keys.get(ring.active) is not None


@pytest.mark.parametrize(
    "body", [b"[" * 100_000, b'{"keys":' * 3000 + b"[]" + b"}" * 3000, b'{"keys": ' + b"1" * 5000]
)
def test_a_document_that_cannot_be_parsed_keeps_the_last_good_copy(
    clock: Clock, body: bytes
) -> None:
    ring = KeyRing.generate("EdDSA")
    answers = iter(
        [httpx.Response(200, json=jwks_document(ring)), httpx.Response(200, content=body)]
    )
    client = httpx.Client(transport=httpx.MockTransport(lambda request: next(answers)))
    keys = RemoteKeySet(URL, client=client, clock=clock, ttl_s=1, refetch_interval_s=1)
    assert keys.get(ring.active) is not None
    clock.now += 1
    assert keys.get(ring.active) is not None


def test_control_url_must_be_http() -> None:
    with pytest.raises(ValueError):
        RemoteKeySet("control.test")
