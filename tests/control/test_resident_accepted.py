"""Accepted resident queries: each compiles with one scope predicate per relation reference,
runs on chDB, and answers exactly what the same query answers over the scope's rows alone."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import sqlglot
from resident_rig import (
    SCOPE,
    SCOPE_MARK,
    Facts,
    assert_every_table_is_scoped,
    build_facts,
    normalise,
)

from baml_studio.control.resident import QueryParameter

EXEC = "exec_A_P_E_g1_1"
OTHER_TAGS = ("_B_", "_g2_", "_P2_", "_E2_")


@dataclass(frozen=True)
class Case:
    id: str
    sql: str
    refs: int
    """Relation references in the query, counted by hand: the scope predicate must appear this
    many times in the compiled SQL."""
    params: tuple[QueryParameter, ...] = ()
    relations: frozenset[str] = field(default_factory=frozenset)
    nonempty: bool = True


def case(
    id: str, sql: str, refs: int, *params: QueryParameter, nonempty: bool = True, **_: Any
) -> Any:
    return pytest.param(Case(id, sql, refs, tuple(params), nonempty=nonempty), id=id)


S = QueryParameter

ACCEPTED = [
    case(
        "aggregate_by_fqn",
        "SELECT fqn, count(*) AS calls, count(DISTINCT execution_id) AS executions, "
        "sum(duration_ns) AS total, avg(duration_ns) AS mean, min(duration_ns), max(duration_ns) "
        "FROM calls_v1 GROUP BY fqn",
        1,
    ),
    case(
        "quantiles",
        "SELECT fqn, percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ns) AS p50, "
        "percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_ns DESC) AS p05, "
        "percentile_disc(0.9) WITHIN GROUP (ORDER BY duration_ns) AS p90 "
        "FROM calls GROUP BY fqn HAVING count(*) > 1 ORDER BY p50 DESC",
        1,
    ),
    case(
        "datafusion_unparsed_aggregate",
        'SELECT "calls_v1"."fqn", count(1) AS "count(*)", sum("calls_v1"."duration_ns") '
        'FROM "calls_v1" WHERE ("calls_v1"."status" IS NOT DISTINCT FROM \'ok\' AND '
        '"calls_v1"."fqn" LIKE \'pkg.%\') GROUP BY "calls_v1"."fqn" '
        'ORDER BY "count(*)" DESC NULLS LAST LIMIT 10 OFFSET 1',
        1,
    ),
    case(
        "datafusion_unparsed_join",
        'SELECT "c"."fqn", "t"."status" FROM "calls_v1" AS "c" LEFT OUTER JOIN "threads_v1" AS "t" '
        'ON ("c"."execution_id" = "t"."execution_id") WHERE (("c"."duration_ns" BETWEEN 1 AND 80) '
        "AND \"c\".\"fqn\" IN ('pkg.Extract', 'pkg.Route'))",
        2,
    ),
    case(
        "datafusion_unparsed_window",
        'SELECT date_trunc(\'hour\', "calls_v1"."started_at") AS "h", '
        'date_part(\'YEAR\', "calls_v1"."started_at") AS "y", '
        '(CAST("calls_v1"."duration_ns" AS DOUBLE PRECISION) / 1000000.0) AS "ms", '
        'row_number() OVER (PARTITION BY "calls_v1"."fqn" ORDER BY "calls_v1"."duration_ns" DESC '
        'NULLS FIRST, "calls_v1"."call_id" ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) '
        'AS "rn" FROM "calls_v1"',
        1,
    ),
    case(
        "top_n_by_duration",
        "SELECT call_id, fqn, duration_ns FROM calls_v1 WHERE duration_ns IS NOT NULL "
        "ORDER BY duration_ns DESC NULLS LAST, call_id LIMIT 5",
        1,
    ),
    case(
        "one_execution_by_parameter",
        "SELECT call_id, fqn, status FROM calls WHERE execution_id = $1 ORDER BY started_ns",
        1,
        S("string", EXEC),
    ),
    case(
        "question_mark_parameters",
        "SELECT call_id FROM calls WHERE execution_id = ? AND duration_ns >= ?",
        1,
        S("utf8", EXEC),
        S("int64", 0),
    ),
    case(
        "timestamp_parameter",
        "SELECT count(*) FROM calls WHERE started_at >= $1 AND started_at < $2",
        1,
        S("timestamp", "2026-03-01T12:00:00Z"),
        S("timestamp", "2026-03-01T23:00:00.000000001+00:00"),
    ),
    case(
        "join_calls_threads_errors",
        "SELECT c.call_id, t.status AS thread_status, e.kind AS error_kind "
        "FROM calls c JOIN threads t "
        "ON t.execution_id = c.execution_id AND t.thread_id = c.thread_id "
        "LEFT JOIN errors e ON e.error_id = c.error_id",
        3,
    ),
    case(
        "ctes",
        "WITH slow AS (SELECT execution_id, duration_ns FROM calls WHERE duration_ns > 50), "
        "per AS (SELECT execution_id, count(*) AS n FROM slow GROUP BY execution_id) "
        "SELECT per.execution_id, per.n, t.kind FROM per JOIN threads_v1 t "
        "ON t.execution_id = per.execution_id",
        2,
    ),
    case(
        "nested_with_in_subquery",
        "WITH a AS (SELECT execution_id FROM calls) SELECT z.execution_id FROM "
        "(WITH b AS (SELECT execution_id FROM a UNION ALL SELECT execution_id FROM threads) "
        "SELECT execution_id FROM b) AS z",
        2,
    ),
    case(
        "cte_used_twice",
        "WITH f AS (SELECT fqn, duration_ns FROM calls) "
        "SELECT x.fqn, count(*) FROM f AS x JOIN f AS y ON x.fqn = y.fqn GROUP BY x.fqn",
        1,
    ),
    case(
        "window_functions",
        "SELECT call_id, fqn, "
        "row_number() OVER (PARTITION BY fqn ORDER BY duration_ns DESC NULLS LAST, call_id) AS rn, "
        "rank() OVER (ORDER BY fqn) AS r, dense_rank() OVER (ORDER BY fqn) AS dr, "
        "lag(duration_ns) OVER (ORDER BY call_id) AS prev, "
        "lead(duration_ns, 2) OVER (ORDER BY call_id) AS next2, "
        "first_value(call_id) OVER (PARTITION BY fqn ORDER BY call_id) AS first_call, "
        "last_value(call_id) OVER (PARTITION BY fqn ORDER BY call_id "
        "ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS last_call, "
        "ntile(3) OVER (ORDER BY call_id) AS third, "
        "sum(duration_ns) OVER (PARTITION BY fqn) AS fqn_total "
        "FROM calls",
        1,
    ),
    case(
        "named_window",
        "SELECT call_id, rank() OVER w AS r FROM calls "
        "WINDOW w AS (PARTITION BY fqn ORDER BY call_id)",
        1,
    ),
    case("union", "SELECT execution_id FROM calls UNION SELECT execution_id FROM threads", 2),
    case(
        "union_all_intersect_except",
        "(SELECT execution_id FROM calls UNION ALL SELECT execution_id FROM errors) "
        "INTERSECT SELECT execution_id FROM threads EXCEPT SELECT execution_id FROM health "
        "WHERE metric = 'nope'",
        4,
    ),
    case(
        "union_then_order_and_limit",
        "SELECT execution_id FROM calls UNION ALL SELECT execution_id FROM threads "
        "ORDER BY execution_id DESC LIMIT 3",
        2,
    ),
    case(
        "parenthesised_branches_with_their_own_limits",
        "(SELECT call_id AS x FROM calls ORDER BY call_id LIMIT 2) UNION ALL "
        "(SELECT thread_id FROM threads ORDER BY thread_id DESC LIMIT 1)",
        2,
    ),
    case(
        "subquery_in_where",
        "SELECT call_id FROM calls WHERE execution_id IN "
        "(SELECT execution_id FROM threads WHERE status IS NOT NULL)",
        2,
    ),
    case(
        "subquery_in_from",
        "SELECT s.fqn, s.n FROM (SELECT fqn, count(*) AS n FROM calls_v1 GROUP BY fqn) AS s "
        "WHERE s.n > 1",
        1,
    ),
    case(
        "exists_correlated",
        "SELECT t.thread_id FROM threads t WHERE EXISTS "
        "(SELECT 1 FROM calls c WHERE c.execution_id = t.execution_id AND c.status = 'errored')",
        2,
    ),
    case(
        "scalar_subquery_in_select",
        "SELECT fqn, (SELECT count(*) FROM threads) AS thread_count FROM calls",
        2,
    ),
    case(
        "catalog_aliases",
        "SELECT r.fqn, p.depth FROM retained_calls r JOIN cct_population p "
        "ON p.execution_id = r.execution_id AND p.call_path_id = r.call_path_id",
        2,
        nonempty=False,
    ),
    case(
        "qualified_by_relation_name",
        "SELECT calls_v1.fqn, threads_v1.kind FROM calls_v1 JOIN threads_v1 "
        "ON calls_v1.execution_id = threads_v1.execution_id",
        2,
    ),
    case(
        "upper_case_identifiers",
        "SELECT FQN, COUNT(*) FROM CALLS_V1 GROUP BY Fqn",
        1,
    ),
    case("select_star", "SELECT * FROM health", 1),
    case(
        "select_star_over_a_join",
        "SELECT * FROM calls c JOIN threads t ON t.thread_id = c.thread_id",
        2,
    ),
    case(
        "same_output_name_from_two_tables",
        "SELECT c.execution_id, t.execution_id FROM calls c JOIN threads t "
        "ON t.thread_id = c.thread_id",
        2,
    ),
    case(
        "integer_division_truncates",
        "SELECT duration_ns / 7 AS q, duration_ns % 7 AS r, -7 / 2 AS neg FROM calls",
        1,
    ),
    case(
        "private_names_as_aliases",
        "SELECT s.args FROM (SELECT fqn AS args FROM calls) s WHERE s.args IS NOT NULL",
        1,
    ),
    case("star_of_alias", "SELECT h.* FROM health AS h WHERE h.value > 3", 1),
    case(
        "or_1_eq_1_cannot_widen",
        "SELECT execution_id, call_id FROM calls WHERE fqn = 'nope' OR 1 = 1",
        1,
    ),
    case(
        "other_scope_literal_in_union",
        "SELECT execution_id FROM calls WHERE execution_id = 'exec_B_P_E_g1_1' "
        "UNION ALL SELECT execution_id FROM threads WHERE execution_id LIKE 'exec_B%' OR true",
        2,
    ),
    case(
        "left_join_gives_nulls",
        "SELECT t.thread_id, c.call_id, c.duration_ns FROM threads t "
        "LEFT JOIN calls c ON c.thread_id = t.thread_id AND c.fqn = 'nope'",
        2,
    ),
    case(
        "right_and_full_joins",
        "SELECT count(*), count(c.call_id), count(t.thread_id) FROM calls c "
        "FULL OUTER JOIN threads t ON c.thread_id = t.thread_id",
        2,
    ),
    case(
        "cross_and_comma_joins",
        "SELECT (SELECT count(*) FROM calls CROSS JOIN health) AS crossed, count(*) AS comma "
        "FROM calls c, threads t WHERE c.execution_id = t.execution_id",
        4,
    ),
    case(
        "join_using",
        "SELECT e.error_id, c.call_id FROM errors e JOIN calls c USING (execution_id)",
        2,
    ),
    case(
        "every_public_relation",
        "SELECT 'threads' AS r, count(*) FROM threads_v1 UNION ALL "
        "SELECT 'call_path_stats', count(*) FROM call_path_stats_v1 UNION ALL "
        "SELECT 'calls', count(*) FROM calls_v1 UNION ALL SELECT 'errors', count(*) FROM errors_v1 "
        "UNION ALL SELECT 'function_definitions', count(*) FROM function_definitions_v1 "
        "UNION ALL SELECT 'health', count(*) FROM health_v1",
        6,
    ),
    case(
        "scalar_functions",
        "SELECT coalesce(fqn, '?') AS f, nullif(status, 'ok') AS s, greatest(started_ns, 3), "
        "least(started_ns, 3), abs(started_ns - 50), round(duration_ns / 7.0, 2), "
        "floor(duration_ns / 7.0), ceil(duration_ns / 7.0), lower(fqn), upper(fqn), length(fqn), "
        "char_length(call_id), substring(fqn FROM 2 FOR 3), substr(fqn, 2), trim(fqn), "
        "ltrim(fqn), rtrim(fqn), concat(fqn, '-', status, 1), fqn || '/' || call_id, "
        "starts_with(fqn, 'pkg.E'), ends_with(fqn, 'act') "
        "FROM calls",
        1,
    ),
    case(
        "time_functions",
        "SELECT date_trunc('hour', started_at) AS h, date_trunc('day', started_at) AS d, "
        "extract(year FROM started_at) AS y, extract(epoch FROM started_at) AS e, "
        "date_part('minute', started_at) AS m, to_timestamp(1700000000) AS t0, "
        "started_at + INTERVAL '1 hour' AS later, CAST(started_at AS DATE) AS day "
        "FROM calls WHERE started_at IS NOT NULL",
        1,
    ),
    case(
        "casts_and_predicates",
        "SELECT CAST(duration_ns AS BIGINT), CAST(function_id AS TEXT), "
        "duration_ns::double precision, "
        "try_cast(status AS BIGINT), CAST('2026-03-01 12:00:00' AS TIMESTAMP) AS ts, "
        "CASE WHEN duration_ns > 50 THEN 'slow' WHEN duration_ns IS NULL THEN 'unknown' "
        "ELSE 'fast' END AS speed, "
        "duration_ns BETWEEN 10 AND 90, status IN ('ok', 'errored'), fqn NOT LIKE '%Route', "
        "fqn ILIKE 'PKG.%', status IS DISTINCT FROM 'ok', (duration_ns % 7) * 2 - 1, -duration_ns "
        "FROM calls",
        1,
    ),
    case(
        "array_functions",
        "SELECT call_id, array_length(roles, 1), cardinality(selection_reasons), "
        "'input' = ANY(roles) AS has_input, array_contains(roles, 'input') AS has_input2 "
        "FROM calls WHERE 'input' = ANY(roles)",
        1,
    ),
    case(
        "more_aggregates",
        "SELECT fqn, any_value(fqn) AS same, stddev(duration_ns), stddev_pop(duration_ns), "
        "stddev_samp(duration_ns), variance(duration_ns), var_pop(duration_ns), "
        "bool_and(duration_ns > 5), "
        "bool_or(duration_ns > 90), cardinality(array_agg(call_id)) AS n, "
        "length(string_agg(call_id, ',')) AS chars "
        "FROM calls GROUP BY fqn",
        1,
    ),
    case(
        "approx_percentile",
        'SELECT "calls_v1"."fqn", approx_percentile_cont("calls_v1"."duration_ns", 0.5) '
        'FROM "calls_v1" GROUP BY "calls_v1"."fqn"',
        1,
    ),
    case(
        "comment_then_union",
        "SELECT count(*) FROM calls_v1 -- \nUNION SELECT count(*) FROM threads_v1",
        2,
    ),
    case(
        "limit_offset_fetch",
        "SELECT call_id FROM calls ORDER BY call_id OFFSET 3 ROWS FETCH FIRST 4 ROWS ONLY",
        1,
    ),
    case(
        "empty_aggregate_is_null",
        "SELECT count(*) AS n, sum(duration_ns) AS s, max(fqn) AS m FROM calls WHERE fqn = 'nope'",
        1,
    ),
]


@pytest.fixture(scope="module")
def facts(chdb_dsn: str) -> Iterator[Facts]:
    yield from build_facts(chdb_dsn)


@pytest.mark.parametrize("query", ACCEPTED)
def test_one_scope_predicate_per_relation_reference(query: Case) -> None:
    compiled = Facts("chdb://unused", "db", "oracle").compile(query.sql, query.params)
    assert compiled.sql.count(SCOPE_MARK) == query.refs, compiled.sql
    assert compiled.sql.count("generation = 'g1'") == query.refs
    assert assert_every_table_is_scoped(compiled.sql) == query.refs
    assert compiled.parameters_bound == len(query.params)
    assert compiled.settings["join_use_nulls"] == 1


@pytest.mark.parametrize("query", ACCEPTED)
def test_runs_on_clickhouse_with_only_scope_rows(facts: Facts, query: Case) -> None:
    compiled = facts.compile(query.sql, query.params)
    rows = facts.run(compiled)
    expected = facts.run_oracle(query.sql, query.params)
    assert normalise(rows) == normalise(expected)
    if query.nonempty:
        assert rows, "the corpus query should find rows in scope"
    for row in rows:
        for cell in row:
            assert not any(tag in str(cell) for tag in OTHER_TAGS), row


def test_or_true_returns_exactly_the_scope_rows(facts: Facts) -> None:
    compiled = facts.compile("SELECT execution_id FROM calls WHERE fqn = 'nope' OR 1 = 1")
    rows = facts.run(compiled)
    assert len(rows) == 40
    assert {r[0].split("_")[1:5] == list(SCOPE) for r in rows} == {True}
    # the predicate lives inside the derived table, so the caller's OR sits outside it
    assert compiled.sql.index(SCOPE_MARK) < compiled.sql.index("'nope'")


def test_quantiles_are_exact(facts: Facts) -> None:
    values = sorted(
        v
        for (v,) in facts.client()
        .query(f"SELECT duration_ns FROM {facts.oracle}.calls_v1")
        .result_rows
        if v is not None
    )
    compiled = facts.compile(
        "SELECT percentile_cont(0.25) WITHIN GROUP (ORDER BY duration_ns), "
        "percentile_cont(0.25) WITHIN GROUP (ORDER BY duration_ns DESC), "
        "percentile_disc(0.3) WITHIN GROUP (ORDER BY duration_ns), "
        "percentile_disc(0.3) WITHIN GROUP (ORDER BY duration_ns DESC), "
        "percentile_disc(0) WITHIN GROUP (ORDER BY duration_ns) FROM calls"
    )
    ((cont, cont_desc, disc, disc_desc, disc0),) = facts.run(compiled)
    assert cont == pytest.approx(_percentile_cont(values, 0.25))
    assert cont_desc == pytest.approx(_percentile_cont(values, 0.75))
    assert disc == _percentile_disc(values, 0.3)
    assert disc_desc == _percentile_disc(values[::-1], 0.3)
    assert disc0 == values[0]


def _percentile_cont(values: list[int], p: float) -> float:
    """PostgreSQL's percentile_cont: linear interpolation between closest ranks."""
    position = p * (len(values) - 1)
    low = int(position)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (position - low)


