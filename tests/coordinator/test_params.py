"""``$n``/``?`` parameters of ``POST /v1/query`` (``coordinator.params.bind``): any SQL text and
any parameter values are bound or refused with a typed 400, never another exception; a
``float64`` past the float range and SQL nested too deeply for sqlglot are such 400s."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from baml_studio.apierrors import BadRequest
from baml_studio.coordinator.params import bind
from baml_studio.query.errors import InvalidSql
from baml_studio.query.gatekeeper import admit

DEEP = "SELECT " + "(" * 5000 + "$1" + ")" * 5000
TYPES = ["string", "int64", "uint64", "float64", "double", "bool", "timestamp", "null", "x"]
VALUES = (
    st.none()
    | st.booleans()
    | st.integers(-(10**400), 10**400)
    | st.sampled_from([10**400, -(10**400), 2**1024, 1e308, float("inf"), float("nan")])
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["²", "٣", "¹⁰", "１２", "2026-01-02T03:04:05Z"])
)
WORDS = ["SELECT", "FROM", "WHERE", "calls", "fqn", "=", "(", ")", "$1", "$2", "?", "$²", "$٣"]
SQL = (
    st.text(max_size=60)
    | st.lists(st.sampled_from(WORDS), max_size=20).map(" ".join)
    | st.integers(1, 3000).map(lambda d: "SELECT " + "(" * d + "$1" + ")" * d)
)


@pytest.mark.parametrize(
    "value", [10**400, -(10**400), 2**1024], ids=["10**400", "-10**400", "2**1024"]
)
def test_a_float64_past_the_float_range_is_a_400(value: int) -> None:
    with pytest.raises(BadRequest) as caught:
        bind("SELECT $1", [("float64", value)])
    assert caught.value.status == 400 and caught.value.code == "invalid_parameter"
    assert "finite" in str(caught.value)


def test_the_largest_float64_binds() -> None:
    assert bind("SELECT $1", [("float64", 2**1023)]) == f"SELECT {float(2**1023)!r}"


@pytest.mark.parametrize(
    ("kind", "value"),
    [("int64", 2**63), ("int64", -(2**63) - 1), ("integer", 2**70), ("uint64", 2**64),
     ("uint64", -1), ("timestamp", "9999-12-31T23:59:59Z"), ("timestamp", "1800-01-01T00:00:00Z"),
     ("timestamp", "2262-04-11T00:00:00+00:00")],
)  # fmt: skip
def test_a_value_outside_its_types_range_is_a_400_as_on_the_resident_api(
    kind: str, value: object
) -> None:
    """An int64 past its range came back as a float, a timestamp past 2262 as NULL."""
    with pytest.raises(BadRequest) as caught:
        bind("SELECT $1", [(kind, value)])
    assert caught.value.status == 400 and caught.value.code == "invalid_parameter"


@pytest.mark.parametrize(
    ("kind", "value", "sql"),
    [("int64", 2**63 - 1, "SELECT 9223372036854775807"),
     ("int64", -(2**63), "SELECT -9223372036854775808"),
     ("uint64", 2**64 - 1, "SELECT 18446744073709551615"),
     ("timestamp", "2262-04-10T23:59:59Z", "SELECT CAST('2262-04-10 23:59:59' AS TIMESTAMP)"),
     ("timestamp", "1900-01-01T01:00:00+01:00", "SELECT CAST('1900-01-01 00:00:00' AS TIMESTAMP)")],
)  # fmt: skip
def test_the_ends_of_each_range_bind(kind: str, value: object, sql: str) -> None:
    assert bind("SELECT $1", [(kind, value)]) == sql


def test_sql_nested_too_deeply_with_parameters_is_a_400() -> None:
    with pytest.raises(BadRequest) as caught:
        bind(DEEP, [("int64", 1)])
    assert caught.value.status == 400 and caught.value.code == "invalid_sql"
    assert "nested too deeply" in str(caught.value)


def test_sql_nested_too_deeply_without_parameters_is_left_to_the_gatekeeper() -> None:
    assert bind(DEEP, []) == DEEP
    with pytest.raises(InvalidSql, match="nested too deeply"):
        admit(DEEP, internal=False)


@settings(max_examples=300, deadline=None)
@given(sql=SQL, parameters=st.lists(st.tuples(st.sampled_from(TYPES), VALUES), max_size=3))
@example(sql="SELECT $1", parameters=[("float64", 10**400)])
@example(sql=DEEP, parameters=[("int64", 1)])
def test_any_sql_and_parameters_bind_or_get_a_typed_400(
    sql: str, parameters: list[tuple[str, object]]
) -> None:
    try:
        bound = bind(sql, parameters)
    except BadRequest as exc:
        assert exc.status == 400 and exc.code in ("invalid_parameter", "invalid_sql")
        return
    assert isinstance(bound, str)
