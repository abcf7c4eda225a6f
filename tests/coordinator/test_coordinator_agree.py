"""Local and remote agree: every query of the corpus returns the same rows through
``baml-studio query --store`` (the local engine over the profiler store) and through
``POST /v1/query`` (the coordinator over the control plane's facts and Lance), after the
workload is published and projected; and what each class of query reads, counted."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from coordinator_rig import (
    BUDGET,
    CoordinatorRig,
    Served,
    coordinator_over,
    private_strings,
    serve_coordinator,
)
from projector_fixtures import workload_store

from baml_studio.cli import main

__all__ = ["workload_store"]

CORPUS = [
    # threads_v1
    "SELECT thread_id, status, total_errors, started_at FROM threads "
    "WHERE parent_thread_id IS NULL ORDER BY started_at DESC, thread_id LIMIT 20",
    "SELECT execution_id, thread_id, name, spawn_fqn, end_status FROM threads "
    "WHERE parent_thread_id IS NOT NULL ORDER BY execution_id, thread_id",
    "SELECT name, count(*) AS n FROM threads GROUP BY name ORDER BY name",
    # call_path_stats_v1 (and its view)
    "SELECT fqn, sum(calls_started) AS calls, sum(self_ns) AS self_ns FROM call_path_stats "
    "GROUP BY fqn ORDER BY fqn",
    "SELECT fqn, call_site_file, call_site_line FROM call_path_stats "
    "ORDER BY execution_id, call_path_id LIMIT 30",
    "SELECT fqn, self_ns FROM hot_call_paths LIMIT 15",
    # calls_v1 and errors_v1, joined
    "SELECT c.call_id, c.duration_ns, e.stack FROM calls c JOIN errors e "
    "ON e.execution_id = c.execution_id AND e.error_id = c.error_id "
    "WHERE c.status = 'errored' ORDER BY c.call_id",
    "SELECT error_id, kind, value FROM errors ORDER BY execution_id, error_id",
    "SELECT c.fqn, count(*) AS n FROM calls c JOIN threads t ON t.execution_id = c.execution_id "
    "AND t.thread_id = c.thread_id WHERE t.parent_thread_id IS NULL GROUP BY c.fqn ORDER BY c.fqn",
    # function_definitions_v1 and health_v1
    "SELECT DISTINCT fqn, kind, source_file FROM function_definitions ORDER BY fqn",
    "SELECT metric, plane, count(*) AS n, sum(value) AS total FROM health "
    "GROUP BY metric, plane ORDER BY metric, plane",
    # CTEs and window functions
    "WITH per AS (SELECT execution_id, count(*) AS n FROM calls GROUP BY execution_id) "
    "SELECT n, count(*) AS executions FROM per GROUP BY n ORDER BY n",
    "SELECT call_id, fqn, rank() OVER (PARTITION BY fqn ORDER BY duration_ns DESC, call_id) AS r "
    "FROM calls ORDER BY fqn, r LIMIT 40",
    "WITH aged AS (SELECT call_id, args['customer']['age'] AS age FROM calls "
    "WHERE fqn = 'ScoreCustomer') SELECT age, count(*) AS n FROM aged GROUP BY age ORDER BY age",
    # value subscripts and comparisons
    "SELECT call_id, args['customer']['age'] AS age, output FROM calls "
    "WHERE args['customer']['age'] >= 30 ORDER BY call_id",
    "SELECT call_id, args['customer']['age'] AS age FROM calls "
    "WHERE fqn = 'ScoreCustomer' AND args['customer']['age'] >= 30 ORDER BY call_id",
    "SELECT call_id, fqn, args, output, error FROM calls ORDER BY call_id LIMIT 25",
    # substring search over values
    "SELECT call_id, fqn FROM calls WHERE CAST(output AS VARCHAR) LIKE '%e%' ORDER BY call_id",
    # grouping by a private field
    "SELECT args['customer']['age'] AS age, count(*) AS n FROM calls "
    "WHERE args['customer']['age'] IS NOT NULL GROUP BY args['customer']['age'] ORDER BY age",
    # ORDER BY … LIMIT over a value predicate (the limit must not be pushed below it)
    "SELECT call_id, duration_ns FROM calls WHERE args['customer']['age'] >= 30 "
    "ORDER BY duration_ns DESC, call_id LIMIT 5",
    "SELECT call_id FROM calls WHERE args['customer']['age'] < 30 LIMIT 7",
]


@pytest.fixture(scope="module")
def projected(
    tmp_path_factory: pytest.TempPathFactory,
    chdb_dsn: str,
    workload_store: Path,
) -> Iterator[tuple[CoordinatorRig, Served]]:
    tmp = tmp_path_factory.mktemp("agree")
    database = f"t_{uuid.uuid4().hex[:16]}"
    with coordinator_over(tmp, chdb_dsn, database, workload_store) as rig:
        with serve_coordinator(rig, tmp) as served:
            yield rig, served
        # no resident subquery of this module carried a private literal, value or path
        secrets = private_strings(rig.ingest.store_root)
        assert secrets and rig.resident_sql
        leaked = [(s, q) for q in rig.resident_sql for s in secrets if s in q]
        assert not leaked, leaked[:3]


def _remote(served: Served, sql: str, **budget: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    body = {
        "sql": sql,
        "parameters": [],
        "catalog_version": "v1",
        "budget": {**BUDGET.to_json(), **budget},
    }
    response = httpx.post(
        f"{served.url}/v1/query",
        json=body,
        headers={"Authorization": f"Bearer {served.token}"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert "queryOutcome" in lines[-1]
    assert all("queryOutcome" not in line for line in lines[:-1])
    return lines[:-1], lines[-1]["queryOutcome"]


def _local(store: Path, sql: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    result = CliRunner().invoke(
        main, ["query", "--store", str(store), "--format", "jsonl", "--max-rows", "100000", sql]
    )
    assert result.exit_code in (0, 1), result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    return lines[:-1], lines[-1]["queryOutcome"]


@pytest.mark.parametrize("sql", CORPUS)
def test_local_and_remote_return_the_same_rows(
    projected: tuple[CoordinatorRig, Served], sql: str
) -> None:
    rig, served = projected
    remote_rows, remote_outcome = _remote(served, sql)
    local_rows, local_outcome = _local(rig.ingest.store_root, sql)
    assert remote_outcome["resultState"] == local_outcome["resultState"], remote_outcome
    if " LIMIT " in sql and " ORDER BY " not in sql:
        # any LIMIT rows of the answer are right: both are that many rows of the unlimited one
        everything, _ = _local(rig.ingest.store_root, sql.rsplit(" LIMIT ", 1)[0])
        assert len(remote_rows) == len(local_rows)
        assert all(row in everything for row in remote_rows)
    else:
        assert remote_rows == local_rows
    assert remote_outcome["rowsStreamed"] == len(remote_rows)
    remote_values = remote_outcome["valueEvaluations"]
    local_values = local_outcome["valueEvaluations"]
    if " LIMIT " not in sql:  # a LIMIT may stop evaluating at different rows
        # the value index spares evaluating bodies that cannot match; every unavailable
        # value is still evaluated and counted by reason, as locally
        assert remote_values["unavailable"] == local_values["unavailable"]
        assert remote_values["byReason"] == local_values["byReason"]
        assert remote_values["attempted"] <= local_values["attempted"]
    assert remote_outcome["privateState"] == {"indexed": len(remote_rows), "pending": 0}
    snapshot = remote_outcome["snapshot"]
    assert snapshot["generation"] == rig.ingest.generation()
    assert snapshot["lanceVersion"] >= 1 and snapshot["snapshotId"].startswith("snap_")


def test_the_corpus_is_not_vacuous(projected: tuple[CoordinatorRig, Served]) -> None:
    _, served = projected
    assert not [sql for sql in CORPUS if not _remote(served, sql)[0]]


@pytest.mark.parametrize("sql", [CORPUS[0], CORPUS[14], CORPUS[17]])
def test_the_remote_cli_prints_what_the_local_cli_prints(
    projected: tuple[CoordinatorRig, Served], sql: str
) -> None:
    rig, served = projected
    for fmt in ("jsonl", "table"):
        local = CliRunner().invoke(main, ["query", "--store", str(rig.ingest.store_root),
                                          "--format", fmt, sql])  # fmt: skip
        remote = CliRunner().invoke(main, ["query", "--remote", served.url, "--token",
                                           served.token, "--format", fmt, sql])  # fmt: skip
        assert remote.exit_code == local.exit_code == 0, remote.output
        if fmt == "table":
            assert remote.stdout == local.stdout
        else:  # the outcome line differs only in its snapshot and value counts
            assert remote.stdout.splitlines()[:-1] == local.stdout.splitlines()[:-1]