def _percentile_disc(values: list[int], p: float) -> int:
    """PostgreSQL's percentile_disc: the first value whose cumulative share reaches p."""
    import math

    return values[max(1, math.ceil(p * len(values))) - 1]


def test_empty_aggregates_are_sql_nulls(facts: Facts) -> None:
    compiled = facts.compile(
        "SELECT count(*), sum(duration_ns), avg(duration_ns), max(fqn), "
        "percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ns), "
        "percentile_disc(0.5) WITHIN GROUP (ORDER BY duration_ns) FROM calls WHERE fqn = 'nope'"
    )
    assert facts.run(compiled) == [(0, None, None, None, None, None)]


def test_outer_join_gives_sql_nulls(facts: Facts) -> None:
    compiled = facts.compile(
        "SELECT t.thread_id, c.call_id, c.duration_ns FROM threads t "
        "LEFT JOIN calls c ON c.thread_id = t.thread_id AND c.fqn = 'nope'"
    )
    rows = facts.run(compiled)
    assert rows and all(r[1] is None and r[2] is None for r in rows)


def test_output_columns_keep_the_callers_names(facts: Facts) -> None:
    compiled = facts.compile(
        'SELECT fqn, count(*), count(1) AS "count(*) as written", sum(c.duration_ns), '
        "c.call_id AS id FROM calls c GROUP BY fqn, c.call_id LIMIT 1"
    )
    assert facts.columns(compiled) == (
        "fqn",
        "count(*)",
        "count(*) as written",
        "sum(c.duration_ns)",
        "id",
    )


