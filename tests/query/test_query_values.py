"""Virtual value columns: subscripts, comparisons, semantic equality, CIDs and rendering."""

from __future__ import annotations

from typing import Any

import pytest
from query_fakes import E1, LOST, NOT_CAPTURED, FakeSource, standard

from baml_studio.format.values import Class, Int, Map, String
from baml_studio.query import QueryEngine


def run(source: FakeSource, sql: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    result = QueryEngine(source).execute(sql)
    rows = list(result)
    return rows, result.outcome()


def ids(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(r["call_id"] for r in rows)


def test_numeric_comparison_int_and_float_and_non_matches() -> None:
    rows, outcome = run(standard(), "SELECT call_id FROM calls WHERE args['customer']['age'] >= 30")
    # c_string_age (type mismatch), c_no_age (absent), c_null_age (captured null) do not match;
    # c_lost and c_not_captured are unavailable: excluded and counted.
    assert ids(rows) == ["c_float45", "c_int30", "c_int60"]
    assert outcome["resultState"] == "incomplete"
    assert outcome["queryCompleted"] is True
    assert outcome["valueEvaluations"] == {
        "attempted": 8,
        "available": 6,
        "unavailable": 2,
        "byReason": {"lost": 1, "not_captured": 1},
    }


@pytest.mark.parametrize(
    ("predicate", "expected"),
    [
        ("args['customer']['age'] = 30", ["c_int30"]),
        ("args['customer']['age'] = 30.0", ["c_int30"]),
        ("args['customer']['age'] = 45.5", ["c_float45"]),
        ("args['customer']['age'] > 45", ["c_float45", "c_int60"]),
        ("args['customer']['age'] < 45.6", ["c_float45", "c_int30"]),
        ("args['customer']['age'] <> 30", ["c_float45", "c_int60"]),
        ("args['customer']['age'] != 30", ["c_float45", "c_int60"]),
        ("45 <= args['customer']['age']", ["c_float45", "c_int60"]),
        ("args['customer']['age'] = 'old'", ["c_string_age"]),
        ("args['customer']['age'] > 'a'", ["c_string_age"]),
        ("args['customer']['name'] = 'Ann'", ["c_int30"]),
        ("args['customer']['tier'] = 'GOLD'", ["c_int30"]),
        ("args['customer']['age'] IN (30, 60)", ["c_int30", "c_int60"]),
        ("args['customer']['age'] NOT IN (30, 60)", ["c_float45"]),
        ("args['customer']['age'] BETWEEN 40 AND 61", ["c_float45", "c_int60"]),
        ("args['customer']['age'] = NULL", []),
        ("args['customer']['missing'] = 1", []),
        ("args['customer']['age']['deeper'] = 1", []),
        ("NOT (args['customer']['age'] = 30)", ["c_float45", "c_int60"]),
        ("output['score'] > 0.5", ["c_int30"]),
        ("output[0] = 1", ["c_float45"]),
        ("output[-1] = 3", ["c_float45"]),
        ("output[7] = 3", []),
        ("output['tags'][1] = 'b'", ["c_int30"]),
        ("output = 42", ["c_null_age"]),
        ("output = 'plain text'", ["c_string_age"]),
        ("output = TRUE", ["c_lost"]),
        ("error['message'] = 'boom'", ["c_lost"]),
    ],
)
def test_predicates(predicate: str, expected: list[str]) -> None:
    rows, _ = run(standard(), f"SELECT call_id FROM calls WHERE {predicate}")
    assert ids(rows) == expected


def test_absent_paths_and_mismatches_count_as_available() -> None:
    _, outcome = run(
        standard(),
        "SELECT call_id FROM calls WHERE fqn = 'ScoreCustomer' AND args['customer']['nope'] = 1",
    )
    evaluations = outcome["valueEvaluations"]
    assert evaluations["available"] == 5
    assert evaluations["byReason"] == {"lost": 1}


def test_value_to_value_comparison() -> None:
    s = FakeSource()
    s.call(E1, "same", args={"a": 1}, output=1)
    s.call(E1, "diff", args={"a": 1}, output=2)
    s.call(E1, "struct", args={"a": {"x": [1]}}, output={"x": [1.0]})
    rows, _ = run(s, "SELECT call_id FROM calls WHERE args['a'] = output")
    assert ids(rows) == ["same", "struct"]
    rows, _ = run(s, "SELECT call_id FROM calls WHERE output > args['a']")
    assert ids(rows) == ["diff"]


def test_baml_value_json_semantic_equality() -> None:
    s = FakeSource()
    customer = Class("Customer", (("name", String("Ann")), ("age", Int(30))))
    s.call(E1, "class", args=Map((("customer", customer),)))
    s.call(E1, "map_reordered", args={"customer": {"age": 30, "name": "Ann"}})
    s.call(E1, "float_age", args={"customer": {"name": "Ann", "age": 30.0}})
    s.call(E1, "other", args={"customer": {"name": "Ann", "age": 31}})
    s.call(E1, "lost", args=LOST)
    literal = '{"customer": {"name": "Ann", "age": 30}}'
    rows, outcome = run(s, f"SELECT call_id FROM calls WHERE args = baml_value_json('{literal}')")
    assert ids(rows) == ["class", "float_age", "map_reordered"]
    assert outcome["valueEvaluations"]["byReason"] == {"lost": 1}
    sub = (
        "SELECT call_id FROM calls WHERE "
        """args['customer'] <> baml_value_json('{"age":30,"name":"Ann"}')"""
    )
    rows, _ = run(s, sub)
    assert ids(rows) == ["other"]


def test_baml_value_json_rejects_ordering_and_bad_json() -> None:
    for sql in (
        "SELECT call_id FROM calls WHERE args > baml_value_json('{}')",
        "SELECT call_id FROM calls WHERE args = baml_value_json('{not json')",
        "SELECT call_id FROM calls WHERE args = baml_value_json(fqn)",
    ):
        _, outcome = run(standard(), sql)
        assert outcome["resultState"] == "failed"
        assert outcome["error"]["code"] == "invalid_sql"


def test_baml_value_cid_identity() -> None:
    s = standard()
    (row,) = [r for r in s.rows["calls_v1"] if r["call_id"] == "c_int30"]
    cid = row["args_cid"]
    rows, outcome = run(s, f"SELECT call_id FROM calls WHERE args_cid = baml_value_cid('{cid}')")
    assert ids(rows) == ["c_int30"]
    assert outcome["valueEvaluations"]["attempted"] == 0
    rows, outcome = run(s, f"SELECT call_id FROM calls WHERE args = baml_value_cid('{cid}')")
    assert ids(rows) == ["c_int30"]
    assert outcome["valueEvaluations"]["byReason"] == {"lost": 1, "not_captured": 1}
    assert s.reads == [], "a CID comparison reads no bodies"
    for bad in ("bamlv_1_xyz", "BAMLV_1_" + "a" * 64, cid.upper()):
        _, outcome = run(s, f"SELECT call_id FROM calls WHERE args_cid = baml_value_cid('{bad}')")
        assert outcome["error"]["code"] == "invalid_sql"
    _, outcome = run(s, f"SELECT call_id FROM calls WHERE args['x'] = baml_value_cid('{cid}')")
    assert outcome["error"]["code"] == "invalid_sql"


def test_numeric_subscript_on_args_is_a_planning_error() -> None:
    _, outcome = run(standard(), "SELECT args[0] FROM calls")
    assert outcome["resultState"] == "failed"
    assert outcome["error"]["code"] == "invalid_sql"
    assert "named arguments" in outcome["error"]["message"]
    _, outcome = run(standard(), "SELECT args[fqn] FROM calls")
    assert outcome["error"]["code"] == "invalid_sql"


def test_projection_renders_values_as_json_values() -> None:
    rows, outcome = run(
        standard(),
        "SELECT call_id, args['customer'] AS customer, args['customer']['age'], output "
        "FROM calls ORDER BY started_ns",
    )
    by_id = {r["call_id"]: r for r in rows}
    assert by_id["c_int30"]["customer"] == {"name": "Ann", "age": 30, "tier": "GOLD"}
    assert by_id["c_int30"]["args['customer']['age']"] == 30
    assert by_id["c_int30"]["output"] == {"score": 0.9, "tags": ["a", "b"]}
    assert by_id["c_float45"]["output"] == [1, 2, 3]
    assert by_id["c_string_age"]["output"] == "plain text"
    assert by_id["c_no_age"]["output"] is None  # captured null renders as NULL
    assert by_id["c_lost"]["customer"] is None  # unavailable renders as NULL, counted
    assert by_id["c_int60"]["output"] is None  # not applicable
    assert outcome["resultState"] == "incomplete"


def test_render_in_expressions_is_bare_text() -> None:
    rows, _ = run(
        standard(),
        "SELECT call_id, upper(args['customer']['name']) AS n, "
        "length(output) AS len, CAST(args['customer']['age'] AS DOUBLE) + 1 AS next_age "
        "FROM calls WHERE args['customer']['name'] LIKE 'A%'",
    )
    (row,) = rows
    assert row == {
        "call_id": "c_int30",
        "n": "ANN",
        "len": len('{"score":0.9,"tags":["a","b"]}'),
        "next_age": 31.0,
    }


def test_select_star_renders_handles() -> None:
    rows, outcome = run(standard(), "SELECT * FROM calls WHERE call_id = 'c_float45'")
    (row,) = rows
    assert row["args"] == {"customer": {"age": 45.5, "name": "Bo"}}
    assert row["output"] == [1, 2, 3]
    assert row["error"] is None
    assert outcome["valueEvaluations"]["attempted"] == 2


def test_cte_passes_handles_through() -> None:
    sql = (
        "WITH x AS (SELECT call_id, args AS a FROM calls) "
        "SELECT call_id, a['customer']['name'] AS name FROM x WHERE a['customer']['age'] > 40 "
        "ORDER BY call_id"
    )
    rows, _ = run(standard(), sql)
    assert rows == [{"call_id": "c_float45", "name": "Bo"}, {"call_id": "c_int60", "name": None}]


def test_order_by_value_sorts_numerically() -> None:
    s = FakeSource()
    for i, age in enumerate([100, 9, 30.5, -2, 1e20]):
        s.call(E1, f"c{i}", args={"age": age})
    rows, _ = run(s, "SELECT args['age'] AS age FROM calls ORDER BY age")
    assert [r["age"] for r in rows] == [-2, 9, 30.5, 100, 1e20]
    rows, _ = run(s, "SELECT call_id FROM calls ORDER BY args['age'] DESC LIMIT 2")
    assert [r["call_id"] for r in rows] == ["c4", "c0"]


def test_group_by_value() -> None:
    s = FakeSource()
    for i, tier in enumerate(["gold", "gold", "silver"]):
        s.call(E1, f"c{i}", args={"tier": tier})
    s.call(E1, "lost", args=NOT_CAPTURED)
    rows, outcome = run(
        s,
        "SELECT args['tier'] AS tier, count(*) AS n FROM calls GROUP BY args['tier'] "
        "ORDER BY n DESC, tier",
    )
    assert rows == [{"tier": "gold", "n": 2}, {"tier": "silver", "n": 1}, {"tier": None, "n": 1}]
    assert outcome["valueEvaluations"]["byReason"] == {"not_captured": 1}


def test_errors_value_is_virtual_but_health_value_is_not() -> None:
    rows, _ = run(standard(), "SELECT error_id, value['code'] AS code, value FROM errors")
    assert rows[0]["code"] == 7
    assert rows[0]["value"] == {"message": "boom", "code": 7}
    rows, outcome = run(standard(), "SELECT sum(value) AS total FROM health WHERE value > 3")
    assert rows == [{"total": 12}]
    assert outcome["valueEvaluations"]["attempted"] == 0


def test_corrupt_unsupported_and_missing_bodies() -> None:
    s = FakeSource()
    corrupt, _ = s.body(b"\xff\xff\xff")
    unsupported, _ = s.body(b"", codec=2)
    s.call(E1, "corrupt", args=corrupt)
    s.call(E1, "unsupported", args=unsupported)
    s.call(E1, "bad_handle", args=b"\x07\x07")
    s.call(E1, "ok", args={"a": 1})
    s.bodies.pop(next(iter(s.bodies)))  # the corrupt body's object goes missing → lost
    s.call(E1, "corrupt2", args=s.body(b"\x12")[0])
    rows, outcome = run(s, "SELECT call_id FROM calls WHERE args['a'] = 1")
    assert ids(rows) == ["ok"]
    assert outcome["valueEvaluations"]["byReason"] == {
        "corrupt": 2,
        "lost": 1,
        "unsupported": 1,
    }


def test_repeated_values_are_read_once() -> None:
    s = FakeSource()
    for i in range(20):
        s.call(E1, f"c{i}", args={"same": True})
    rows, outcome = run(s, "SELECT call_id FROM calls WHERE args['same'] = TRUE")
    assert len(rows) == 20
    assert len(s.reads) == 1
    assert outcome["valueEvaluations"]["available"] == 20
