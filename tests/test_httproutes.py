"""The ``Idempotency-Key`` header over HTTP: any bytes a client sends get the key back (1 to 256
characters) or a 400 ``invalid_idempotency_key``/``missing_idempotency_key`` in the shared
``ErrorResponse`` shape, never a 500."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from baml_studio.gateway.models import ErrorResponse
from baml_studio.httproutes import (
    MAX_IDEMPOTENCY_KEY_CHARS,
    Refusals,
    idempotency_key,
    required_idempotency_key,
)

REFUSALS = Refusals(logging.getLogger(__name__), id_prefix="t")


async def optional(request: Request) -> Response:
    return JSONResponse({"key": idempotency_key(request)})


async def required(request: Request) -> Response:
    return JSONResponse({"key": required_idempotency_key(request, "send an Idempotency-Key")})


APP = Starlette(
    routes=[
        Route("/optional", REFUSALS.guarded("optional", optional), methods=["POST"]),
        Route("/required", REFUSALS.guarded("required", required), methods=["POST"]),
    ]
)


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def post(path: str, key: bytes | None) -> Answer:
    """POST ``path`` straight into the ASGI app, the header bytes exactly as given (a client
    library would re-encode them)."""
    headers = [(b"x-baml-request-id", b"req-1")]
    if key is not None:
        headers.append((b"idempotency-key", key))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(APP(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    names = {k.decode("latin-1"): v.decode("latin-1") for k, v in start["headers"]}
    return Answer(start["status"], names, body)


def assert_refused(answer: Answer, code: str) -> None:
    assert answer.status == 400, answer.body
    assert answer.headers["content-type"] == "application/json"
    error = ErrorResponse.model_validate_json(answer.body).error
    assert error.code == code and error.request_id == "req-1" and error.message
    assert error.retryable is False


@settings(max_examples=300, deadline=None)
@given(
    key=st.binary(max_size=300) | st.binary(min_size=250, max_size=260),
    path=st.sampled_from(["/optional", "/required"]),
)
def test_fuzz_any_header_bytes_give_the_key_or_a_400(key: bytes, path: str) -> None:
    answer = post(path, key)
    text = key.decode("latin-1")
    if 1 <= len(text) <= MAX_IDEMPOTENCY_KEY_CHARS:
        assert answer.status == 200, answer.body
        assert json.loads(answer.body) == {"key": text}
    else:
        assert_refused(answer, "invalid_idempotency_key")


def test_an_absent_key_is_none_or_missing() -> None:
    assert json.loads(post("/optional", None).body) == {"key": None}
    assert_refused(post("/required", None), "missing_idempotency_key")


@pytest.mark.parametrize("key", [b"", b"k" * 257, b"\xff" * 300])
def test_keys_outside_1_to_256_characters_are_400(key: bytes) -> None:
    for path in ("/optional", "/required"):
        assert_refused(post(path, key), "invalid_idempotency_key")
