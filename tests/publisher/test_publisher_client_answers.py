"""The publisher's gateway client fed answers it cannot parse (nesting past the recursion
limit, a 5000-digit integer, hostile bytes) over ``httpx.MockTransport``: a typed
``GatewayError`` comes out, never a ``RecursionError``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.publisher.client import GatewayClient
from baml_studio.publisher.errors import (
    GatewayAuthError,
    GatewayError,
    GatewayProtocolError,
    GatewayRejected,
    GatewayThrottled,
)
from json_strategies import HOSTILE_BYTES, UNPARSEABLE

EUID = "3f9c2b7e1a4d4c8e9b0f1e2d3c4b5a69"
FLUSH_ID = "01J8ZK3V5N4Q2W8X7Y6T5R4E3D"


def _client(status: int, body: bytes) -> GatewayClient:
    transport = httpx.MockTransport(lambda _: httpx.Response(status, content=body))
    return GatewayClient("http://gateway", "token", transport=transport)


def _calls(client: GatewayClient) -> list[Callable[[], object]]:
    return [client.get_config, lambda: client.authorize(EUID, FLUSH_ID, [{"kind": "value"}])]


@pytest.mark.parametrize("body", UNPARSEABLE)
def test_a_2xx_that_cannot_be_parsed_is_a_protocol_error(body: bytes) -> None:
    client = _client(200, body)
    for call in _calls(client):
        with pytest.raises(GatewayProtocolError, match="not JSON"):
            call()
    client.close()


@pytest.mark.parametrize(
    ("status", "error"),
    [(400, GatewayRejected), (403, GatewayAuthError), (503, GatewayThrottled)],
)
@pytest.mark.parametrize("body", UNPARSEABLE)
def test_an_error_answer_that_cannot_be_parsed_keeps_its_status(
    status: int, error: type[GatewayError], body: bytes
) -> None:
    client = _client(status, body)
    with pytest.raises(error) as caught:
        client.get_config()
    assert caught.value.status == status and caught.value.code == "unknown"
    client.close()


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([200, 400, 403, 409, 413, 429, 503]), HOSTILE_BYTES)
def test_fuzz_any_answer_is_a_gateway_error(status: int, body: bytes) -> None:
    client = _client(status, body)
    for call in _calls(client):
        with contextlib.suppress(GatewayError):
            call()
    client.close()
