"""``read_body``: the body within a limit, whatever the declared ``Content-Length`` says."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from starlette.requests import Request

from baml_studio.apierrors import PayloadTooLarge
from baml_studio.httpbody import read_body

LIMIT = 10


def read(declared: bytes, body: bytes) -> bytes:
    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": body, "more_body": False}

    headers = [(b"content-length", declared)]
    scope = {"type": "http", "method": "PUT", "path": "/", "headers": headers, "query_string": b""}
    return asyncio.run(read_body(Request(scope, receive), LIMIT))


def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    with pytest.raises(PayloadTooLarge, match="has 11 bytes"):
        read(b"11", b"")


@settings(max_examples=200, deadline=None)
@given(declared=st.binary(max_size=30), body=st.binary(max_size=2 * LIMIT))
@example(declared="²".encode("latin-1"), body=b"abc")
@example(declared=b"9" * 5000, body=b"abc")
@example(declared=b"\xd9\xa3", body=b"abc")  # "٣" in UTF-8
def test_any_declared_length_gives_the_body_or_payload_too_large(
    declared: bytes, body: bytes
) -> None:
    try:
        got = read(declared, body)
    except PayloadTooLarge:
        assert len(body) > LIMIT or (declared.isdigit() and int(declared) > LIMIT)
        return
    assert got == body and len(body) <= LIMIT
