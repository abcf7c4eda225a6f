"""The workload API client fed answers it cannot parse (nesting past the recursion limit, a
5000-digit integer, hostile bytes) over ``httpx.MockTransport``: a typed ``ProjectorError``
comes out (transient for a 2xx, the status's error otherwise), never a ``RecursionError``."""

from __future__ import annotations

import contextlib
import json

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.projector.control_client import ControlClient, _batch_ack
from baml_studio.projector.errors import (
    ControlPlaneRefused,
    ControlPlaneUnavailable,
    ProjectorError,
)
from json_strategies import HOSTILE_BYTES, JSON_VALUES, UNPARSEABLE, shaped


def _client(status: int, body: bytes) -> ControlClient:
    transport = httpx.MockTransport(lambda _: httpx.Response(status, content=body))
    return ControlClient(
        "http://control",
        "token",
        client=httpx.Client(transport=transport),
        retries=0,
        sleep=lambda _: None,
    )


@pytest.mark.parametrize("body", UNPARSEABLE)
def test_a_2xx_that_cannot_be_parsed_is_unavailable(body: bytes) -> None:
    with _client(200, body) as client, pytest.raises(ControlPlaneUnavailable) as caught:
        client.projection_schemas()
    assert "without a JSON object" in str(caught.value)


@pytest.mark.parametrize(("status", "error"), [(400, ControlPlaneRefused), (503, ProjectorError)])
@pytest.mark.parametrize("body", UNPARSEABLE)
def test_an_error_answer_that_cannot_be_parsed_keeps_its_status(
    status: int, error: type[ProjectorError], body: bytes
) -> None:
    with _client(status, body) as client, pytest.raises(error) as caught:
        client.projection_schemas()
    assert f"http_{status}" in str(caught.value)


BATCH_ANSWER = shaped(
    {
        "batch_id": st.just("b1"),
        "root_id": st.just("r1"),
        "generation": st.just("gen_1"),
        "row_count": st.integers(-1, 3),
        "content_digest": st.just("sha256:" + "0" * 64),
        "state": st.sampled_from(["visible", "pending"]),
    }
)


@settings(max_examples=200, deadline=None)
@given(HOSTILE_BYTES | (BATCH_ANSWER | JSON_VALUES).map(lambda v: json.dumps(v).encode()))
def test_fuzz_batch_answers_are_acks_or_unavailable(content: bytes) -> None:
    with contextlib.suppress(ControlPlaneUnavailable):
        assert _batch_ack(200, content).status == 200


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([200, 400, 404, 409, 429, 503]), HOSTILE_BYTES)
def test_fuzz_any_answer_is_a_projector_error(status: int, body: bytes) -> None:
    with _client(status, body) as client, contextlib.suppress(ProjectorError):
        client.projection_schemas()
