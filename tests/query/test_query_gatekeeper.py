from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from query_fakes import standard

from baml_studio.query import InvalidSql, QueryEngine
from baml_studio.query.gatekeeper import Statement, admit
from baml_studio.query.names import jaro_winkler, suggest

ACCEPTED = [
    ("SELECT 1", "query"),
    ("select call_id from calls;", "query"),
    ("WITH x AS (SELECT call_id FROM calls) SELECT * FROM x", "query"),
    ("SELECT call_id FROM calls UNION ALL SELECT error_id FROM errors", "query"),
    ("(SELECT fqn FROM call_path_stats)", "query"),
    ("SELECT * FROM information_schema.tables", "query"),
    ("SELECT * FROM baml.public.calls_v1", "query"),
    ("SELECT * FROM retained_calls JOIN cct_population USING (execution_id)", "query"),
    ("SELECT doc FROM baml_columns WHERE relation='calls_v1' AND \"column\"='args'", "query"),
    ("SELECT * FROM hot_call_paths", "query"),
    ("SELECT '__baml_vcmp' AS s, 'x; DROP TABLE y' AS t", "query"),
    ("SELECT 1 -- __baml_ in a comment is fine", "query"),
    ("SHOW TABLES", "show_tables"),
    ("show tables;", "show_tables"),
    ("SHOW COLUMNS FROM calls", "show_columns"),
    ("DESCRIBE errors_v1", "describe"),
    ("EXPLAIN SELECT * FROM calls", "explain"),
    ("EXPLAIN ANALYZE VERBOSE SELECT 1", "explain"),
]

REJECTED = [
    ("SELECT 1; SELECT 2", "exactly one"),
    ("", "holds no statement"),
    ("  ;  ", "holds no statement"),  # was "remove the extra ';'-separated statements"
    ("SELEC x", "'SELEC' does not begin a statement"),  # was "read-only"
    ("CREATE TABLE x (a INT)", "CREATE statements are not allowed"),
    ("CREATE VIEW v AS SELECT 1", "CREATE"),
    ("INSERT INTO calls VALUES (1)", "INSERT"),
    ("DROP TABLE calls", "DROP"),
    ("DELETE FROM calls", "DELETE"),
    ("UPDATE calls SET fqn = 'x'", "UPDATE"),
    ("COPY calls TO '/tmp/x.csv'", "COPY"),
    ("SET datafusion.execution.batch_size = 1", "SET"),
    ("SELECT 1; DROP TABLE calls", "exactly one"),
    ("SHOW ALL", "SHOW"),
    ("EXPLAIN SHOW TABLES", "EXPLAIN needs a query"),
    ("SELECT __baml_vcmp(args, '[]', '=', '1') FROM calls", "reserved"),
    ('SELECT "__baml_x" FROM calls', "reserved"),
    ("SELECT 1 AS __BAML_Y", "reserved"),
    ("SELECT * FROM __baml_secret", "reserved"),
    ("SELECT * FROM nope", "unknown table 'nope'"),
    ("SELECT * FROM other.calls", "unknown schema"),
    ("SELECT * FROM processes", "internal relation"),
    ("SHOW COLUMNS FROM nope", "unknown table"),
    ("DESCRIBE value_index", "internal relation"),
    ("SELECT FROM WHERE", "syntax error"),
    ("SELECT * INTO copy FROM calls", "SELECT statements are not allowed"),
]


@pytest.mark.parametrize(("sql", "kind"), ACCEPTED)
def test_accepted(sql: str, kind: str) -> None:
    assert admit(sql, internal=False).kind == kind


@pytest.mark.parametrize(("sql", "fragment"), REJECTED)
def test_rejected(sql: str, fragment: str) -> None:
    with pytest.raises(InvalidSql) as info:
        admit(sql, internal=False)
    error = info.value
    assert fragment.lower() in error.message.lower()
    assert error.code == "invalid_sql"
    assert error.remedy
    assert error.retryable is False


def test_a_typo_is_not_called_a_write_and_no_statement_is_not_called_too_many() -> None:
    for sql in ("SELEC x", "SELEC 1", "SELCT * FROM calls", "WITH"):
        with pytest.raises(InvalidSql) as info:
            admit(sql, internal=False)
        assert "read-only" not in info.value.message, info.value.message
    with pytest.raises(InvalidSql) as info:
        admit("   ", internal=False)
    assert "';'" not in (info.value.remedy or "")


