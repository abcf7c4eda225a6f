"""Rejected resident queries: each is refused with a 400 and its stable code, before any SQL
reaches ClickHouse, and the message names the offending thing."""

from __future__ import annotations

import pytest

from baml_studio.apierrors import BadRequest
from baml_studio.control.resident import QueryParameter, compile_resident
from baml_studio.control.resident_errors import ERROR_CODES, ResidentQueryError


def relation_sql(name: str) -> str:
    return f"SELECT * FROM db.{name} WHERE tenant_id = 'A'"


def reject(sql: str, code: str, named: str = "", *params: QueryParameter) -> object:
    return pytest.param(sql, code, named, params, id=f"{code}:{sql[:60]}")


STATEMENTS = "statement_not_allowed"
RELATION = "relation_not_allowed"
TABLE_FUNCTION = "table_function_not_allowed"
COLUMN = "column_not_allowed"
FUNCTION = "function_not_allowed"
CONSTRUCT = "construct_not_allowed"
PARSE = "sql_parse_error"
PARAMETER = "invalid_parameter"

REJECTED = [
    # DDL, DML and every other non-query statement
    reject("INSERT INTO calls_v1 VALUES (1)", STATEMENTS, "INSERT"),
    reject("INSERT INTO calls_v1 SELECT * FROM calls_v1", STATEMENTS, "INSERT"),
    reject("UPDATE calls SET fqn = 'x'", STATEMENTS, "UPDATE"),
    reject("DELETE FROM calls", STATEMENTS, "DELETE"),
    reject("CREATE TABLE x (a int)", STATEMENTS, "CREATE"),
    reject("CREATE VIEW v AS SELECT fqn FROM calls", STATEMENTS, "CREATE"),
    reject("CREATE FUNCTION f() RETURNS int AS 'select 1' LANGUAGE sql", STATEMENTS, "CREATE"),
    reject("DROP TABLE calls_v1", STATEMENTS, "DROP"),
    reject("ALTER TABLE calls ADD COLUMN x int", STATEMENTS, "ALTER"),
    reject("TRUNCATE calls", STATEMENTS, "TRUNCATE"),
    reject("GRANT SELECT ON calls TO x", STATEMENTS, "GRANT"),
    reject("REVOKE ALL ON calls FROM x", STATEMENTS, "REVOKE"),
    reject("SET max_threads = 1", STATEMENTS, "SET"),
    reject("SET readonly = 0", STATEMENTS, "SET"),
    reject("COPY calls TO '/tmp/x'", STATEMENTS, "COPY"),
    reject("EXPLAIN SELECT fqn FROM calls", STATEMENTS, "EXPLAIN"),
    reject("MERGE INTO calls USING threads ON true WHEN MATCHED THEN DELETE", STATEMENTS),
    reject("SHOW TABLES", STATEMENTS, "SHOW"),
    reject("DESCRIBE calls", STATEMENTS, "DESCRIBE"),
    reject("USE db", STATEMENTS, "USE"),
    reject("ATTACH TABLE x", STATEMENTS, "ATTACH"),
    reject("DETACH TABLE calls_v1", STATEMENTS, "DETACH"),
    reject("OPTIMIZE TABLE calls FINAL", STATEMENTS, "OPTIMIZE"),
    reject("KILL QUERY WHERE 1", STATEMENTS, "KILL"),
    reject("SYSTEM FLUSH LOGS", STATEMENTS, "SYSTEM"),
    reject("VACUUM", STATEMENTS),
    reject("BEGIN", STATEMENTS),
    reject("VALUES (1)", STATEMENTS, "VALUES"),
    reject("CALL proc()", STATEMENTS),
    reject("SELECT * INTO stolen FROM calls", STATEMENTS, "INTO"),
    reject("SELECT * FROM calls FOR UPDATE", STATEMENTS, "FOR UPDATE"),
    reject("SELECT * FROM calls FOR SHARE", STATEMENTS, "FOR UPDATE"),
    reject("WITH x AS (DELETE FROM calls RETURNING *) SELECT * FROM x", STATEMENTS),
    reject("WITH x AS (INSERT INTO calls VALUES (1) RETURNING *) SELECT * FROM x", STATEMENTS),
    # more than one statement, however it is hidden
    reject("SELECT 1; DROP TABLE x", STATEMENTS, "2"),
    reject("SELECT count(*) FROM calls; SELECT count(*) FROM threads", STATEMENTS, "2"),
    reject("SELECT count(*) FROM calls_v1 /* */ ; DROP TABLE x", STATEMENTS),
    reject("SELECT 1 FROM calls -- comment\n; SYSTEM FLUSH LOGS", STATEMENTS),
    reject("", PARSE),
    reject(" ; ; ", PARSE),
    # ClickHouse-only suffixes and comment tricks
    reject("SELECT 1 FROM calls_v1 SETTINGS max_threads=100", PARSE),
    reject("SELECT 1 FROM calls_v1 SETTINGS readonly = 0", PARSE),
    reject("SELECT 1 FROM calls_v1 FORMAT Native", PARSE),
    reject("SELECT 1 FROM calls_v1 INTO OUTFILE '/tmp/x'", PARSE),
    reject("SELECT * FROM calls_v1 PREWHERE fqn = 'x'", PARSE),
    reject("SELECT fqn FROM calls_v1 LIMIT 1 BY fqn", CONSTRUCT),
    reject("SELECT count(*) FROM calls_v1 -- \nUNION SELECT count(*) FROM system.tables", RELATION),
    reject("SELECT count(*) FROM calls_v1 /* x */ UNION SELECT name FROM system.tables", RELATION),
    # system tables, qualified names, internal and unknown relations
    reject("SELECT * FROM system.tables", RELATION, "system.tables"),
    reject("SELECT * FROM system.one", RELATION, "system.one"),
    reject("SELECT * FROM information_schema.tables", RELATION, "information_schema"),
    reject("SELECT * FROM pg_catalog.pg_class", RELATION, "pg_catalog"),
    reject("SELECT fqn FROM db.calls_v1", RELATION, "db.calls_v1"),
    reject("SELECT fqn FROM default.calls_v1", RELATION),
    reject("SELECT fqn FROM public.calls_v1", RELATION),
    reject("SELECT fqn FROM baml.public.calls_v1", RELATION),
    reject('SELECT fqn FROM "db"."calls_v1"', RELATION),
    reject("SELECT * FROM processes_v1", RELATION, "internal"),
    reject("SELECT * FROM processes", RELATION, "internal"),
    reject("SELECT * FROM store_files_v1", RELATION, "internal"),
    reject("SELECT path FROM value_index_v1", RELATION, "internal"),
    reject("SELECT * FROM projection_batches", RELATION, "projection_batches"),
    reject("SELECT * FROM hot_call_paths", RELATION, "hot_call_paths"),
    reject('SELECT * FROM "CALLS_V1"', RELATION, "CALLS_V1"),
    reject("SELECT c.fqn FROM calls c JOIN tenants t ON true", RELATION, "tenants"),
    reject("SELECT * FROM calls_v1 ARRAY JOIN roles", RELATION, "roles"),
    # CTE visibility and shadowing
    reject("WITH calls_v1 AS (SELECT 1 AS fqn) SELECT fqn FROM calls_v1", RELATION, "calls_v1"),
    reject("WITH calls AS (SELECT fqn FROM calls_v1) SELECT fqn FROM calls", RELATION, "calls"),
    reject('WITH "CALLS" AS (SELECT fqn FROM calls_v1) SELECT fqn FROM "CALLS"', RELATION),
    reject("WITH retained_calls AS (SELECT 1 AS a) SELECT a FROM retained_calls", RELATION),
    reject("WITH processes AS (SELECT 1 AS a) SELECT a FROM processes", RELATION),
    reject(
        "WITH b AS (SELECT execution_id FROM c), c AS (SELECT execution_id FROM calls) "
        "SELECT execution_id FROM b",
        RELATION,
        "'c'",
    ),
    reject(
        "SELECT s.a FROM (WITH projection_batches AS (SELECT fqn AS a FROM calls) "
        "SELECT a FROM projection_batches) s JOIN projection_batches p ON true",
        RELATION,
        "projection_batches",
    ),
    reject(
        "SELECT x.a FROM (WITH b AS (SELECT fqn AS a FROM calls) SELECT a FROM b) x, b",
        RELATION,
        "'b'",
    ),
    reject("WITH RECURSIVE r AS (SELECT 1 AS a) SELECT a FROM r", CONSTRUCT, "RECURSIVE"),
    # private columns, wherever they hide
    reject("SELECT args FROM calls", COLUMN, "private"),
    reject("SELECT output FROM calls_v1", COLUMN, "private"),
    reject("SELECT error FROM calls", COLUMN, "private"),
    reject("SELECT call_site_file FROM calls", COLUMN, "private"),
    reject("SELECT call_site_line FROM call_path_stats", COLUMN, "private"),
    reject("SELECT call_site_start FROM calls", COLUMN, "private"),
    reject("SELECT spawn_site_file FROM threads", COLUMN, "private"),
    reject("SELECT throw_site_file FROM errors", COLUMN, "private"),
    reject("SELECT value FROM errors", COLUMN, "private"),
    reject("SELECT source_file FROM function_definitions", COLUMN, "private"),
    reject("SELECT source_start FROM function_definitions_v1", COLUMN, "private"),
    reject("SELECT name FROM threads", COLUMN, "private"),
    reject('SELECT c."args" FROM calls c', COLUMN, "private"),
    reject("SELECT calls.args FROM calls", COLUMN, "private"),
    reject("SELECT count(args) FROM calls", COLUMN, "private"),
    reject("SELECT count(*) FROM calls WHERE args IS NOT NULL", COLUMN, "args"),
    reject("SELECT fqn FROM calls ORDER BY call_site_line", COLUMN, "call_site_line"),
    reject("SELECT count(*) FROM threads GROUP BY name", COLUMN, "name"),
    reject("SELECT fqn FROM calls GROUP BY fqn HAVING max(output) IS NULL", COLUMN, "output"),
    reject("SELECT 1 FROM calls c JOIN threads t ON t.name = c.fqn", COLUMN, "name"),
    reject("SELECT 1 FROM calls c JOIN threads t USING (name)", COLUMN, "name"),
    reject(
        "SELECT row_number() OVER (PARTITION BY source_file ORDER BY fqn) "
        "FROM function_definitions",
        COLUMN,
        "source_file",
    ),
    reject("WITH x AS (SELECT output FROM calls) SELECT 1 FROM x", COLUMN, "output"),
    reject("SELECT (SELECT max(error) FROM calls) FROM threads", COLUMN, "error"),
    reject(
        "SELECT fqn FROM calls WHERE EXISTS "
        "(SELECT 1 FROM threads t WHERE t.spawn_site_file = 'x')",
        COLUMN,
        "spawn_site_file",
    ),
    reject("SELECT x.args FROM (SELECT * FROM calls) x", COLUMN, "args"),
    reject("SELECT fqn FROM calls WHERE fqn IN (SELECT throw_site_file FROM errors)", COLUMN),
    # scope and storage columns, unknown and misplaced names
    reject("SELECT tenant_id FROM calls", COLUMN, "tenant_id"),
    reject("SELECT fqn FROM calls WHERE generation = 'g2'", COLUMN, "generation"),
    reject("SELECT project_id, environment_id FROM threads", COLUMN),
    reject("SELECT _batch_id FROM calls", COLUMN, "_batch_id"),
    reject("SELECT c._row FROM calls c", COLUMN, "_row"),
    reject("SELECT _part FROM calls", COLUMN, "_part"),
    reject("SELECT nope FROM calls", COLUMN, "nope"),
    reject("SELECT fqn FROM calls ORDER BY nope", COLUMN, "nope"),
    reject("SELECT calls_v1.fqn FROM calls", COLUMN, "calls_v1"),
    reject('SELECT "FQN" FROM calls', COLUMN, "FQN"),
    reject("SELECT execution_id FROM calls c JOIN threads t ON true", COLUMN, "execution_id"),
    reject("SELECT u.status FROM (SELECT fqn AS a FROM calls) u", COLUMN, "status"),
    # table functions, LATERAL, VALUES
    reject("SELECT * FROM numbers(10)", TABLE_FUNCTION, "NUMBERS"),
    reject("SELECT * FROM url('http://x', CSV)", TABLE_FUNCTION, "URL"),
    reject("SELECT * FROM file('/etc/passwd')", TABLE_FUNCTION, "file"),
    reject("SELECT * FROM remote('h', db.t)", TABLE_FUNCTION, "REMOTE"),
    reject("SELECT * FROM s3('http://x')", TABLE_FUNCTION, "S3"),
    reject("SELECT * FROM input('a String')", TABLE_FUNCTION, "INPUT"),
    reject("SELECT * FROM generate_series(1, 3)", TABLE_FUNCTION),
    reject("SELECT * FROM calls, generate_series(1, 3)", TABLE_FUNCTION),
    reject("SELECT * FROM unnest(ARRAY[1])", TABLE_FUNCTION),
    reject("SELECT 1 FROM calls c CROSS JOIN LATERAL unnest(c.roles)", TABLE_FUNCTION),
    reject("SELECT * FROM calls, LATERAL (SELECT 1) x", TABLE_FUNCTION),
    reject("SELECT * FROM (VALUES (1)) v(a)", TABLE_FUNCTION),
    reject("SELECT fqn FROM calls WHERE fqn IN (VALUES ('a'))", TABLE_FUNCTION),
    # functions outside the allowlist, dangerous ones first
    reject("SELECT sleep(1) FROM calls", FUNCTION, "sleep"),
    reject("SELECT dictGet('d', 'a', 1) FROM calls", FUNCTION, "dictGet"),
    reject("SELECT throwIf(1) FROM calls", FUNCTION, "throwIf"),
    reject("SELECT currentUser() FROM calls", FUNCTION, "currentUser"),
    reject("SELECT getSetting('readonly') FROM calls", FUNCTION, "getSetting"),
    reject("SELECT url('http://x') FROM calls", FUNCTION, "url"),
    reject("SELECT s3('x') FROM calls", FUNCTION, "s3"),
    reject("SELECT remote('h') FROM calls", FUNCTION, "remote"),
    reject("SELECT input('a String') FROM calls", FUNCTION, "input"),
    reject("SELECT system.f(1) FROM calls", FUNCTION, "system.f"),
    reject("SELECT pg_sleep(1) FROM calls", FUNCTION, "pg_sleep"),
    reject("SELECT now() FROM calls", FUNCTION),
    reject("SELECT random() FROM calls", FUNCTION),
    reject("SELECT version() FROM calls", FUNCTION, "version"),
    reject("SELECT md5(fqn) FROM calls", FUNCTION, "md5"),
    reject("SELECT toString(fqn) FROM calls", FUNCTION, "toString"),
    reject("SELECT hasAny(roles, roles) FROM calls", FUNCTION, "hasAny"),
    reject("SELECT fqn FROM calls WHERE fqn ~ 'a'", FUNCTION, "regexp"),
    reject("SELECT json_extract(fqn, 'a') FROM calls", FUNCTION),
    reject("SELECT ROW(1, 2) FROM calls", FUNCTION, "ROW"),
    reject("SELECT row_number() FROM calls", FUNCTION, "OVER"),
    reject("SELECT percentile_cont(0.5) FROM calls", FUNCTION, "WITHIN GROUP"),
    reject(
        "SELECT percentile_cont(1.5) WITHIN GROUP (ORDER BY duration_ns) FROM calls",
        FUNCTION,
        "1.5",
    ),
    reject("SELECT percentile_cont(fqn) WITHIN GROUP (ORDER BY duration_ns) FROM calls", FUNCTION),
    reject("SELECT quantile(0.5)(duration_ns) FROM calls", PARSE),
    # syntax outside the allowlist
    reject("SELECT count(*) FILTER (WHERE true) FROM calls", CONSTRUCT, "FILTER"),
    reject("SELECT string_agg(fqn, ',' ORDER BY fqn) FROM calls", CONSTRUCT, "ORDER BY"),
    reject("SELECT * FROM calls TABLESAMPLE SYSTEM (10)", CONSTRUCT, "TABLESAMPLE"),
    reject("SELECT DISTINCT ON (fqn) fqn FROM calls", CONSTRUCT, "DISTINCT ON"),
    reject("SELECT fqn FROM calls NATURAL JOIN threads", CONSTRUCT, "NATURAL"),
    reject("SELECT fqn FROM calls GROUP BY ROLLUP (fqn)", CONSTRUCT),
    reject("SELECT * FROM ONLY calls", CONSTRUCT, "ONLY"),
    reject("SELECT * FROM calls AS c(a, b)", CONSTRUCT),
    reject("SELECT fqn::regclass FROM calls", CONSTRUCT, "REGCLASS"),
    reject("SELECT CAST(fqn AS text[]) FROM calls", CONSTRUCT),
    reject("SELECT roles[1:2] FROM calls", CONSTRUCT),
    reject("SELECT ARRAY(SELECT 1) FROM calls", CONSTRUCT),
    reject("SELECT 1 > ANY(roles) FROM calls", CONSTRUCT),
    reject("SELECT fqn FROM calls WHERE fqn SIMILAR TO 'a'", CONSTRUCT),
    reject("SELECT date_trunc('decade', started_at) FROM calls", CONSTRUCT, "DECADE"),
    reject("SELECT date_trunc($1, started_at) FROM calls", CONSTRUCT),
    reject("SELECT extract(dow FROM started_at) FROM calls", CONSTRUCT, "DOW"),
    reject("SELECT started_at + INTERVAL '1 day 2 hours' FROM calls", CONSTRUCT),
    reject("SELECT started_at + INTERVAL 'x' HOUR FROM calls", CONSTRUCT),
    reject("SELECT U&'\\' FROM calls", CONSTRUCT, "UnicodeString"),
    reject("SELECT $$x'y$$ FROM calls", CONSTRUCT),
    reject("SELECT E'a\\\\' FROM calls", CONSTRUCT),
    reject("SELECT X'ff' FROM calls", CONSTRUCT),
    reject('SELECT fqn AS "a\\" FROM calls', CONSTRUCT, "backslash"),
    reject('SELECT fqn AS "a\nb" FROM calls', CONSTRUCT),
    reject("WITH __resident_cte_1 AS (SELECT fqn FROM calls) SELECT 1", CONSTRUCT, "reserved"),
    reject("SELECT fqn AS __Resident_x FROM calls", CONSTRUCT, "reserved"),
    # parse errors
    reject("SELEC 1", PARSE),
    reject("SELECT (", PARSE),
    reject("SELECT 'unterminated", PARSE),
    reject("SELECT", PARSE),
    reject("SELECT fqn FROM calls WHERE fqn GLOBAL IN ('a')", PARSE),
    # parameters
    reject("SELECT fqn FROM calls WHERE execution_id = $1", PARAMETER, "$1"),
    reject(
        "SELECT fqn FROM calls WHERE execution_id = $2",
        PARAMETER,
        "$2",
        QueryParameter("string", "x"),
    ),
    reject("SELECT fqn FROM calls", PARAMETER, "never used", QueryParameter("string", "x")),
    reject("SELECT fqn FROM calls WHERE execution_id = $0", PARAMETER, "$0"),
    reject("SELECT fqn FROM calls WHERE execution_id = $" + "9" * 21, PARAMETER, "$999"),
    reject("SELECT fqn FROM calls WHERE execution_id = $" + "9" * 5000, PARAMETER, "$999"),
    reject("SELECT fqn FROM calls WHERE execution_id = :id", PARAMETER),
    reject("SELECT fqn FROM calls WHERE execution_id = ? OR call_id = $1", PARAMETER, "mixes"),
    reject("SELECT $1 FROM calls", PARAMETER, "blob", QueryParameter("blob", "x")),
    reject("SELECT $1 FROM calls", PARAMETER, "int64", QueryParameter("int64", "12x")),
    reject("SELECT $1 FROM calls", PARAMETER, "int64", QueryParameter("int64", 2**63)),
    reject("SELECT $1 FROM calls", PARAMETER, "int64", QueryParameter("int64", True)),
    reject("SELECT $1 FROM calls", PARAMETER, "uint64", QueryParameter("uint64", -1)),
    reject("SELECT $1 FROM calls", PARAMETER, "float64", QueryParameter("float64", "1.5")),
    reject("SELECT $1 FROM calls", PARAMETER, "finite", QueryParameter("double", float("nan"))),
    reject("SELECT $1 FROM calls", PARAMETER, "bool", QueryParameter("bool", 1)),
    reject("SELECT $1 FROM calls", PARAMETER, "string", QueryParameter("string", 5)),
    reject(
        "SELECT $1 FROM calls", PARAMETER, "timestamp", QueryParameter("timestamp", "yesterday")
    ),
    reject(
        "SELECT $1 FROM calls",
        PARAMETER,
        "timestamp",
        QueryParameter("timestamp", "2026-02-30T00:00:00Z"),
    ),
    reject(
        "SELECT $1 FROM calls",
        PARAMETER,
        "timestamp",
        QueryParameter("timestamp", "1800-01-01T00:00:00Z"),
    ),
    reject("SELECT $1 FROM calls", PARAMETER, "null", QueryParameter("null", "x")),
    reject(
        "SELECT percentile_cont($1) WITHIN GROUP (ORDER BY duration_ns) FROM calls",
        FUNCTION,
        "fraction",
        QueryParameter("float64", 2.0),
    ),
]


