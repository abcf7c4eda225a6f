"""Hostile ``POST /v1/uploads/authorize`` bodies: the gateway answers 4xx in the
``ErrorResponse`` shape (400 ``invalid_json`` for text that is not JSON), never a 500."""

from __future__ import annotations

import json
from typing import Any

import pytest
from gateway_rig import EUID, FLUSH_ID, SCOPE, five_kinds, request_body
from hypothesis import given, settings
from hypothesis import strategies as st
from test_gateway_errors import _app, _headers, _Store, asgi_call, assert_error

from baml_studio.gateway.authorize import Gateway
from baml_studio.gateway.config import GatewayConfig
from baml_studio.gateway.environments import StaticEnvironments
from baml_studio.gateway.errors import BadRequest, GatewayError
from baml_studio.gateway.models import AuthorizeUploadRequest
from baml_studio.gateway.tokens import KeyRing, PublisherTokenVerifier
from json_strategies import EXAMPLES, HOSTILE_BYTES, JSON_VALUES, UNPARSEABLE, shaped

KINDS = [entry for entry, _ in five_kinds()]
OBJECT = st.sampled_from(KINDS) | shaped(
    {
        "kind": st.sampled_from(["table", "value", "value_pack", "data_segment", "meta_segment"]),
        "size_bytes": st.integers(),
        "checksum_sha256": st.sampled_from([KINDS[0]["checksum_sha256"], "AB" * 32]),
        "sequence": st.integers(),
        "cid": st.sampled_from([KINDS[0]["cid"], KINDS[1]["cid"]]),
        "codec": st.integers(0, 3),
        "entry_count": st.integers(),
    }
)
BODY = shaped(
    {
        "process_euid": st.just(EUID),
        "flush_id": st.just(FLUSH_ID),
        "objects": st.lists(OBJECT, max_size=4) | st.just([KINDS[0]] * 101),
        "tenant": st.just(SCOPE.tenant),
        "environment_id": st.just(SCOPE.environment),
    }
)


def _gateway() -> Gateway:
    ring = KeyRing.generate()
    return Gateway(
        _Store(),  # type: ignore[arg-type]  # _parse never reaches the store
        PublisherTokenVerifier(lambda: ring),
        StaticEnvironments([SCOPE]),
        GatewayConfig(),
    )


GATEWAY = _gateway()


@pytest.mark.parametrize("body", UNPARSEABLE)
def test_reported_bodies_are_invalid_json(body: bytes) -> None:
    with pytest.raises(BadRequest, match="not JSON") as caught:
        GATEWAY._parse(body, SCOPE)
    assert caught.value.code == "invalid_json"


@settings(max_examples=200, deadline=None)
@given(HOSTILE_BYTES | BODY.map(lambda body: json.dumps(body).encode()))
def test_fuzz_parse_only_4xx(body: bytes) -> None:
    try:
        request = GATEWAY._parse(body, SCOPE)
    except GatewayError as exc:
        assert 400 <= exc.status < 500, exc
        return
    assert isinstance(request, AuthorizeUploadRequest)


@settings(max_examples=30, deadline=None)
@given(JSON_VALUES | st.just([[[[]]]]), st.sampled_from(["tenant", "project_id", "environment"]))
def test_fuzz_scope_fields_only_4xx(value: Any, field: str) -> None:
    body = json.dumps(request_body([KINDS[0]], **{field: value})).encode()
    try:
        GATEWAY._parse(body, SCOPE)
    except GatewayError as exc:
        assert 400 <= exc.status < 500, exc


@pytest.mark.parametrize(
    "body", [*UNPARSEABLE, *(text.encode("utf-8", "surrogatepass") for text in EXAMPLES)]
)
def test_hostile_bodies_answer_400_in_the_error_shape(body: bytes) -> None:
    app, token = _app(_Store())
    response = asgi_call(
        app, "POST", "/v1/uploads/authorize", content=body, headers=_headers(token)
    )
    assert_error(response, 400)
