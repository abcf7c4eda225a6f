"""Execution-id pushdown: the source folds only the executions (and relations) a query can see."""

from __future__ import annotations

import pytest
import sqlglot
from query_fakes import E1, E2, E3, FakeSource, relations_called, standard

from baml_studio.query import QueryEngine
from baml_studio.query.pushdown import needed_relations


def calls_for(sql: str) -> tuple[FakeSource, list[dict[str, object]]]:
    source = standard()
    result = QueryEngine(source).execute(sql)
    rows = list(result)
    assert result.outcome()["resultState"] in ("complete", "incomplete"), result.outcome()
    return source, rows


def test_equality_is_pushed_and_only_referenced_relations_are_folded() -> None:
    source, rows = calls_for(f"SELECT thread_id FROM threads WHERE execution_id = '{E1}'")
    assert source.table_calls == [(("threads_v1",), (E1,))]
    assert len(rows) == 2


def test_in_list_and_reversed_equality() -> None:
    source, _ = calls_for(f"SELECT call_id FROM calls WHERE execution_id IN ('{E2}', '{E3}')")
    assert source.table_calls == [(("calls_v1",), (E2, E3))]
    source, _ = calls_for(f"SELECT call_id FROM calls WHERE '{E2}' = execution_id")
    assert source.table_calls == [(("calls_v1",), (E2,))]


def test_conjuncts_intersect() -> None:
    sql = (
        f"SELECT call_id FROM calls WHERE execution_id IN ('{E1}', '{E2}') "
        f"AND status = 'ok' AND execution_id = '{E2}'"
    )
    source, rows = calls_for(sql)
    assert source.table_calls == [(("calls_v1",), (E2,))]
    assert {r["call_id"] for r in rows} == {"c_null_age", "c_not_captured", "c_int60"}


def test_empty_intersection_folds_nothing_and_returns_no_rows() -> None:
    source, rows = calls_for(
        f"SELECT * FROM calls WHERE execution_id = '{E1}' AND execution_id = '{E2}'"
    )
    assert rows == []
    assert source.table_calls == []
    assert source.reads == []


def test_disjunctions_and_negations_are_not_pushed() -> None:
    for where in (
        f"execution_id = '{E1}' OR status = 'ok'",
        f"NOT execution_id = '{E1}'",
        f"execution_id <> '{E1}'",
        f"execution_id NOT IN ('{E1}')",
        f"execution_id LIKE '{E1}'",
    ):
        source, _ = calls_for(f"SELECT call_id FROM calls WHERE {where}")
        # a row-wise scan folds chunk by chunk; not pushed = every execution is asked for
        asked = {i for relations, ids in source.table_calls for i in ids or ()}
        assert {r for r, _ in source.table_calls} == {("calls_v1",)}, where
        assert asked == set(source.execution_ids()), where


def test_join_pushes_per_table_by_qualifier() -> None:
    sql = (
        "SELECT c.call_id, e.stack FROM calls c JOIN errors e "
        "ON e.execution_id = c.execution_id AND e.error_id = c.error_id "
        f"WHERE c.execution_id = '{E2}'"
    )
    source, rows = calls_for(sql)
    assert sorted(source.table_calls) == [(("calls_v1",), (E2,)), (("errors_v1",), None)]
    assert rows == [{"call_id": "c_lost", "stack": ["Main", "ScoreCustomer"]}]


def test_relation_referenced_twice_unites_restrictions() -> None:
    sql = (
        f"SELECT a.call_id FROM calls a WHERE a.execution_id = '{E1}' "
        f"UNION ALL SELECT b.call_id FROM retained_calls b WHERE b.execution_id = '{E2}'"
    )
    source, rows = calls_for(sql)
    assert source.table_calls == [(("calls_v1",), (E1, E2))]
    assert len(rows) == 8
    sql = f"SELECT call_id FROM calls WHERE execution_id = '{E1}' UNION SELECT call_id FROM calls"
    source, _ = calls_for(sql)
    assert source.table_calls == [(("calls_v1",), None)]


def test_cte_and_subquery_scopes() -> None:
    sql = (
        f"WITH x AS (SELECT * FROM calls WHERE execution_id = '{E1}') "
        "SELECT call_id FROM x WHERE call_id IN "
        f"(SELECT throw_call_id FROM errors WHERE execution_id IN ('{E2}'))"
    )
    source, rows = calls_for(sql)
    assert sorted(source.table_calls) == [(("calls_v1",), (E1,)), (("errors_v1",), (E2,))]
    assert rows == []


def test_view_reads_its_relation_with_the_outer_filter() -> None:
    source, rows = calls_for(f"SELECT fqn FROM hot_call_paths WHERE execution_id = '{E1}'")
    assert source.table_calls == [(("call_path_stats_v1",), (E1,))]
    assert [r["fqn"] for r in rows] == ["ScoreCustomer", "Main"]


def test_execution_independent_relations_are_never_restricted() -> None:
    needs = needed_relations(
        sqlglot.parse_one("SELECT * FROM function_definitions WHERE program_id = 'p'"), False
    )
    assert needs == {"function_definitions_v1": None}


def test_catalog_metadata_queries_fold_nothing() -> None:
    for sql in (
        "SHOW TABLES",
        "SHOW COLUMNS FROM calls",
        "DESCRIBE errors",
        "SELECT * FROM baml_columns",
        "SELECT table_name FROM information_schema.tables",
        "EXPLAIN SELECT * FROM calls WHERE args['a'] = 1",
    ):
        source, rows = calls_for(sql)
        assert source.table_calls == [], sql
        assert rows, sql


@pytest.mark.parametrize("qualifier", ["", "calls."])
def test_unqualified_or_table_qualified(qualifier: str) -> None:
    source, _ = calls_for(f"SELECT call_id FROM calls WHERE {qualifier}execution_id = '{E1}'")
    assert relations_called(source) == {"calls_v1"}
    assert source.table_calls[0][1] == (E1,)