def test_internal_relations_need_the_flag() -> None:
    assert admit("SELECT * FROM processes_v1", internal=True).kind == "query"
    assert admit("DESCRIBE value_index", internal=True).kind == "describe"


def test_ddl_remedy_lists_what_is_allowed() -> None:
    with pytest.raises(InvalidSql) as info:
        admit("DROP TABLE calls", internal=False)
    assert "SELECT" in (info.value.remedy or "")
    assert "read-only" in info.value.message


@pytest.mark.parametrize(
    ("typo", "expected"),
    [("cals", "calls"), ("thread", "threads"), ("call_path_stat", "call_path_stats")],
)
def test_unknown_table_did_you_mean(typo: str, expected: str) -> None:
    with pytest.raises(InvalidSql) as info:
        admit(f"SELECT * FROM {typo}", internal=False)
    assert f"did you mean '{expected}'" in (info.value.remedy or "")


def test_cte_names_are_not_unknown_tables() -> None:
    admit("WITH cals AS (SELECT 1 AS a) SELECT a FROM cals", internal=False)


def test_unknown_column_did_you_mean_through_the_engine() -> None:
    result = QueryEngine(standard()).execute("SELECT duration_n FROM calls")
    assert list(result) == []
    outcome = result.outcome()
    assert outcome["resultState"] == "failed"
    error = outcome["error"]
    assert isinstance(error, dict)
    assert error["code"] == "invalid_sql"
    assert "duration_n" in error["message"]
    assert "did you mean 'duration_ns'" in error["remedy"]


def test_reserved_functions_cannot_be_called_even_quoted() -> None:
    result = QueryEngine(standard()).execute("SELECT \"__baml_render\"(output, '[]') FROM calls")
    assert result.outcome()["resultState"] == "failed"


def test_jaro_winkler_known_values() -> None:
    assert jaro_winkler("MARTHA", "MARHTA") == pytest.approx(0.9611, abs=1e-4)
    assert jaro_winkler("DIXON", "DICKSONX") == pytest.approx(0.8133, abs=1e-4)
    assert jaro_winkler("abc", "abc") == 1.0
    assert jaro_winkler("", "abc") == 0.0
    assert suggest("zzzz", ["calls", "errors"]) is None


NESTED = {
    "brackets": "SELECT " + "(" * 5000 + "1" + ")" * 5000,
    "subqueries": "SELECT * FROM " + "(SELECT * FROM " * 400 + "calls" + ") t" * 400,
    "not": "SELECT " + "NOT " * 3000 + "true",
    "function calls": "SELECT " + "coalesce(" * 2000 + "1" + ")" * 2000,
}


@pytest.mark.parametrize("sql", NESTED.values(), ids=NESTED.keys())
def test_sql_nested_too_deeply_is_invalid_sql(sql: str) -> None:
    with pytest.raises(InvalidSql) as info:
        admit(sql, internal=False)
    assert "nested too deeply" in info.value.message and info.value.remedy
    assert info.value.code == "invalid_sql"


def test_explain_of_explain_is_refused_at_once_however_many() -> None:
    with pytest.raises(InvalidSql, match="EXPLAIN needs a query"):
        admit("EXPLAIN " * 3000 + "SELECT 1", internal=False)


WORDS = [
    "SELECT", "FROM", "WHERE", "WITH", "AS", "EXPLAIN", "ANALYZE", "SHOW", "TABLES", "DESCRIBE",
    "calls", "x", "1", "'a'", "(", ")", "NOT", "CASE", "WHEN", "END", "-", ";", "*", ",",
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    sql=st.text(max_size=80)
    | st.lists(st.sampled_from(WORDS), max_size=25).map(" ".join)
    | st.builds(
        lambda d, w: w + "(" * d + "1" + ")" * d,
        st.integers(1, 2000),
        st.sampled_from(["SELECT ", "SELECT * FROM calls WHERE ", "EXPLAIN SELECT ", "SELECT abs"]),
    )
)
@example(sql=NESTED["brackets"])
def test_any_text_is_admitted_or_invalid_sql(sql: str) -> None:
    try:
        statement = admit(sql, internal=False)
    except InvalidSql as exc:
        assert exc.code == "invalid_sql" and exc.message
        return
    assert isinstance(statement, Statement)
