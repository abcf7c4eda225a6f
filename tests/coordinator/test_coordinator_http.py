"""``POST /v1/query`` over HTTP: budgets, cancellation, a killed connection, a query too costly
for interactive use, refusals in the ``ErrorResponse`` shape, CORS, and a background job whose
result equals the interactive answer."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from coordinator_rig import BUDGET, CoordinatorRig, Served, coordinator_over, serve_coordinator
from projector_fixtures import SCOPE, workload_store

from baml_studio.control.identity import TokenIssuer
from baml_studio.coordinator.config import CoordinatorConfig

__all__ = ["workload_store"]
STUDIO = "https://studio.example.com"
MANY_ROWS = "SELECT a.call_id, a.args FROM calls a CROSS JOIN calls b"
HUGE = 10**400
"""A JSON integer past the float64 range."""
DEEP = "SELECT " + "(" * 5000 + "%s" + ")" * 5000
"""SQL nested too deeply for the parser."""


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, chdb_dsn: str, workload_store: Path
) -> Iterator[tuple[CoordinatorRig, Served]]:
    tmp = tmp_path_factory.mktemp("http")
    config = CoordinatorConfig(max_interactive_candidates=5_000, cache_dir=tmp / "cache")
    database = f"t_{uuid.uuid4().hex[:16]}"
    with (
        coordinator_over(tmp, chdb_dsn, database, workload_store, config=config) as rig,
        serve_coordinator(rig, tmp, origins=(STUDIO,)) as http,
    ):
        yield rig, http


def _body(sql: str, **budget: int) -> dict[str, Any]:
    return {
        "sql": sql,
        "parameters": [],
        "catalog_version": "v1",
        "budget": {**BUDGET.to_json(), **budget},
    }


def _post(http: Served, body: Any, token: str | None = None, **headers: str) -> httpx.Response:
    auth = {"Authorization": f"Bearer {token or http.token}"} if token != "" else {}
    return httpx.post(f"{http.url}/v1/query", json=body, headers={**auth, **headers}, timeout=60)


def _lines(response: httpx.Response) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    lines = [json.loads(line) for line in response.text.splitlines()]
    return lines[:-1], lines[-1]["queryOutcome"]


def test_rows_budget(served: tuple[CoordinatorRig, Served]) -> None:
    _, http = served
    for sql in ("SELECT call_id FROM calls ORDER BY call_id", "SELECT call_id, args FROM calls"):
        rows, outcome = _lines(_post(http, _body(sql, max_result_rows=3)))
        assert len(rows) == 3
        assert outcome["resultState"] == "budget_exhausted" and not outcome["queryCompleted"]
        assert outcome["rowsStreamed"] == 3
        assert outcome["error"]["code"] == "E_QUERY_BUDGET_EXCEEDED"


@pytest.mark.parametrize(
    ("sql", "limit"),
    [("SELECT call_id FROM calls ORDER BY call_id", 300),
     ("SELECT call_id, args FROM calls", 3000)],
)  # fmt: skip  # the public path, and the engine's (which counted the refused row as streamed)
def test_bytes_budget(served: tuple[CoordinatorRig, Served], sql: str, limit: int) -> None:
    _, http = served
    response = _post(http, _body(sql, max_result_bytes=limit))
    rows, outcome = _lines(response)
    assert outcome["resultState"] == "budget_exhausted"
    sent = sum(len(json.dumps(r, separators=(",", ":"))) + 1 for r in rows)
    assert 0 < sent <= limit and outcome["rowsStreamed"] == len(rows)
    assert outcome["privateState"]["indexed"] + outcome["privateState"]["pending"] == len(rows)


def test_private_bytes_budget(served: tuple[CoordinatorRig, Served]) -> None:
    _, http = served
    rows, outcome = _lines(_post(http, _body("SELECT call_id, args FROM calls",
                                             max_private_bytes_read=10)))  # fmt: skip
    assert outcome["resultState"] == "budget_exhausted" and rows == []
    assert "private bytes" in outcome["error"]["message"]
    rows, outcome = _lines(_post(http, _body("SELECT count(*) AS n FROM calls",
                                             max_private_bytes_read=0)))  # fmt: skip
    assert outcome["resultState"] == "complete" and rows[0]["n"] > 0  # public: reads no Lance


def test_wall_budget(served: tuple[CoordinatorRig, Served]) -> None:
    _, http = served
    _, outcome = _lines(_post(http, _body(MANY_ROWS, max_wall_ms=300, max_result_rows=10**7)))
    assert outcome["resultState"] == "budget_exhausted"
    assert "wall" in outcome["error"]["message"]
    # the remedy names the request's field, not the CLI's option
    assert "budget.max_wall_ms" in outcome["error"]["remedy"], outcome["error"]
    assert "--" not in outcome["error"]["remedy"]


def test_remedies_over_http_name_no_cli_option(served: tuple[CoordinatorRig, Served]) -> None:
    _, http = served
    for sql in ("SELECT call_id, args FROM calls", "SELECT * FROM processes"):
        _, outcome = _lines(_post(http, _body(sql, max_result_rows=2)))
        remedy = outcome["error"]["remedy"]
        assert "budget.max_result_rows" in remedy or "local CLI" in remedy, outcome["error"]


def test_too_costly_for_interactive_points_to_jobs(served: tuple[CoordinatorRig, Served]) -> None:
    rig, http = served
    config = rig.coordinator.config
    rig.coordinator.config = CoordinatorConfig(max_interactive_candidates=10)
    try:
        rows, outcome = _lines(_post(http, _body("SELECT call_id, args FROM calls")))
    finally:
        rig.coordinator.config = config
    assert rows == [] and outcome["resultState"] == "failed"
    assert outcome["error"]["code"] == "query_too_costly"
    assert "POST /v1/query-jobs" in outcome["error"]["remedy"]


def test_cancelling_a_run_ends_it_cancelled(served: tuple[CoordinatorRig, Served]) -> None:
    from coordinator_rig import identity, request

    rig, _ = served
    run = rig.coordinator.start(request(MANY_ROWS), identity())
    lines = run.lines()
    first = [next(lines) for _ in range(5)]
    run.cancel()
    rest = list(lines)
    outcome = json.loads(rest[-1])["queryOutcome"]
    assert len(rest) == 1 and len(first) == 5
    assert outcome["resultState"] == "cancelled" and outcome["rowsStreamed"] == 5
    assert outcome["error"]["code"] == "cancelled"


def test_a_killed_connection_cancels_the_query(served: tuple[CoordinatorRig, Served]) -> None:
    _, http = served
    started = len(http.runs)
    with httpx.Client(timeout=60) as client:
        headers = {"Authorization": f"Bearer {http.token}"}
        body = _body(MANY_ROWS, max_result_rows=10**7)
        with client.stream("POST", f"{http.url}/v1/query", json=body, headers=headers) as r:
            assert r.status_code == 200
            first = next(r.iter_lines())
            assert "call_id" in json.loads(first)
    run = http.runs[started]
    deadline = time.monotonic() + 30
    while run.outcome() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # the drain thread finishes the run after the disconnect
    outcome = run.outcome()
    assert outcome is not None and outcome["resultState"] == "cancelled"
    assert outcome["rowsStreamed"] < 300 * 300


def test_refusals_have_the_error_shape(served: tuple[CoordinatorRig, Served]) -> None:
    rig, http = served
    cases = [
        (_post(http, _body("SELECT 1"), token=""), 401),
        (_post(http, _body("SELECT 1"), token="not-a-jwt"), 401),
        (_post(http, {"sql": "SELECT 1"}), 400),
        (_post(http, {**_body("SELECT 1"), "mode": "background"}), 400),
        (_post(http, {**_body("SELECT 1"), "environment_id": "other"}), 403),
        (_post(http, {**_body("SELECT 1"), "catalog_version": "v9"}), 400),
        (_post(http, {**_body("SELECT $1"), "parameters": [{"type": "int64", "value": "x"}]}), 400),
        (
            _post(http, {**_body("SELECT $1"), "parameters": [{"type": "float64", "value": HUGE}]}),
            400,
        ),
        (_post(http, {**_body(DEEP % "$1"), "parameters": [{"type": "int64", "value": 1}]}), 400),
    ]
    control = rig.ingest.control
    publisher = TokenIssuer(control.keys, control.metastore).issue_publisher(SCOPE).token
    cases.append((_post(http, _body("SELECT 1"), token=publisher), 403))
    for response, status in cases:
        assert response.status_code == status, response.text
        error = response.json()["error"]
        assert {"code", "message", "request_id"} <= set(error) or {"code", "message"} <= set(error)
    assert cases[0][0].headers.get("www-authenticate", "").startswith("Bearer")


def test_sql_errors_end_the_stream_with_a_typed_outcome(
    served: tuple[CoordinatorRig, Served],
) -> None:
    _, http = served
    for sql in ("SELECT nope FROM calls", "DROP TABLE calls", "SELECT * FROM processes", DEEP % 1):
        response = _post(http, _body(sql))
        assert response.status_code == 200
        rows, outcome = _lines(response)
        assert rows == [] and outcome["resultState"] == "failed"
        assert outcome["error"]["code"] == "invalid_sql"


def test_parameters_are_bound_as_literals(served: tuple[CoordinatorRig, Served]) -> None:
    rig, http = served
    body = {
        **_body("SELECT call_id FROM calls WHERE fqn = $1 AND duration_ns >= $2 ORDER BY call_id"),
        "parameters": [{"type": "string", "value": "ScoreCustomer"}, {"type": "int64", "value": 0}],
    }
    rows, outcome = _lines(_post(http, body))
    want = rig.local(
        "SELECT call_id FROM calls WHERE fqn = 'ScoreCustomer' AND duration_ns >= 0 "
        "ORDER BY call_id"
    ).rows
    assert rows == want and rows and outcome["resultState"] == "complete"


def test_cors_for_the_studio_origin(served: tuple[CoordinatorRig, Served]) -> None:
    _, http = served
    preflight = httpx.options(
        f"{http.url}/v1/query",
        headers={
            "Origin": STUDIO,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type",
        },
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == STUDIO
    other = httpx.options(
        f"{http.url}/v1/query",
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert other.headers.get("access-control-allow-origin") != "https://evil.example"
    answer = _post(http, _body("SELECT count(*) AS n FROM calls"), Origin=STUDIO)
    assert answer.headers["access-control-allow-origin"] == STUDIO


def test_a_background_job_returns_the_interactive_answer(
    served: tuple[CoordinatorRig, Served],
) -> None:
    _, http = served
    sql = "SELECT call_id, args['customer']['age'] AS age FROM calls ORDER BY call_id"
    interactive, _ = _lines(_post(http, _body(sql)))
    headers = {"Authorization": f"Bearer {http.token}", "Idempotency-Key": "job-1"}
    created = httpx.post(f"{http.url}/v1/query-jobs", json={**_body(sql), "mode": "background"},
                         headers=headers)  # fmt: skip
    assert created.status_code == 202, created.text
    job = created.json()
    again = httpx.post(f"{http.url}/v1/query-jobs", json={**_body(sql), "mode": "background"},
                       headers=headers)  # fmt: skip
    assert again.json()["job_id"] == job["job_id"]
    deadline = time.monotonic() + 60
    while job["state"] in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the job, as a client does
        job = httpx.get(f"{http.url}/v1/query-jobs/{job['job_id']}", headers=headers).json()
    assert job["state"] == "succeeded", job
    assert job["snapshot"]["lanceVersion"] >= 1
    result = httpx.get(f"{http.url}/v1/query-jobs/{job['job_id']}/result", headers=headers)
    rows, outcome = _lines(result)
    assert rows == interactive and outcome["resultState"] == "complete"


def test_logs_carry_ids_and_states_never_sql_literals(
    served: tuple[CoordinatorRig, Served], caplog: pytest.LogCaptureFixture
) -> None:
    _, http = served
    secret = "Zq9-private-literal"
    caplog.set_level("INFO")  # what the services run at (DataFusion's parser traces at DEBUG)
    for sql in (
        f"SELECT call_id FROM calls WHERE args['customer']['name'] = '{secret}'",
        f"SELECT count(*) AS n FROM calls WHERE fqn = '{secret}'",
        f"SELECT nope FROM calls WHERE output LIKE '%{secret}%'",
    ):
        _post(http, _body(sql))
    text = "\n".join(record.getMessage() for record in caplog.records)
    assert "query ended" in text and "state=" in text
    assert secret not in text


def test_losing_the_read_cache_changes_nothing_but_latency(
    served: tuple[CoordinatorRig, Served],
) -> None:
    rig, http = served
    sql = "SELECT call_id, args, output FROM calls ORDER BY call_id LIMIT 40"
    first, _ = _lines(_post(http, _body(sql)))
    cache = rig.coordinator.cache
    assert cache.flush(timeout=30)  # value bodies are written behind the query
    assert cache.stats.entries > 0
    hits = cache.stats.hits
    rig.coordinator.shared.values.clear()  # the in-process layer in front of the disk
    second, _ = _lines(_post(http, _body(sql)))
    assert cache.stats.hits > hits  # served from the disk cache
    rig.coordinator.forget_values()
    import shutil

    shutil.rmtree(rig.coordinator.config.cache_dir or "", ignore_errors=True)
    third, outcome = _lines(_post(http, _body(sql)))
    assert first == second == third and outcome["resultState"] == "complete"


@pytest.mark.parametrize("terms", [200, 1000])
def test_a_long_chain_of_ors_is_answered_as_locally(
    served: tuple[CoordinatorRig, Served], terms: int
) -> None:
    """200 ORs recursed past Python's limit in the pruning of the query's shape, and the
    stream ended without its outcome."""
    rig, http = served
    names = ["ScoreCustomer", *(f"nope{i}" for i in range(terms - 1))]
    where = " OR ".join(f"fqn = '{n}'" for n in names)
    listed = f"SELECT call_id, args FROM calls WHERE ({where}) ORDER BY call_id LIMIT 5"
    for sql in (f"SELECT count(*) AS n FROM calls WHERE {where}", listed):
        rows, outcome = _lines(_post(http, _body(sql)))
        assert outcome["resultState"] == "complete", outcome
        assert rows == rig.local(sql).rows and rows


def test_budgets_past_int64_are_no_bound(served: tuple[CoordinatorRig, Served]) -> None:
    """openapi.yaml sets no maximum: 2**64 rows became a LIMIT ClickHouse refused (a
    retryable dependency_unavailable)."""
    rig, http = served
    sql = "SELECT fqn, count(*) AS n FROM calls GROUP BY fqn ORDER BY fqn"
    huge = {name: 2**64 for name in ("max_result_rows", "max_result_bytes",
                                     "max_private_bytes_read")}  # fmt: skip
    rows, outcome = _lines(_post(http, _body(sql, max_wall_ms=HUGE, **huge)))
    assert outcome["resultState"] == "complete", outcome
    assert rows == rig.local(sql).rows


def test_a_failure_inside_the_coordinator_still_ends_with_a_typed_outcome(
    served: tuple[CoordinatorRig, Served], monkeypatch: pytest.MonkeyPatch
) -> None:
    from baml_studio.coordinator import execute

    def broken(query: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(execute, "query_shape", broken)
    response = _post(http := served[1], _body("SELECT count(*) AS n FROM calls"))
    rows, outcome = _lines(response)
    assert rows == [] and outcome["resultState"] == "failed"
    assert outcome["error"]["code"] == "internal" and "RuntimeError" in outcome["error"]["message"]
    assert "a bug" not in response.text
    monkeypatch.undo()
    rows, outcome = _lines(_post(http, _body("SELECT count(*) AS n FROM calls")))
    assert outcome["resultState"] == "complete" and rows[0]["n"] > 0


def test_a_job_whose_sql_cannot_run_is_refused_before_it_is_queued(
    served: tuple[CoordinatorRig, Served],
) -> None:
    """openapi.yaml: the coordinator "validates and plans the SQL" before it returns a job id
    (these were 202, and the job failed later)."""
    _, http = served
    headers = {"Authorization": f"Bearer {http.token}"}
    before = len(http.runs)
    grouped = "SELECT call_id FROM calls WHERE args['x'] = 1 GROUP BY nope"
    for sql in ("DROP TABLE calls", "SELEC FROM", "SELECT nope FROM calls",
                "SELECT * FROM processes", "SELECT call_id FROM calls WHERE fqn = 1 +",
                grouped, DEEP % 1):  # fmt: skip
        response = httpx.post(f"{http.url}/v1/query-jobs", json=_body(sql), headers=headers)
        assert response.status_code == 400, (sql, response.text)
        assert response.json()["error"]["code"] == "invalid_sql", response.text
    assert len(http.runs) == before  # nothing was started, nothing queued
    for sql in ("SELECT call_id, args['customer']['age'] AS age FROM calls ORDER BY 1 LIMIT 3",
                "SELECT call_id FROM calls WHERE output = baml_value_json('{\"a\": 1}')",
                "SELECT * FROM hot_call_paths LIMIT 2", "SHOW TABLES",
                "EXPLAIN SELECT count(*) FROM errors", "DESCRIBE calls"):  # fmt: skip
        response = httpx.post(f"{http.url}/v1/query-jobs", json=_body(sql), headers=headers)
        assert response.status_code == 202, (sql, response.text)
