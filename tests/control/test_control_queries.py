"""Snapshots, resident queries, projection erasures and the public endpoints."""

from __future__ import annotations

from datetime import datetime

import pytest
from control_rig import SCOPE_A, Rig, batch, read_ipc

from baml_studio.control.models import (
    ErrorResponse,
    ProjectionErasureResponse,
    ProjectionSchemaSet,
    QuerySnapshot,
)
from baml_studio.control.schemas import PUBLIC_RELATION_NAMES, registered_schema

BUDGET = {
    "max_wall_ms": 10_000,
    "max_rows_read": 10_000_000,
    "max_bytes_read": 1_000_000_000,
    "max_result_rows": 100_000,
    "max_result_bytes": 100_000_000,
}


@pytest.fixture
def seeded(rig: Rig) -> Rig:
    for root in ("exec_1", "exec_2", "exec_3"):
        for relation in sorted(PUBLIC_RELATION_NAMES):
            answer = rig.put(rig.token_a, SCOPE_A, relation, root, batch(relation, root, 4))
            assert answer.status_code == 201, answer.text
    return rig


def test_projection_schemas_are_the_public_split(rig: Rig) -> None:
    answer = rig.client.get("/projection-schemas/v1", headers=rig.headers(rig.token_a))
    assert answer.status_code == 200
    parsed = ProjectionSchemaSet.model_validate(answer.json())
    assert {r.relation for r in parsed.relations} == PUBLIC_RELATION_NAMES
    for relation in parsed.relations:
        names = [c.name for c in relation.columns]
        assert names == registered_schema(relation.relation).names
    calls = next(r for r in parsed.relations if r.relation == "calls_v1")
    names = {c.name for c in calls.columns}
    assert not names & {"args", "output", "error", "call_site_file", "call_site_line"}
    missing = rig.client.get("/projection-schemas/v9", headers=rig.headers(rig.token_a))
    assert missing.status_code == 404
    assert ErrorResponse.model_validate(missing.json()).error.code == "unknown_catalog_version"


def test_snapshot_binds_the_active_generation(seeded: Rig) -> None:
    answer = seeded.snapshot(seeded.token_a, SCOPE_A)
    assert answer.status_code == 200, answer.text
    snap = QuerySnapshot.model_validate(answer.json())
    assert snap.generation == "gen_1"
    assert snap.expires_at > datetime.now(snap.expires_at.tzinfo)
    seeded.control.metastore.bump_generation(SCOPE_A)
    # the old snapshot keeps reading its generation until it expires
    table = read_ipc(
        seeded.query(
            seeded.token_a, "SELECT count(*) AS n FROM calls_v1", snapshot_id=snap.snapshot_id
        ).content
    )
    assert table.column("n").to_pylist() == [12]
    assert seeded.snapshot(seeded.token_a, SCOPE_A).json()["generation"] == "gen_2"