SHADOWING = [
    "SELECT 'B' AS tenant_id, 'g2' AS generation, 'P2' AS project_id, 'E2' AS environment_id, "
    "execution_id FROM calls",
    "SELECT tenant_id.execution_id FROM calls AS tenant_id",
    "SELECT generation.execution_id FROM calls AS generation WHERE generation.fqn = 'x' OR true",
    'SELECT "{db}".execution_id FROM calls AS "{db}"',
    'WITH "{db}" AS (SELECT execution_id FROM threads) SELECT x.execution_id FROM "{db}" x',
    "WITH tenant_id AS (SELECT execution_id FROM threads) SELECT execution_id FROM tenant_id",
    "SELECT count(*) AS tenant_id FROM calls GROUP BY fqn",
    "SELECT t.execution_id FROM (SELECT 'B' AS tenant_id, execution_id FROM calls) t "
    "WHERE t.tenant_id = 'B'",
]


@pytest.mark.parametrize("template", SHADOWING)
def test_names_of_scope_columns_and_databases_cannot_shadow_the_scope(
    facts: Facts, template: str
) -> None:
    """Aliases, table aliases and CTE names equal to a scope column or to the fact database
    leave the scope predicate inside the derived table untouched."""
    sql = template.format(db=facts.mixed)
    rows = facts.run(facts.compile(sql))
    assert rows
    assert normalise(rows) == normalise(facts.run_oracle(sql))
    assert all(not any(tag in str(cell) for tag in OTHER_TAGS) for row in rows for cell in row)


