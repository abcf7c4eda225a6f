"""Tenant isolation: a token of tenant A cannot write, read, snapshot or erase tenant B's facts
by any header, body field, SQL text or generation. Each attempt gets 400 or 403 (or returns
only A's rows) and B's facts are unchanged."""

from __future__ import annotations

import pytest
from control_rig import SCOPE_A, SCOPE_B, Rig, batch

from baml_studio.control.models import ErrorResponse
from baml_studio.gateway.config import Scope


@pytest.fixture
def seeded(rig: Rig) -> Rig:
    for token, scope, root in (
        (rig.token_a, SCOPE_A, "exec_a1"),
        (rig.token_b, SCOPE_B, "exec_b1"),
    ):
        for relation in ("calls_v1", "threads_v1"):
            answer = rig.put(token, scope, relation, root, batch(relation, root, 3))
            assert answer.status_code == 201, answer.text
    return rig


def _b_rows(rig: Rig) -> list[dict]:
    gen = rig.control.metastore.active_generation(SCOPE_B)
    return sorted(rig.control.facts.rows("calls_v1", SCOPE_B, gen).to_pylist(), key=repr)


def _refused(answer, statuses=(400, 403)) -> str:
    assert answer.status_code in statuses, answer.text
    return ErrorResponse.model_validate(answer.json()).error.code


def test_a_cannot_write_into_b_by_headers(seeded: Rig) -> None:
    before = _b_rows(seeded)
    table = batch("calls_v1", "exec_x")
    assert _refused(seeded.put(seeded.token_a, SCOPE_B, "calls_v1", "exec_x", table)) == (
        "scope_forbidden"
    )
    other_env = Scope("tn_a", "prj", "staging")
    assert _refused(seeded.put(seeded.token_a, other_env, "calls_v1", "exec_x", table)) == (
        "scope_forbidden"
    )
    assert _b_rows(seeded) == before


def test_a_cannot_snapshot_b(seeded: Rig) -> None:
    assert _refused(seeded.snapshot(seeded.token_a, SCOPE_B)) == "scope_forbidden"


def test_a_cannot_use_bs_snapshot(seeded: Rig) -> None:
    snap_b = seeded.snapshot(seeded.token_b, SCOPE_B).json()["snapshot_id"]
    answer = seeded.query(seeded.token_a, "SELECT count(*) AS n FROM calls_v1", snapshot_id=snap_b)
    assert _refused(answer) == "scope_forbidden"


def test_forged_snapshot_is_refused(seeded: Rig) -> None:
    snap_a = seeded.snapshot(seeded.token_a, SCOPE_A).json()["snapshot_id"]
    forged = snap_a[:-4] + ("AAAA" if not snap_a.endswith("AAAA") else "BBBB")
    answer = seeded.query(seeded.token_a, "SELECT 1 AS x FROM calls_v1", snapshot_id=forged)
    assert _refused(answer) == "invalid_snapshot"


def test_generation_form_is_scoped_to_the_token(seeded: Rig) -> None:
    answer = seeded.query(
        seeded.token_a, "SELECT count(*) AS n FROM calls_v1", scope=SCOPE_B, generation="gen_1"
    )
    assert _refused(answer) == "scope_forbidden"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT execution_id FROM calls_v1 WHERE execution_id = 'exec_b1' OR 1=1",
        "SELECT execution_id FROM calls_v1 UNION ALL SELECT execution_id FROM threads_v1",
        "SELECT execution_id FROM calls_v1 WHERE execution_id IN "
        "(SELECT execution_id FROM threads_v1 WHERE 1=1 OR execution_id = 'exec_b1')",
        "WITH x AS (SELECT * FROM calls_v1) SELECT execution_id FROM x",
        "SELECT c.execution_id FROM calls_v1 c JOIN threads_v1 t ON 1=1",
        "SELECT execution_id FROM calls_v1 /* WHERE tenant_id = 'tn_b' */",
        "SELECT execution_id FROM calls_v1 -- ) OR tenant_id = 'tn_b'\n",
    ],
)
def test_sql_tricks_return_only_a(seeded: Rig, sql: str) -> None:
    table = seeded.query_table(seeded.token_a, SCOPE_A, sql)
    assert set(table.column("execution_id").to_pylist()) == {"exec_a1"}


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT tenant_id FROM calls_v1",
        "SELECT * FROM baml_facts.calls_v1",
        "SELECT * FROM system.tables",
        "SELECT count(*) FROM calls_v1; DROP TABLE calls_v1",
        "SELECT count(*) AS n FROM calls_v1 SETTINGS readonly = 0",
        "SELECT * FROM remote('127.0.0.1', 'system', 'one')",
        "SELECT call_site_file FROM calls_v1",
        "SELECT generation FROM calls_v1",
    ],
)
def test_sql_that_would_escape_is_400(seeded: Rig, sql: str) -> None:
    snap = seeded.snapshot(seeded.token_a, SCOPE_A).json()["snapshot_id"]
    answer = seeded.query(seeded.token_a, sql, snapshot_id=snap)
    assert answer.status_code == 400, answer.text


def test_a_cannot_erase_bs_facts(seeded: Rig) -> None:
    before = _b_rows(seeded)
    body = {"root_ids": ["exec_b1"], "generation": "gen_1"}
    answer = seeded.client.post(
        "/projection-erasures",
        json=body,
        headers=seeded.headers(seeded.token_a, **{"Idempotency-Key": "k1"}),
    )
    assert answer.status_code == 200  # nothing of A's matched; B untouched
    assert _b_rows(seeded) == before
    with_headers = seeded.client.post(
        "/projection-erasures",
        json=body,
        headers=seeded.headers(
            seeded.token_a,
            **{
                "Idempotency-Key": "k2",
                "X-Baml-Project-Id": "prj",
                "X-Baml-Environment-Id": "prod",
            },
        ),
    )
    assert with_headers.status_code == 200
    assert _b_rows(seeded) == before


def test_a_forged_tenant_in_the_snapshot_body_is_403(seeded: Rig) -> None:
    answer = seeded.client.post(
        "/query-snapshots",
        json={
            "scope": {"tenant_id": "tn_b", "project_id": "prj", "environment_id": "prod"},
            "catalog_version": "v1",
        },
        headers=seeded.headers(seeded.token_a),
    )
    assert _refused(answer) == "scope_forbidden"


def test_tokens_other_than_workload_are_refused(seeded: Rig) -> None:
    publisher = seeded.issuer.issue_publisher(SCOPE_A, 3600).token
    answer = seeded.snapshot(publisher, SCOPE_A)
    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "wrong_token_kind"


def test_revoked_and_missing_tokens_are_401(seeded: Rig) -> None:
    issued = seeded.issuer.issue_workload("tn_a", "dep_a", "cell-1")
    assert seeded.snapshot(issued.token, SCOPE_A).status_code == 200
    seeded.control.metastore.revoke_token(issued.token_id)
    answer = seeded.snapshot(issued.token, SCOPE_A)
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "token_revoked"
    no_token = seeded.client.post("/query-snapshots", json={}, headers={"X-Baml-Request-Id": "r1"})
    assert no_token.status_code == 401
    assert no_token.headers["WWW-Authenticate"].startswith("Bearer")
