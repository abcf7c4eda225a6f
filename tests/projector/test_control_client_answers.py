"""The workload API client fed answers it cannot parse (nesting past the recursion limit, a
5000-digit integer, hostile bytes) over ``httpx.MockTransport``: a typed ``ProjectorError``
comes out (transient for a 2xx, the status's error otherwise), never a ``RecursionError``."""

from __future__ import annotations

import contextlib
import json
from datetime import datetime

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.gateway.config import Scope
from baml_studio.projector.control_client import ControlClient, _batch_ack
from baml_studio.projector.errors import (
    ControlPlaneRefused,
    ControlPlaneUnavailable,
    ProjectorError,
)
from json_strategies import HOSTILE_BYTES, JSON_VALUES, UNPARSEABLE, shaped

SCOPE = Scope("t", "p", "e")


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


SNAPSHOT_ANSWER = shaped(
    {
        "snapshot_id": st.sampled_from(["snap_1", ""]),
        "scope": st.just({"tenant_id": "t", "project_id": "p", "environment_id": "e"}),
        "catalog_version": st.sampled_from(["v1", ""]),
        "generation": st.sampled_from(["gen_1", "gen_999999999999999999", ""]),
        "expires_at": st.sampled_from(
            ["2026-12-07T10:00:00Z", "2026-12-07T10:00:00+01:00", "2026-12-07T10:00:00", "soon"]
        ),
    }
)


@settings(max_examples=300, deadline=None)
@given(HOSTILE_BYTES | (SNAPSHOT_ANSWER | JSON_VALUES).map(lambda v: json.dumps(v).encode()))
def test_fuzz_snapshot_answers_are_complete_snapshots_or_unavailable(content: bytes) -> None:
    """What the coordinator, the erasure steps and the projector read of a QuerySnapshot is
    there and typed, else the answer is ControlPlaneUnavailable (an answer without
    snapshot_id used to reach the coordinator and end a query in a 500 with KeyError)."""
    with _client(200, content) as client:
        try:
            data = client.snapshot(SCOPE)
        except ControlPlaneUnavailable as exc:
            assert "snapshot: the control plane answered" in str(exc)
            return
    for name in ("snapshot_id", "generation", "catalog_version"):
        assert isinstance(data[name], str) and data[name], data
    assert datetime.fromisoformat(data["expires_at"].replace("Z", "+00:00")).tzinfo is not None


@pytest.mark.parametrize(
    ("missing", "says"),
    [("snapshot_id", "without snapshot_id"), ("expires_at", "expires_at None is not")],
)
def test_a_snapshot_without_a_field_its_readers_need_is_unavailable(
    missing: str, says: str
) -> None:
    answer = {
        "snapshot_id": "snap_1",
        "scope": {"tenant_id": "t", "project_id": "p", "environment_id": "e"},
        "catalog_version": "v1",
        "generation": "gen_1",
        "expires_at": "2026-12-07T10:00:00Z",
    }
    with _client(200, json.dumps(answer).encode()) as client:
        assert client.snapshot(SCOPE)["snapshot_id"] == "snap_1"
    del answer[missing]
    with (
        _client(200, json.dumps(answer).encode()) as client,
        pytest.raises(ControlPlaneUnavailable, match=says) as caught,
    ):
        client.snapshot(SCOPE)
    assert caught.value.transient