def test_duplicate_output_names_get_a_suffix(facts: Facts) -> None:
    compiled = facts.compile(
        "SELECT c.execution_id, t.execution_id, c.fqn, c.fqn FROM calls c "
        "JOIN threads t ON t.thread_id = c.thread_id LIMIT 1"
    )
    assert facts.columns(compiled) == ("execution_id", "execution_id_2", "fqn", "fqn")


def test_integer_division_follows_postgresql(facts: Facts) -> None:
    compiled = facts.compile("SELECT 7 / 2, -7 / 2, 7.0 / 2, 7 % 3 FROM calls LIMIT 1")
    assert facts.run(compiled) == [(3, -3, 3.5, 1)]


@pytest.mark.parametrize(
    "value",
    [
        "x' OR '1'='1",
        "a\\",
        "\\' OR 1=1 --",
        "it''s",
        "exec_A_P_E_g1_1' UNION SELECT 1 --",
        "\x00\n",
    ],
)
def test_string_parameters_bind_as_one_literal(facts: Facts, value: str) -> None:
    compiled = facts.compile(
        "SELECT $1 AS echoed, count(*) AS n FROM calls WHERE execution_id = $1",
        [QueryParameter("string", value)],
    )
    assert facts.run(compiled) == [(value, 0)]


def test_typed_parameters_bind(facts: Facts) -> None:
    compiled = facts.compile(
        "SELECT $1 AS i, $2 AS u, $3 AS f, $4 AS b, $5 AS n, $6 AS t, $7 AS typed_null "
        "FROM calls LIMIT $8",
        [
            QueryParameter("int64", -(2**63)),
            QueryParameter("uint64", 2**64 - 1),
            QueryParameter("float64", 0.1),
            QueryParameter("boolean", True),
            QueryParameter("null", None),
            QueryParameter("timestamp", "2026-03-01T14:00:00.123456789+02:00"),
            QueryParameter("int64", None),
            QueryParameter("integer", 1),
        ],
    )
    ((i, u, f, b, n, t, typed_null),) = facts.run(compiled)
    assert (i, u, f, b, n, typed_null) == (-(2**63), 2**64 - 1, 0.1, True, None, None)
    assert t.isoformat().startswith("2026-03-01T12:00:00.123456")