def test_resident_query_answers_arrow_with_the_generation(seeded: Rig) -> None:
    snap = seeded.snapshot(seeded.token_a, SCOPE_A).json()["snapshot_id"]
    answer = seeded.query(
        seeded.token_a,
        "SELECT fqn, count(*) AS calls FROM calls_v1 GROUP BY fqn ORDER BY fqn",
        snapshot_id=snap,
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("application/vnd.apache.arrow.stream")
    assert answer.headers["X-Baml-Projection-Generation"] == "gen_1"
    assert answer.headers["X-Baml-Snapshot-Id"] == snap
    table = read_ipc(answer.content)
    assert table.schema.metadata[b"baml.projection_generation"] == b"gen_1"
    assert table.to_pylist() == [
        {"fqn": "Fn0", "calls": 6},
        {"fqn": "Fn1", "calls": 3},
        {"fqn": "Fn2", "calls": 3},
    ]


def test_parameters_bind_as_literals(seeded: Rig) -> None:
    table = seeded.query_table(
        seeded.token_a,
        SCOPE_A,
        "SELECT call_id FROM calls_v1 WHERE execution_id = $1 ORDER BY call_id",
        parameters=[{"type": "string", "value": "exec_2"}],
    )
    assert table.num_rows == 4
    none = seeded.query_table(
        seeded.token_a,
        SCOPE_A,
        "SELECT call_id FROM calls_v1 WHERE execution_id = $1",
        parameters=[{"type": "string", "value": "x' OR '1'='1"}],
    )
    assert none.num_rows == 0


@pytest.mark.parametrize(
    ("sql", "parameters", "code"),
    [
        ("SELECT fqn FROM calls_v1 WHERE duration_ns > $1", [10**400], "invalid_parameter"),
        ("SELECT fqn FROM calls_v1 WHERE " + "(" * 3000 + "1 = 1" + ")" * 3000, [], None),
    ],
    ids=["float64 of 400 digits", "3000 nested brackets"],
)
def test_hostile_queries_are_400s_in_the_error_shape(
    rig: Rig, sql: str, parameters: list[int], code: str | None
) -> None:
    """A JSON integer too large for a float64 parameter (pydantic takes it as an int) and SQL
    nested too deeply to parse: 400s, not 500s."""
    answer = rig.query(
        rig.token_a,
        sql,
        parameters=[{"type": "float64", "value": v} for v in parameters],
        scope=SCOPE_A,
        generation="gen_1",
    )
    assert answer.status_code == 400, answer.text
    error = ErrorResponse.model_validate(answer.json()).error
    assert error.code == (code or "sql_parse_error"), error


def test_generation_form(seeded: Rig) -> None:
    answer = seeded.query(
        seeded.token_a, "SELECT count(*) AS n FROM threads_v1", scope=SCOPE_A, generation="gen_1"
    )
    assert answer.status_code == 200, answer.text
    assert read_ipc(answer.content).column("n").to_pylist() == [12]
    assert "X-Baml-Snapshot-Id" not in answer.headers
    unknown = seeded.query(
        seeded.token_a, "SELECT count(*) AS n FROM threads_v1", scope=SCOPE_A, generation="gen_9"
    )
    assert unknown.status_code == 400
    assert unknown.json()["error"]["code"] == "unknown_generation"


def test_budget_exceeded_is_typed(seeded: Rig) -> None:
    snap = seeded.snapshot(seeded.token_a, SCOPE_A).json()["snapshot_id"]
    answer = seeded.query(
        seeded.token_a,
        "SELECT call_id FROM calls_v1",
        snapshot_id=snap,
        budget={**BUDGET, "max_result_rows": 2},
    )
    assert answer.status_code == 413, answer.text
    assert answer.json()["error"]["code"] == "budget_exceeded"
    answer = seeded.query(
        seeded.token_a,
        "SELECT count(*) AS n FROM calls_v1",
        snapshot_id=snap,
        budget={**BUDGET, "max_rows_read": 1},
    )
    assert answer.status_code == 413, answer.text
    # the service still answers afterwards
    assert seeded.query_table(seeded.token_a, SCOPE_A, "SELECT count(*) AS n FROM calls_v1")[
        "n"
    ].to_pylist() == [12]


def test_exactly_one_of_snapshot_or_generation(seeded: Rig) -> None:
    snap = seeded.snapshot(seeded.token_a, SCOPE_A).json()["snapshot_id"]
    body = {
        "sql": "SELECT 1 AS x FROM calls_v1",
        "parameters": [],
        "budget": BUDGET,
        "snapshot_id": snap,
        "generation": "gen_1",
        "catalog_version": "v1",
    }
    answer = seeded.client.post(
        "/resident-queries", json=body, headers=seeded.headers(seeded.token_a)
    )
    assert answer.status_code == 400
    body = {"sql": "SELECT 1", "parameters": [], "budget": {**BUDGET, "max_wall_ms": "9"}}
    answer = seeded.client.post(
        "/resident-queries", json=body, headers=seeded.headers(seeded.token_a)
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["details"]["errors"]


def test_projection_erasure_deletes_listed_roots_only(seeded: Rig) -> None:
    body = {"root_ids": ["exec_1", "exec_3"], "generation": "gen_1"}
    headers = seeded.headers(seeded.token_a, **{"Idempotency-Key": "erase-1"})
    answer = seeded.client.post("/projection-erasures", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    parsed = ProjectionErasureResponse.model_validate(answer.json())
    assert (parsed.state, [r.root for r in parsed.root_ids]) == ("deleted", ["exec_1", "exec_3"])
    for relation in sorted(PUBLIC_RELATION_NAMES):
        rows = seeded.control.facts.rows(relation, SCOPE_A, "gen_1")
        if "execution_id" in rows.column_names:
            assert set(rows.column("execution_id").to_pylist()) == {"exec_2"}, relation
        else:
            assert rows.num_rows == 4, relation
    again = seeded.client.post("/projection-erasures", json=body, headers=headers)
    assert again.status_code == 200
    assert again.json() == answer.json()
    # an erased batch can be projected again (replay after a mistaken erasure)
    rewrite = seeded.put(
        seeded.token_a, SCOPE_A, "calls_v1", "exec_1", batch("calls_v1", "exec_1", 4)
    )
    assert rewrite.status_code == 201


def test_projection_erasure_needs_idempotency_key_and_unique_ids(seeded: Rig) -> None:
    body = {"root_ids": ["exec_1"], "generation": "gen_1"}
    answer = seeded.client.post(
        "/projection-erasures", json=body, headers=seeded.headers(seeded.token_a)
    )
    assert answer.status_code == 400
    dup = {"root_ids": ["exec_1", "exec_1"], "generation": "gen_1"}
    answer = seeded.client.post(
        "/projection-erasures",
        json=dup,
        headers=seeded.headers(seeded.token_a, **{"Idempotency-Key": "k"}),
    )
    assert answer.status_code == 400


def test_public_key_set_and_revocations(rig: Rig) -> None:
    jwks = rig.client.get("/.well-known/jwks.json").json()
    assert jwks["keys"] and all(k["kty"] == "OKP" and "d" not in k for k in jwks["keys"])
    issued = rig.issuer.issue_workload("tn_a", "dep_a", "cell-1")
    rig.control.metastore.revoke_token(issued.token_id)
    assert issued.token_id in rig.client.get("/token-revocations").json()["revoked"]


def test_unknown_routes_and_methods_are_error_responses(rig: Rig) -> None:
    for answer, status in (
        (rig.client.get("/nope"), 404),
        (rig.client.delete("/query-snapshots"), 405),
    ):
        assert answer.status_code == status
        ErrorResponse.model_validate(answer.json())


def test_startup_warms_the_compiler_and_one_query_client(rig: Rig) -> None:
    # the app's lifespan ran ControlPlane.warm_up before the first request
    assert rig.control.facts._queries.idle == 1


def test_a_failing_warm_up_is_logged_and_the_server_still_answers(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from baml_studio.control.facts import FactStoreUnavailable

    def down(sql: str, settings: object) -> None:
        raise FactStoreUnavailable("ClickHouse is down")

    monkeypatch.setattr(rig.control.facts, "query_arrow", down)
    with caplog.at_level("WARNING"):
        rig.control.warm_up()
    assert "warm-up failed code=" in caplog.text
    monkeypatch.undo()
    assert rig.snapshot(rig.token_a, SCOPE_A).status_code == 200


def test_on_started_runs_after_the_warm_up(rig: Rig) -> None:
    from starlette.testclient import TestClient

    from baml_studio.control.app import create_app

    order: list[str] = []
    real = rig.control.warm_up
    rig.control.warm_up = lambda: (order.append("warm_up"), real())[1]  # type: ignore[method-assign]
    with TestClient(create_app(rig.control, on_started=lambda: order.append("started"))):
        assert order == ["warm_up", "started"]
