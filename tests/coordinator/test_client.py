"""CoordinatorClient against a stub coordinator on 127.0.0.1: streams, synthesized outcomes,
typed errors, the request headers and the job calls."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from coordinator_stub import ROWS, TOKEN, StubCoordinator, outcome
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.coordinator.client import (
    STREAM_INCOMPLETE,
    CoordinatorClient,
    CoordinatorError,
    CoordinatorProtocolError,
    CoordinatorUnavailable,
    RemoteResult,
)
from baml_studio.coordinator.run import QueryRequest, RequestBudget, outcome_line, row_line
from json_strategies import HOSTILE_BYTES, UNPARSEABLE
from projector.projector_control_rig import closed_port_url

UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
BUDGET = RequestBudget(5000, 100, 1 << 20, 1 << 24)


def request(sql: str, **kw: Any) -> QueryRequest:
    return QueryRequest(sql, (), "v1", BUDGET, **kw)


@pytest.fixture
def client(stub_served: tuple[StubCoordinator, str]) -> Iterator[CoordinatorClient]:
    with CoordinatorClient(stub_served[1], TOKEN, timeout_s=5) as made:
        yield made


def run(client: CoordinatorClient, sql: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    with client.query(request(sql)) as result:
        return list(result), result.outcome()


def test_rows_then_the_servers_outcome(client: CoordinatorClient, stub: StubCoordinator) -> None:
    result = client.query(request("SELECT rows"))
    assert result.columns == ["call_id", "fqn", "args", "output"]
    rows = list(result)
    assert rows == ROWS  # U+2028 inside a string does not split the line
    assert result.outcome() == outcome()
    assert result.rows_streamed == 3
    (seen,) = stub.seen
    assert seen.headers["authorization"] == f"Bearer {TOKEN}"
    assert UUID7.match(seen.headers["x-baml-request-id"])
    assert seen.body == request("SELECT rows").to_json()


def test_every_request_gets_a_fresh_request_id(
    client: CoordinatorClient, stub: StubCoordinator
) -> None:
    for _ in range(3):
        run(client, "SELECT rows")
    ids = [s.headers["x-baml-request-id"] for s in stub.seen]
    assert len(set(ids)) == 3 and all(UUID7.match(i) for i in ids)


def test_an_empty_result_has_no_columns(client: CoordinatorClient) -> None:
    result = client.query(request("SELECT empty"))
    assert result.columns == []
    assert list(result) == []
    assert result.outcome()["resultState"] == "complete"


@pytest.mark.parametrize(
    ("sql", "rows", "says"),
    [
        ("SELECT cut", 2, "without an outcome"),
        ("SELECT garbage", 1, "is not JSON"),
        ("SELECT scalar", 1, "is not a JSON object"),
        ("SELECT extra", 1, "followed the queryOutcome"),
        ("SELECT drop", 1, "connection failed"),
    ],
)
def test_a_broken_stream_is_incomplete_not_an_exception(
    client: CoordinatorClient, sql: str, rows: int, says: str
) -> None:
    got, final = run(client, sql)
    assert got == ROWS[:rows]
    assert final["resultState"] == "incomplete" and final["queryCompleted"] is False
    assert final["rowsStreamed"] == rows
    assert final["error"]["code"] == STREAM_INCOMPLETE and final["error"]["retryable"] is True
    assert says in final["error"]["message"]
    assert final["snapshot"]["catalogVersion"] == "v1"


def test_a_read_timeout_mid_stream_is_incomplete(
    stub_served: tuple[StubCoordinator, str],
) -> None:
    stub, url = stub_served
    stub.release.clear()
    fast = QueryRequest("SELECT hang", (), "v1", RequestBudget(1, 10, 1000, 0))
    try:
        with CoordinatorClient(url, TOKEN, timeout_s=0.3) as client:
            result = client.query(fast)
            assert list(result) == ROWS[:1]
            final = result.outcome()
    finally:
        stub.release.set()
    assert final["error"]["code"] == STREAM_INCOMPLETE
    assert "ReadTimeout" in final["error"]["message"]


def test_stopping_early_closes_the_stream_as_cancelled(client: CoordinatorClient) -> None:
    result = client.query(request("SELECT rows"))
    assert next(iter(result)) == ROWS[0]
    final = result.outcome()
    assert final["resultState"] == "cancelled" and final["rowsStreamed"] == 1
    assert final["error"]["code"] == "cancelled"


def test_the_servers_budget_outcome_is_passed_through(client: CoordinatorClient) -> None:
    rows, final = run(client, "SELECT budget")
    assert rows == ROWS[:2]
    assert final["resultState"] == "budget_exhausted"
    assert final["error"]["code"] == "E_QUERY_BUDGET_EXCEEDED"


def test_an_error_answer_is_typed(client: CoordinatorClient, stub: StubCoordinator) -> None:
    with pytest.raises(CoordinatorError) as info:
        client.query(request("SELECT nope"))
    error = info.value
    assert (error.status, error.code, error.retryable) == (400, "invalid_sql", False)
    assert error.message == "unknown column 'nope'"
    assert error.request_id == stub.seen[-1].headers["x-baml-request-id"]
    with pytest.raises(CoordinatorError) as info:
        client.query(request("SELECT unavailable"))
    assert (info.value.status, info.value.code, info.value.retryable) == (
        503,
        "dependency_unavailable",
        True,
    )


def test_a_body_that_is_not_an_error_response_still_gives_a_typed_error(
    client: CoordinatorClient,
) -> None:
    with pytest.raises(CoordinatorError) as info:
        client.query(request("SELECT html"))
    assert (info.value.status, info.value.code) == (502, "http_502")
    assert info.value.message == "Bad Gateway"


def test_a_wrong_token_is_401(stub_served: tuple[StubCoordinator, str]) -> None:
    wrong = CoordinatorClient(stub_served[1], "wrong")
    with wrong as client, pytest.raises(CoordinatorError) as info:
        client.get_job("job_1")
    assert (info.value.status, info.value.code) == (401, "unauthenticated")


def test_no_coordinator_is_unavailable() -> None:
    with CoordinatorClient(closed_port_url(), TOKEN) as client:
        with pytest.raises(CoordinatorUnavailable):
            client.query(request("SELECT rows"))
        with pytest.raises(CoordinatorUnavailable):
            client.get_job("job_1")


def test_bad_arguments_are_refused_before_any_request() -> None:
    with pytest.raises(ValueError, match="http"):
        CoordinatorClient("ftp://example.com", TOKEN)
    with pytest.raises(ValueError, match="token"):
        CoordinatorClient("http://127.0.0.1:1", "")
    with (
        CoordinatorClient("http://127.0.0.1:1", TOKEN) as client,
        pytest.raises(ValueError, match="create_job"),
    ):
        client.query(request("SELECT 1", mode="background"))


def test_a_job_from_start_to_result(client: CoordinatorClient, stub: StubCoordinator) -> None:
    job = client.create_job(request("SELECT job_ok"), idempotency_key="key-1")
    assert job["state"] == "queued"
    create = stub.seen[-1]
    assert create.headers["idempotency-key"] == "key-1"
    assert create.body["mode"] == "background"
    again = client.create_job(request("SELECT job_ok"), idempotency_key="key-1")
    assert again["job_id"] == job["job_id"]
    with pytest.raises(CoordinatorError) as info:
        client.job_result(job["job_id"])
    assert (info.value.status, info.value.code) == (409, "conflict")
    states = [client.get_job(job["job_id"])["state"] for _ in range(3)]
    assert states == ["running", "running", "succeeded"]
    with client.job_result(job["job_id"]) as result:
        assert list(result) == ROWS
        assert result.outcome() == outcome()
    # the redirect left the coordinator's origin: the token stays behind
    (blob,) = stub.blob_seen
    assert "authorization" not in blob.headers


def test_a_fresh_idempotency_key_per_call_by_default(
    client: CoordinatorClient, stub: StubCoordinator
) -> None:
    first = client.create_job(request("SELECT job_ok"))
    second = client.create_job(request("SELECT job_ok"))
    assert first["job_id"] != second["job_id"]
    keys = {s.headers["idempotency-key"] for s in stub.seen}
    assert len(keys) == 2


def test_cancel_is_idempotent_and_unknown_jobs_are_404(client: CoordinatorClient) -> None:
    job = client.create_job(request("SELECT job_forever"))
    assert client.cancel_job(job["job_id"])["state"] == "cancelled"
    assert client.cancel_job(job["job_id"])["state"] == "cancelled"
    with pytest.raises(CoordinatorError) as info:
        client.get_job("job_nope")
    assert (info.value.status, info.value.code) == (404, "not_found")


def test_a_job_answer_that_is_not_a_job_is_a_protocol_error() -> None:
    transport = httpx.MockTransport(lambda _: httpx.Response(200, json={"state": "running"}))
    with (
        httpx.Client(transport=transport) as http,
        CoordinatorClient("http://coordinator", TOKEN, client=http) as client,
        pytest.raises(CoordinatorProtocolError),
    ):
        client.get_job("job_1")


def _result_of(chunks: list[bytes]) -> RemoteResult:
    response = httpx.Response(200, content=iter(chunks))
    return RemoteResult(response, "v1")


STREAM = "".join(line + "\n" for line in [*map(row_line, ROWS), outcome_line(outcome())])


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM.encode())), max_size=12))
def test_chunk_boundaries_do_not_change_the_rows(cuts: list[int]) -> None:
    raw = STREAM.encode()
    edges = [0, *sorted(cuts), len(raw)]
    result = _result_of([raw[a:b] for a, b in itertools.pairwise(edges)])
    assert list(result) == ROWS
    assert result.outcome() == outcome()


@given(st.binary(max_size=300), st.booleans())
def test_any_bytes_end_in_an_outcome_never_an_exception(raw: bytes, with_end: bool) -> None:
    tail = (outcome_line(outcome()) + "\n").encode() if with_end else b""
    result = _result_of([raw, tail])
    rows = list(result)
    final = result.outcome()
    assert final["resultState"] in ("complete", "incomplete")
    assert final["rowsStreamed"] == len(rows) or final["resultState"] == "complete"
    assert all(isinstance(row, dict) for row in rows)


@pytest.mark.parametrize("line", UNPARSEABLE)
def test_a_line_that_cannot_be_parsed_ends_the_stream_incomplete(line: bytes) -> None:
    result = _result_of([b"{}\n", line + b"\n"])
    assert list(result) == [{}]
    final = result.outcome()
    assert final["resultState"] == "incomplete" and final["rowsStreamed"] == 1
    assert "line 2 is not JSON" in final["error"]["message"]


@settings(max_examples=100, deadline=None)
@given(st.lists(HOSTILE_BYTES, min_size=1, max_size=3))
def test_fuzz_hostile_lines_end_in_an_outcome_never_an_exception(lines: list[bytes]) -> None:
    result = _result_of([line + b"\n" for line in lines])
    rows = list(result)
    assert result.outcome()["resultState"] in ("complete", "incomplete")
    assert all(isinstance(row, dict) for row in rows)


@pytest.mark.parametrize("status", [200, 400, 503])
@pytest.mark.parametrize("body", UNPARSEABLE)
def test_an_answer_that_cannot_be_parsed_is_a_typed_error(status: int, body: bytes) -> None:
    transport = httpx.MockTransport(lambda _: httpx.Response(status, content=body))
    with (
        httpx.Client(transport=transport) as http,
        CoordinatorClient("http://coordinator", TOKEN, client=http) as client,
        pytest.raises(CoordinatorProtocolError if status == 200 else CoordinatorError) as caught,
    ):
        client.get_job("job_1")
    if status != 200:
        assert caught.value.code == f"http_{status}"
