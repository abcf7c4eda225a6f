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