def test_one_execution_by_parameter_finds_only_that_execution(facts: Facts) -> None:
    compiled = facts.compile(
        "SELECT DISTINCT execution_id FROM calls WHERE execution_id = $1",
        [QueryParameter("string", EXEC)],
    )
    assert facts.run(compiled) == [(EXEC,)]
    other = facts.compile(
        "SELECT DISTINCT execution_id FROM calls WHERE execution_id = $1",
        [QueryParameter("string", "exec_B_P_E_g1_1")],
    )
    assert facts.run(other) == []


CAST_SOURCES = {
    "text": "fqn",
    "varchar(20)": "fqn",
    "char": "fqn",
    "bigint": "function_id",
    "integer": "function_id",
    "smallint": "function_id",
    "double precision": "duration_ns",
    "real": "duration_ns",
    "numeric(20, 2)": "duration_ns",
    "numeric": "duration_ns",
    "boolean": "duration_ns > 5",
    "timestamp": "started_at",
    "timestamptz": "started_at",
    "date": "started_at",
}


def test_every_cast_type_runs_on_clickhouse(facts: Facts) -> None:
    from baml_studio.control.resident_rules import CAST_TYPES

    casts = [f"CAST({source} AS {target})" for target, source in CAST_SOURCES.items()]
    tries = [f"try_cast(fqn AS {target})" for target in CAST_SOURCES]
    compiled = facts.compile(f"SELECT {', '.join(casts + tries)} FROM calls")
    rows = facts.run(compiled)
    assert len(rows) == 40
    covered = {
        t.this
        for t in (sqlglot.parse_one(f"CAST(x AS {n})", dialect="postgres").to for n in CAST_SOURCES)
    }
    assert covered == CAST_TYPES


