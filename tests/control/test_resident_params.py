"""Parameter binding and budget settings of the resident compiler (no ClickHouse needed)."""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from baml_studio.control.resident import (
    QueryParameter,
    ResidentBudget,
    budget_settings,
    compile_resident,
)
from baml_studio.control.resident_params import number_question_marks


def relation_sql(name: str) -> str:
    return f"SELECT * FROM db.{name} WHERE tenant_id = 'A'"


def compiled_sql(sql: str, *parameters: QueryParameter) -> str:
    return compile_resident(sql, list(parameters), relation_sql=relation_sql).sql


def test_question_marks_in_strings_identifiers_and_comments_are_not_placeholders() -> None:
    sql = "SELECT '?', \"?\" FROM calls /* ? */ WHERE fqn = ? -- ?\n AND kind = ?"
    tokens = sqlglot.Dialect.get_or_raise("postgres").tokenize(sql)
    assert number_question_marks(sql, tokens) == (
        "SELECT '?', \"?\" FROM calls /* ? */ WHERE fqn = $1 -- ?\n AND kind = $2"
    )


def test_a_parameter_value_is_never_reparsed_as_sql_or_as_a_placeholder() -> None:
    sql = compiled_sql(
        "SELECT fqn FROM calls WHERE fqn = $1 AND kind = $2",
        QueryParameter("string", "$2' OR '1'='1"),
        QueryParameter("string", "?"),
    )
    assert "'$2'' OR ''1''=''1'" in sql
    tree = sqlglot.parse_one(sql, dialect="clickhouse")
    literals = [lit.this for lit in tree.find_all(exp.Literal) if lit.is_string]
    assert "$2' OR '1'='1" in literals and "?" in literals


def test_one_parameter_may_be_used_many_times() -> None:
    compiled = compile_resident(
        "SELECT fqn FROM calls WHERE fqn = $1 OR kind = $1",
        [QueryParameter("string", "x")],
        relation_sql=relation_sql,
    )
    assert compiled.parameters_bound == 1
    assert compiled.sql.count("'x'") == 2


def test_parameter_literals_are_typed() -> None:
    sql = compiled_sql(
        "SELECT $1, $2, $3, $4, $5, $6, $7 FROM calls",
        QueryParameter("INT64", 5),
        QueryParameter("uint64", "18446744073709551615"),
        QueryParameter("double", 2),
        QueryParameter("bool", False),
        QueryParameter("timestamp", "2026-01-02T03:04:05.5-01:30"),
        QueryParameter("string", None),
        QueryParameter("null", None),
    )
    assert "CAST(5 AS Int64)" in sql
    assert "CAST(18446744073709551615 AS UInt64)" in sql
    assert "CAST(2.0 AS Float64)" in sql
    assert "FALSE" in sql
    assert "toDateTime64('2026-01-02 04:34:05.500000000', 9, 'UTC')" in sql
    assert "CAST(NULL AS Nullable(String))" in sql


def test_timestamp_without_offset_is_utc_and_keeps_nanoseconds() -> None:
    sql = compiled_sql(
        "SELECT count(*) FROM calls WHERE started_at >= $1",
        QueryParameter("timestamp", "2026-01-02 03:04:05.123456789"),
    )
    assert "toDateTime64('2026-01-02 03:04:05.123456789', 9, 'UTC')" in sql


def test_budget_is_clamped_to_the_caps_and_readonly_comes_last() -> None:
    caps = ResidentBudget(30_000, 10**9, 10**10, 100_000, 64 << 20)
    asked = ResidentBudget(60_000, 1_000, 10**12, 50, 1 << 20)
    settings = budget_settings(asked, caps)
    assert settings == {
        "max_execution_time": 30.0,
        "max_rows_to_read": 1_000,
        "max_bytes_to_read": 10**10,
        "max_result_rows": 50,
        "max_result_bytes": 1 << 20,
        "result_overflow_mode": "throw",
        "read_overflow_mode": "throw",
        "timeout_overflow_mode": "throw",
        "readonly": 1,
    }
    assert list(settings)[-1] == "readonly"


def test_budget_under_one_millisecond_is_not_zero() -> None:
    caps = ResidentBudget(1, 1, 1, 1, 1)
    settings = budget_settings(ResidentBudget(0, 0, 0, 0, 0), caps)
    assert settings["max_execution_time"] == 0.001
    assert settings["max_rows_to_read"] == 1