@pytest.mark.parametrize(("sql", "code", "named", "params"), REJECTED)
def test_rejected_with_code(
    sql: str, code: str, named: str, params: tuple[QueryParameter, ...]
) -> None:
    with pytest.raises(ResidentQueryError) as caught:
        compile_resident(sql, list(params), relation_sql=relation_sql)
    error = caught.value
    assert error.code == code, error.message
    assert isinstance(error, BadRequest) and error.status == 400
    assert error.code in ERROR_CODES
    assert named in error.message


def test_private_column_message_says_it_stays_in_the_data_plane() -> None:
    with pytest.raises(ResidentQueryError) as caught:
        compile_resident("SELECT c.args FROM calls c", [], relation_sql=relation_sql)
    assert caught.value.details["relation"] == "calls_v1"
    assert "data plane" in caught.value.message
    assert "fqn" in caught.value.details["allowed"]


def test_function_message_lists_the_allowlist() -> None:
    with pytest.raises(ResidentQueryError) as caught:
        compile_resident("SELECT sleep(3) FROM calls", [], relation_sql=relation_sql)
    assert caught.value.details["function"] == "sleep"
    assert "percentile_cont(p) WITHIN GROUP (ORDER BY x)" in caught.value.details["allowed"]


def test_sql_over_the_limit_is_refused_before_parsing() -> None:
    sql = "SELECT fqn FROM calls WHERE " + " OR ".join(["fqn = 'x'"] * 7000)
    with pytest.raises(ResidentQueryError) as caught:
        compile_resident(sql, [], relation_sql=relation_sql)
    assert caught.value.code == "sql_too_long"
    assert caught.value.details == {"bytes": len(sql), "limit": 64 * 1024}
    with pytest.raises(ResidentQueryError) as small:
        compile_resident("SELECT fqn FROM calls", [], relation_sql=relation_sql, max_sql_bytes=10)
    assert small.value.code == "sql_too_long"


def test_multibyte_sql_is_measured_in_bytes() -> None:
    sql = "SELECT fqn FROM calls WHERE fqn = '" + "é" * 40 + "'"
    compile_resident(sql, [], relation_sql=relation_sql, max_sql_bytes=len(sql.encode()))
    with pytest.raises(ResidentQueryError):
        compile_resident(sql, [], relation_sql=relation_sql, max_sql_bytes=len(sql))


def test_deep_nesting_is_a_parse_error_not_a_crash() -> None:
    sql = "SELECT " + "(" * 3000 + "1" + ")" * 3000 + " FROM calls"
    with pytest.raises(ResidentQueryError) as caught:
        compile_resident(sql, [], relation_sql=relation_sql)
    assert caught.value.code == "sql_parse_error"