def test_every_time_unit_runs_on_clickhouse(facts: Facts) -> None:
    from baml_studio.control.resident_rules import EXTRACT_UNITS, INTERVAL_UNITS, TRUNC_UNITS

    parts = [f"extract({u} FROM started_at)" for u in sorted(EXTRACT_UNITS)]
    parts += [f"date_part('{u.lower()}', started_at)" for u in sorted(EXTRACT_UNITS)]
    parts += [f"date_trunc('{u.lower()}', started_at)" for u in sorted(TRUNC_UNITS)]
    parts += [f"started_at - INTERVAL '2' {u}" for u in sorted(INTERVAL_UNITS)]
    compiled = facts.compile(f"SELECT {', '.join(parts)} FROM calls WHERE started_at IS NOT NULL")
    rows = facts.run(compiled)
    assert rows and all(len(row) == len(parts) for row in rows)
    truncated = facts.run(
        facts.compile(
            "SELECT date_trunc('month', started_at), date_trunc('quarter', started_at), "
            "extract(month FROM started_at), extract(day FROM started_at) "
            "FROM calls WHERE started_at IS NOT NULL LIMIT 1"
        )
    )
    month, quarter, month_number, day = truncated[0]
    assert (month.month, month.day, quarter.month, month_number, day) == (3, 1, 1, 3, 1)
