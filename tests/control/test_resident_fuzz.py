"""Property tests of the resident compiler: parameters always bind as one literal, and garbage
SQL only ever gets a 400 (or, if it happens to be a valid query, compiles fully scoped)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from resident_rig import FQNS, Facts, assert_every_table_is_scoped, build_facts

from baml_studio.control.resident import QueryParameter, compile_resident
from baml_studio.control.resident_errors import ResidentQueryError

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=64)
FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
VOCABULARY = [
    "SELECT", "FROM", "WHERE", "WITH", "AS", "JOIN", "LEFT", "ON", "USING", "UNION", "ALL",
    "INTERSECT", "EXCEPT", "GROUP BY", "ORDER BY", "LIMIT", "OFFSET", "HAVING", "OVER",
    "PARTITION BY", "WITHIN GROUP", "DISTINCT", "INTO", "FOR UPDATE", "SETTINGS", "FORMAT",
    "calls", "calls_v1", "threads", "errors", "health", "processes_v1", "system.tables",
    "db.calls_v1", "projection_batches", "c", "t", "x", "fqn", "args", "name", "execution_id",
    "duration_ns", "tenant_id", "c.fqn", "t.status", "*", "count(*)", "sum(duration_ns)",
    "percentile_cont(0.5)", "sleep(1)", "numbers(10)", "file('x')", "now()", "(", ")", ",", ";",
    "=", "<", "OR", "AND", "NOT", "IN", "IS NULL", "1", "0.5", "'x'", "'a''b'", "$1", "$2", "?",
    "--", "\n", "/*", "*/", '"x"', "E'\\\\'", "U&'\\'", "$$q$$", "LATERAL", "VALUES", "CAST",
    "::text", "ARRAY[1]", "= ANY", "CASE", "WHEN", "THEN", "ELSE", "END", "INSERT", "DROP",
]  # fmt: skip


def relation_sql(name: str) -> str:
    from resident_rig import Facts

    return Facts("chdb://unused", "db", "oracle").scoped_sql(name)


@pytest.fixture(scope="module")
def facts(chdb_dsn: str) -> Iterator[Facts]:
    yield from build_facts(chdb_dsn)


@FUZZ
@given(value=TEXT)
def test_random_string_parameters_bind_as_one_literal(facts: Facts, value: str) -> None:
    assume(not value.startswith("exec_"))
    compiled = facts.compile(
        "SELECT $1 AS v, count(*) AS n FROM calls WHERE execution_id = $1 OR fqn = $1",
        [QueryParameter("string", value)],
    )
    assert facts.run(compiled) == [(value, 0)]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    whole=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    unsigned=st.integers(min_value=0, max_value=2**64 - 1),
    real=st.floats(allow_nan=False, allow_infinity=False),
    moment=st.datetimes(
        min_value=dt.datetime(1900, 1, 2),
        max_value=dt.datetime(2262, 4, 10),
        timezones=st.just(dt.UTC),
    ),
    nanos=st.integers(min_value=0, max_value=999),
)
def test_typed_parameters_round_trip(
    facts: Facts, whole: int, unsigned: int, real: float, moment: dt.datetime, nanos: int
) -> None:
    stamp = moment.strftime("%Y-%m-%dT%H:%M:%S.%f") + f"{nanos:03d}Z"
    compiled = facts.compile(
        "SELECT $1 AS i, $2 AS u, $3 AS f, $4 AS t",
        [
            QueryParameter("int64", whole),
            QueryParameter("uint64", unsigned),
            QueryParameter("float64", real),
            QueryParameter("timestamp", stamp),
        ],
    )
    ((i, u, f, t),) = facts.run(compiled)
    assert (i, u, f) == (whole, unsigned, real)
    assert t.replace(tzinfo=dt.UTC) == moment


def _compiles_or_400(sql: str, parameters: list[QueryParameter]) -> None:
    try:
        compiled = compile_resident(sql, parameters, relation_sql=relation_sql)
    except ResidentQueryError as error:
        assert error.status == 400
        return
    assert_every_table_is_scoped(compiled.sql)


@FUZZ
@given(sql=TEXT)
def test_random_text_only_gets_400s(sql: str) -> None:
    _compiles_or_400(sql, [])


@FUZZ
@given(
    words=st.lists(st.sampled_from(VOCABULARY), max_size=30),
    parameters=st.lists(
        st.builds(QueryParameter, st.sampled_from(["string", "int64"]), st.just("1")), max_size=2
    ),
)
def test_token_soup_only_gets_400s(words: list[str], parameters: list[QueryParameter]) -> None:
    _compiles_or_400(" ".join(words), parameters)


@FUZZ
@given(
    prefix=st.sampled_from(
        [
            "SELECT fqn FROM calls WHERE ",
            "SELECT c.fqn, t.status FROM calls c JOIN threads t "
            "ON c.execution_id = t.execution_id WHERE ",
            "WITH x AS (SELECT fqn, execution_id FROM calls) SELECT fqn FROM x WHERE ",
        ]
    ),
    words=st.lists(st.sampled_from(VOCABULARY), max_size=12),
)
def test_mutated_queries_only_get_400s_or_stay_scoped(prefix: str, words: list[str]) -> None:
    _compiles_or_400(prefix + " ".join(words), [])


IDENTIFIER_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\\"),
    min_size=1,
    max_size=40,
)


@FUZZ
@given(name=IDENTIFIER_TEXT)
def test_quoted_aliases_round_trip_and_cannot_break_out(facts: Facts, name: str) -> None:
    assume(not name.lower().startswith("__resident_"))
    quoted = '"' + name.replace('"', '""') + '"'
    compiled = facts.compile(f"SELECT count(*) AS {quoted} FROM calls")
    assert facts.columns(compiled) == (name,)
    assert facts.run(compiled) == [(40,)]


@FUZZ
@given(text=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=64))
def test_string_literals_in_the_sql_round_trip(facts: Facts, text: str) -> None:
    literal = "'" + text.replace("'", "''") + "'"
    compiled = facts.compile(
        f"SELECT {literal} AS v, count(*) AS n FROM calls WHERE fqn = {literal}"
    )
    assert facts.run(compiled) == [(text, 0 if text not in FQNS else 10)]


HUGE_NUMBERS = st.integers(-(10**400), 10**400) | st.sampled_from(
    [10**400, -(10**400), 2**1024, 2**64, -(2**63) - 1, 1e308, float("inf"), float("nan")]
)


@pytest.mark.parametrize("kind", ["float64", "double"])
@pytest.mark.parametrize(
    "value", [10**400, -(10**400), 2**1024], ids=["10**400", "-10**400", "2**1024"]
)
def test_a_float_parameter_past_the_float_range_is_a_400(kind: str, value: int) -> None:
    with pytest.raises(ResidentQueryError) as caught:
        compile_resident(
            "SELECT fqn FROM calls WHERE duration_ns > $1",
            [QueryParameter(kind, value)],
            relation_sql=relation_sql,
        )
    assert caught.value.status == 400 and caught.value.code == "invalid_parameter"
    assert "finite" in str(caught.value)


@FUZZ
@given(
    kind=st.sampled_from(["float64", "double", "int64", "integer", "uint64"]),
    value=HUGE_NUMBERS | st.floats() | st.sampled_from(["1" + "0" * 400, "²", "٣", "1e400"]),
)
@example(kind="float64", value=10**400)
def test_any_number_parameter_binds_or_gets_a_400(kind: str, value: object) -> None:
    _compiles_or_400("SELECT fqn FROM calls WHERE duration_ns > $1", [QueryParameter(kind, value)])


NESTINGS = {
    "brackets": ("SELECT fqn FROM calls WHERE ", "(", "1 = 1", ")"),
    "subqueries": ("SELECT * FROM ", "(SELECT * FROM ", "calls", ") s"),
    "not": ("SELECT fqn FROM calls WHERE ", "NOT ", "true", ""),
    "function calls": ("SELECT ", "coalesce(", "fqn", ") AS f FROM calls"),
}


@settings(max_examples=30, deadline=None)  # a deep query that compiles takes ~0.5 s
@given(nesting=st.sampled_from(sorted(NESTINGS)), depth=st.integers(1, 3000))
@example(nesting="brackets", depth=5000)
def test_deep_nesting_compiles_or_gets_a_400(nesting: str, depth: int) -> None:
    prefix, opening, inner, closing = NESTINGS[nesting]
    _compiles_or_400(prefix + opening * depth + inner + closing * depth, [])
