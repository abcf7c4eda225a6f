"""Hostile request bodies for ``POST /v1/query`` and ``POST /v1/query-jobs``: only a 400 in the
``ErrorResponse`` shape comes back, never a 500."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from hypothesis import given, settings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.testclient import TestClient
from test_jobs_fakes import FakeStart, check_schema, job_rig, user

from baml_studio.apierrors import BadRequest
from baml_studio.control.identity import UserIdentity
from baml_studio.coordinator.app import _json, query_routes
from baml_studio.coordinator.app_jobs import job_routes, parse_job_request
from baml_studio.coordinator.run import QueryRequest
from json_strategies import EXAMPLES, HOSTILE_BYTES, JSON_VALUES, UNPARSEABLE, shaped

JOB_FIELDS = {
    "sql": JSON_VALUES,
    "parameters": JSON_VALUES,
    "catalog_version": JSON_VALUES,
    "budget": shaped({"max_wall_ms": JSON_VALUES, "max_result_rows": JSON_VALUES}),
    "mode": JSON_VALUES,
    "environment_id": JSON_VALUES,
}


@pytest.mark.parametrize("body", UNPARSEABLE)
def test_reported_bodies_are_bad_requests(body: bytes) -> None:
    for decode in (_json, parse_job_request):
        with pytest.raises(BadRequest, match="not JSON"):
            decode(body)


@settings(max_examples=200, deadline=None)
@given(HOSTILE_BYTES)
def test_fuzz_json_body_only_bad_request(body: bytes) -> None:
    with contextlib.suppress(BadRequest):
        _json(body)


@settings(max_examples=200, deadline=None)
@given(HOSTILE_BYTES | shaped(JOB_FIELDS).map(lambda raw: json.dumps(raw).encode()))
def test_fuzz_job_request_only_bad_request(body: bytes) -> None:
    try:
        request = parse_job_request(body)
    except BadRequest:
        return
    assert isinstance(request, QueryRequest)


def _authenticate_headers(headers: Mapping[str, str]) -> UserIdentity:
    return user()


def _authenticate_request(request: Request) -> UserIdentity:
    return user()


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with job_rig(tmp_path) as rig:
        routes = [
            *query_routes(FakeStart(), _authenticate_headers),
            *job_routes(rig.manager, _authenticate_request),
        ]
        with TestClient(Starlette(routes=routes), raise_server_exceptions=False) as served:
            yield served


@pytest.mark.parametrize("path", ["/v1/query", "/v1/query-jobs"])
@pytest.mark.parametrize(
    "body", [*UNPARSEABLE, *(text.encode("utf-8", "surrogatepass") for text in EXAMPLES)]
)
def test_hostile_bodies_answer_400_in_the_error_shape(
    client: TestClient, path: str, body: bytes
) -> None:
    response = client.post(path, content=body, headers={"X-Baml-Request-Id": "req-1"})
    assert response.status_code == 400, response.text
    check_schema("ErrorResponse", response.json())
    error = response.json()["error"]
    assert error["request_id"] == "req-1" and error["message"]
