"""The four query-job routes through Starlette's TestClient: statuses, headers and the
ErrorResponse shape of every refusal."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.testclient import TestClient
from test_jobs_fakes import FakeRun, Rig, check_schema, job_rig, user, wait_for

from baml_studio.apierrors import BadRequest, DependencyUnavailable, Unauthenticated
from baml_studio.control.identity import UserIdentity
from baml_studio.coordinator.app_jobs import job_routes

TOKENS = {
    "alice": user(),
    "both": user(environments=("prod", "dev")),
    "mallory": user(tenant="t2"),
}
BODY = {
    "sql": "SELECT call_id FROM calls_v1 LIMIT 10",
    "parameters": [],
    "catalog_version": "2026-09-01",
    "budget": {
        "max_wall_ms": 5000,
        "max_result_rows": 1000,
        "max_result_bytes": 8388608,
        "max_private_bytes_read": 268435456,
    },
}


def authenticate(request: Request) -> UserIdentity:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme != "Bearer" or token not in TOKENS:
        raise Unauthenticated("a valid user token is required", code="invalid_token")
    return TOKENS[token]


def headers(token: str = "alice", **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "X-Baml-Request-Id": "req-1", **extra}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Rig, TestClient]]:
    with job_rig(tmp_path) as rig:
        app = Starlette(routes=job_routes(rig.manager, authenticate))
        with TestClient(app) as client:
            yield rig, client


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    check_schema("ErrorResponse", body)
    error = body["error"]
    assert set(error) == {"code", "message", "request_id", "retryable", "details"}
    assert error["code"] == code and error["request_id"] == "req-1" and error["message"]
    return dict(error)


def create(client: TestClient, body: dict[str, Any] | None = None, **extra: str) -> Any:
    return client.post(
        "/v1/query-jobs", json=BODY if body is None else body, headers=headers(**extra)
    )


def test_post_is_202_and_the_job_runs_to_a_streamed_result(
    served: tuple[Rig, TestClient],
) -> None:
    rig, client = served
    run = FakeRun(rows=4)
    rig.start.queued.append(run)
    response = create(client)
    assert response.status_code == 202
    job = response.json()
    check_schema("QueryJob", job)
    assert job["state"] == "queued"
    assert response.headers["location"] == f"http://testserver/v1/query-jobs/{job['job_id']}"
    assert response.headers["cache-control"] == "no-store"
    url = f"/v1/query-jobs/{job['job_id']}"
    done = wait_for(
        lambda: (j := client.get(url, headers=headers()).json())["state"] == "succeeded" and j
    )
    check_schema("QueryJob", done)
    assert done["result_url"] == f"http://testserver{url}/result"
    result = client.get(done["result_url"], headers=headers())
    assert result.status_code == 200
    assert result.headers["content-type"] == "application/x-ndjson"
    assert result.content == run.result_bytes()
    lines = result.text.splitlines()
    assert len(lines) == 5 and lines[-1].startswith('{"queryOutcome":')


def test_base_url_makes_result_url_public(tmp_path: Path) -> None:
    with job_rig(tmp_path) as rig:
        routes = job_routes(rig.manager, authenticate, base_url=lambda _r: "https://dp.example")
        with TestClient(Starlette(routes=routes)) as client:
            job = create(client).json()
            url = f"/v1/query-jobs/{job['job_id']}"
            done = wait_for(
                lambda: (
                    (j := client.get(url, headers=headers()).json())["state"] == "succeeded" and j
                )
            )
            assert done["result_url"] == f"https://dp.example{url}/result"


def test_idempotency_key_over_http(served: tuple[Rig, TestClient]) -> None:
    rig, client = served
    first = create(client, **{"Idempotency-Key": "k-1"})
    again = create(client, **{"Idempotency-Key": "k-1"})
    assert first.status_code == again.status_code == 202
    assert first.json()["job_id"] == again.json()["job_id"] and len(rig.start.calls) == 1
    other = create(client, dict(BODY, sql="SELECT 2"), **{"Idempotency-Key": "k-1"})
    error = assert_error(other, 409, "idempotency_key_reused")
    assert error["details"] == {"job_id": first.json()["job_id"]}


def test_delete_cancels_and_result_is_409_until_success(
    served: tuple[Rig, TestClient],
) -> None:
    rig, client = served
    run = FakeRun(hold_at=1)
    rig.start.queued.append(run)
    job = create(client).json()
    run.holding.wait(10)
    url = f"/v1/query-jobs/{job['job_id']}"
    assert_error(client.get(f"{url}/result", headers=headers()), 409, "job_not_succeeded")
    cancelled = client.delete(url, headers=headers())
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    check_schema("QueryJob", cancelled.json())
    again = client.delete(url, headers=headers())
    assert again.status_code == 200 and again.json() == cancelled.json()
    assert_error(client.get(f"{url}/result", headers=headers()), 409, "job_not_succeeded")


@pytest.mark.parametrize(("method", "suffix"), [("GET", ""), ("DELETE", ""), ("GET", "/result")])
def test_another_tenant_and_unknown_ids_are_404(
    served: tuple[Rig, TestClient], method: str, suffix: str
) -> None:
    _, client = served
    job = create(client).json()
    for token, job_id in (("mallory", job["job_id"]), ("alice", "job_unknown")):
        response = client.request(
            method, f"/v1/query-jobs/{job_id}{suffix}", headers=headers(token)
        )
        assert_error(response, 404, "job_not_found")


def test_post_refusals(served: tuple[Rig, TestClient]) -> None:
    rig, client = served
    assert_error(create(client, dict(BODY, mode="interactive")), 400, "invalid_mode")
    assert_error(create(client, dict(BODY, sql="")), 400, "invalid_request")
    assert_error(
        create(client, {k: v for k, v in BODY.items() if k != "budget"}), 400, "invalid_request"
    )
    raw = client.post("/v1/query-jobs", content=b"{not json", headers=headers())
    assert_error(raw, 400, "invalid_request")
    assert_error(create(client, token="both"), 400, "environment_required")
    assert_error(create(client, dict(BODY, environment_id="dev")), 403, "scope_mismatch")
    long_key = create(client, **{"Idempotency-Key": "k" * 257})
    assert_error(long_key, 400, "invalid_idempotency_key")
    assert rig.start.calls == []
    assert (
        create(client, dict(BODY, mode="background"), **{"Idempotency-Key": "k" * 256}).status_code
        == 202
    )
    both = create(client, dict(BODY, environment_id="dev"), token="both")
    assert both.status_code == 202 and rig.start.calls[-1][0].environment_id == "dev"


def test_unauthenticated_is_401_with_www_authenticate(served: tuple[Rig, TestClient]) -> None:
    _, client = served
    for response in (
        create(client, token="nobody"),
        client.get("/v1/query-jobs/job_x", headers={"X-Baml-Request-Id": "req-1"}),
    ):
        assert_error(response, 401, "invalid_token")
        assert response.headers["www-authenticate"].startswith("Bearer")


def test_planning_refusals_come_back_from_post(served: tuple[Rig, TestClient]) -> None:
    rig, client = served
    rig.start.refuse = BadRequest("no such table calls_v9", code="invalid_sql")
    assert_error(create(client), 400, "invalid_sql")
    rig.start.refuse = DependencyUnavailable("control plane down")
    busy = assert_error(create(client), 503, "dependency_unavailable")
    assert busy["retryable"] is True
    assert create(client).headers["retry-after"] == "1"


def test_a_missing_request_id_is_generated(served: tuple[Rig, TestClient]) -> None:
    _, client = served
    response = client.get("/v1/query-jobs/job_x", headers={"Authorization": "Bearer alice"})
    assert response.status_code == 404
    assert response.json()["error"]["request_id"].startswith("cq_")
