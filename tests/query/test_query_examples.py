"""The documented example queries (reference facts §5.9), the session's catalog, and row shapes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from query_fakes import E1, standard

from baml_studio.catalog.schema import PUBLIC_RELATIONS, RELATIONS
from baml_studio.query import InvalidSql, QueryEngine, table_cell
from baml_studio.query.render import timestamp_text

EXAMPLES = [
    "SELECT thread_id, status, total_errors, started_at FROM threads "
    "WHERE parent_thread_id IS NULL ORDER BY started_at DESC LIMIT 20",
    "SELECT fqn, sum(calls_started) calls, sum(self_ns) self_ns FROM call_path_stats "
    f"WHERE execution_id = '{E1}' GROUP BY fqn ORDER BY self_ns DESC LIMIT 10",
    "SELECT c.call_id, c.duration_ns, e.stack FROM calls c JOIN errors e "
    "ON e.execution_id = c.execution_id AND e.error_id = c.error_id WHERE c.status = 'errored'",
    "SELECT thread_id, name, spawn_fqn, started_ns, end_status FROM threads "
    f"WHERE execution_id = '{E1}' ORDER BY started_ns",
    "SELECT call_id, args['customer']['age'] AS age, output FROM calls "
    "WHERE args['customer']['age'] >= 30 LIMIT 50",
    "SELECT fqn, sum(self_ns) AS self_ns FROM call_path_stats GROUP BY fqn "
    "ORDER BY self_ns DESC LIMIT 10",
    "SELECT call_id, args['customer']['age'] AS age FROM calls "
    "WHERE fqn = 'ScoreCustomer' AND args['customer']['age'] >= 30",
]


def run(sql: str, internal: bool = False) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    result = QueryEngine(standard()).execute(sql, internal=internal)
    rows = list(result)
    return rows, result.outcome()


def test_example_1_root_threads() -> None:
    rows, outcome = run(EXAMPLES[0])
    assert outcome["resultState"] == "complete"
    assert [r["thread_id"] for r in rows] == ["baml_thread_1_" + "2" * 32, E1]
    assert rows[1]["started_at"] == "2026-01-01T00:00:00.123456789Z"
    assert rows[1]["total_errors"] == 0


def test_example_2_self_time_by_function() -> None:
    rows, outcome = run(EXAMPLES[1])
    assert outcome["resultState"] == "complete"
    assert rows == [
        {"fqn": "ScoreCustomer", "calls": 3, "self_ns": 500},
        {"fqn": "Main", "calls": 3, "self_ns": 100},
    ]


def test_example_3_errored_calls_with_stacks() -> None:
    rows, _ = run(EXAMPLES[2])
    assert rows == [{"call_id": "c_lost", "duration_ns": None, "stack": ["Main", "ScoreCustomer"]}]


def test_example_4_threads_of_an_execution() -> None:
    rows, _ = run(EXAMPLES[3])
    assert [r["name"] for r in rows] == [None, "worker"]
    assert rows[1]["end_status"] == "completed"


def test_example_5_value_predicate_and_projection() -> None:
    rows, outcome = run(EXAMPLES[4])
    assert {r["call_id"]: r["age"] for r in rows} == {
        "c_int30": 30,
        "c_float45": 45.5,
        "c_int60": 60,
    }
    assert outcome["resultState"] == "incomplete"
    assert outcome["valueEvaluations"]["byReason"] == {"lost": 1, "not_captured": 1}


def test_example_6_self_time_across_executions() -> None:
    rows, _ = run(EXAMPLES[5])
    assert rows == [{"fqn": "Main", "self_ns": 800}, {"fqn": "ScoreCustomer", "self_ns": 500}]


def test_example_7_public_filter_gates_value_evaluation() -> None:
    rows, outcome = run(EXAMPLES[6])
    assert sorted(r["call_id"] for r in rows) == ["c_float45", "c_int30"]
    # c_not_captured belongs to another function: it is never evaluated, so not counted.
    assert outcome["valueEvaluations"]["byReason"] == {"lost": 1}


@pytest.mark.parametrize("sql", EXAMPLES)
def test_examples_explain(sql: str) -> None:
    text = QueryEngine(standard()).explain(sql)
    assert "logical_plan:" in text
    assert "physical_plan:" in text


def test_explain_rejects_non_queries() -> None:
    with pytest.raises(InvalidSql):
        QueryEngine(standard()).explain("SHOW TABLES")
    with pytest.raises(InvalidSql):
        QueryEngine(standard()).explain("DROP TABLE calls")


def test_show_tables_lists_names_aliases_and_views() -> None:
    rows, _ = run("SHOW TABLES")
    names = {r["table_name"] for r in rows if r["table_schema"] == "public"}
    for relation in PUBLIC_RELATIONS:
        assert {relation.name, *relation.aliases} <= names
    assert {"hot_call_paths", "hot_call_paths_v1", "baml_columns"} <= names
    assert "processes_v1" not in names
    rows, _ = run("SHOW TABLES", internal=True)
    assert {"processes_v1", "store_files", "value_index"} <= {r["table_name"] for r in rows}


def test_describe_and_information_schema_types() -> None:
    rows, _ = run("DESCRIBE calls_v1")
    types = {r["column_name"]: r["data_type"] for r in rows}
    assert types["args"] == "Binary"
    assert types["execution_id"] == "Utf8"
    rows, _ = run("SHOW COLUMNS FROM retained_calls")
    assert len(rows) == len(RELATIONS[2].columns)
    rows, _ = run(
        "SELECT count(*) AS n FROM information_schema.columns WHERE table_name = 'errors_v1'"
    )
    assert rows == [{"n": len(RELATIONS[3].columns)}]


def test_baml_columns_docs() -> None:
    rows, _ = run(
        "SELECT doc, type, virtual, role FROM baml_columns "
        "WHERE relation='calls_v1' AND \"column\"='args'"
    )
    assert rows == [
        {
            "doc": "the arguments, by declared parameter name (virtual)",
            "type": "Binary",
            "virtual": True,
            "role": "input",
        }
    ]
    rows, _ = run("SELECT DISTINCT relation FROM baml_columns ORDER BY relation")
    assert "value_index_v1" not in {r["relation"] for r in rows}


def test_hot_call_paths_view() -> None:
    # A view's ORDER BY does not order the outer query (DataFusion drops it, as SQL allows).
    rows, _ = run("SELECT fqn, self_ns FROM hot_call_paths_v1 ORDER BY self_ns DESC")
    assert [r["self_ns"] for r in rows] == [700, 500, 100]
    rows, _ = run("SELECT count(*) AS n FROM hot_call_paths WHERE fqn = 'Main'")
    assert rows == [{"n": 2}]


def test_schema_document_shape() -> None:
    document = QueryEngine(standard()).schema_document()
    assert set(document) == {"catalogVersion", "generation", "relations", "views"}
    relations = document["relations"]
    assert isinstance(relations, list)
    assert [r["name"] for r in relations] == [r.name for r in PUBLIC_RELATIONS]
    calls = relations[2]
    assert set(calls) == {"name", "alias", "grain", "provisional", "doc", "columns"}
    args = next(c for c in calls["columns"] if c["name"] == "args")
    assert args == {
        "name": "args",
        "type": "Binary",
        "nullable": True,
        "key": False,
        "virtual": True,
        "role": "input",
        "doc": "the arguments, by declared parameter name (virtual)",
    }
    started = next(c for c in calls["columns"] if c["name"] == "started_at")
    assert started["type"] == 'Timestamp(Nanosecond, Some("UTC"))'
    roles = next(c for c in calls["columns"] if c["name"] == "roles")
    assert roles["type"] == "List<Utf8>"
    assert document["views"] == [
        {
            "name": "hot_call_paths_v1",
            "alias": "hot_call_paths",
            "sql": document["views"][0]["sql"],
            "doc": "Call paths by self time, slowest first.",
        }
    ]
    internal = QueryEngine(standard()).schema_document(internal=True)
    assert len(internal["relations"]) == len(RELATIONS)
    json.dumps(internal)


def test_row_values_are_json_able() -> None:
    rows, _ = run(
        "SELECT t.started_at, c.roles, CAST('ab' AS BYTEA) AS b, 1.5 AS f, "
        "CAST('NaN' AS DOUBLE) AS nan, DATE '2026-01-02' AS d "
        "FROM threads t JOIN calls c ON t.execution_id = c.execution_id "
        f"WHERE c.call_id = 'c_int30' AND t.thread_id = '{E1}'"
    )
    (row,) = rows
    assert row == {
        "started_at": "2026-01-01T00:00:00.123456789Z",
        "roles": [],
        "b": "0x6162",
        "f": 1.5,
        "nan": "NaN",
        "d": "2026-01-02",
    }
    json.dumps(row)


def test_timestamp_text() -> None:
    assert timestamp_text(0) == "1970-01-01T00:00:00.000000000Z"
    assert timestamp_text(-1) == "1969-12-31T23:59:59.999999999Z"


def test_table_cells() -> None:
    assert table_cell(None) == "NULL"
    assert table_cell("text") == "text"
    assert table_cell({"a": [1, 2]}) == '{"a":[1,2]}'
    assert table_cell("x" * 100) == "x" * 59 + "…"


def test_table_cells_are_one_line_and_send_no_terminal_escapes() -> None:
    assert table_cell("a\nb\tc\rd") == "a\\nb\\tc\\rd"
    assert table_cell("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m"
    assert table_cell("C1 \x9b DEL \x7f") == "C1 \\x9b DEL \\x7f"
    assert table_cell("a\\nb") == "a\\\\nb"  # a backslash in the text is doubled: unambiguous
    assert table_cell({"a": "x\ny\x85"}) == '{"a":"x\\ny\\u0085"}'  # JSON escapes C0 itself
    assert table_cell("é 中 ✓") == "é 中 ✓"


@given(st.one_of(st.text(), st.dictionaries(st.text(max_size=5), st.text(max_size=20))))
def test_fuzz_a_table_cell_has_no_control_character(value: object) -> None:
    cell = table_cell(value)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in cell), cell
    assert len(cell) <= 60


def test_local_budgets_of_zero_and_an_unreadable_store_are_clean_errors(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from baml_studio.cli import main

    store = tmp_path / "store"
    (store / "streams").mkdir(parents=True)
    for args, says in [(["--max-rows", "0"], "--max-rows"), (["--max-wall", "0s"], "--max-wall")]:
        result = CliRunner().invoke(main, ["query", "--store", str(store), *args, "SELECT 1"])
        assert result.exit_code == 2 and says in result.output, result.output
    (store / "streams").rmdir()
    (store / "streams").write_text("a file where a directory goes")
    result = CliRunner().invoke(
        main, ["query", "--store", str(store), "SELECT count(*) FROM calls"]
    )
    assert result.exit_code == 5 and "cannot be read" in result.output, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # no traceback


def test_schema_of_an_unknown_table_is_a_usage_error_naming_the_relations(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from baml_studio.cli import main

    store = tmp_path / "store"
    (store / "streams").mkdir(parents=True)
    args = ["query", "--store", str(store), "--schema", "--table"]
    result = CliRunner().invoke(main, [*args, "nope"])
    assert result.exit_code == 2 and "no relation or view 'nope'" in result.output, result.output
    assert "calls" in result.output and "hot_call_paths" in result.output
    found = CliRunner().invoke(main, [*args, "calls"])
    assert found.exit_code == 0 and len(json.loads(found.output)["relations"]) == 1
    assert json.loads(found.output)["views"] == []
    # a view is in --schema, so --table takes it too (it was "no relation")
    for name in ("hot_call_paths", "hot_call_paths_v1"):
        view = CliRunner().invoke(main, [*args, name])
        assert view.exit_code == 0, view.output
        document = json.loads(view.output)
        assert document["relations"] == [] and [v["alias"] for v in document["views"]] == [
            "hot_call_paths"
        ]


def test_repeated_column_names_keep_every_column() -> None:
    """``SELECT a.fqn, b.fqn, x AS fqn_2``: the second ``fqn`` was renamed ``fqn_2``, the name
    the query gave the third column, and the row kept one of the two (data lost, outcome
    complete)."""
    rows, outcome = run(
        "SELECT a.fqn, b.fqn, 'third' AS fqn_2 FROM call_path_stats a "
        "CROSS JOIN call_path_stats b LIMIT 1"
    )
    assert outcome["resultState"] == "complete"
    (row,) = rows
    assert list(row) == ["fqn", "fqn_3", "fqn_2"] and row["fqn_2"] == "third"
    assert row["fqn_3"] == row["fqn"] == "ScoreCustomer"


@given(st.lists(st.sampled_from(["a", "a_2", "a_3", "b", "a_2_2"]), min_size=1, max_size=8))
def test_unique_names_are_unique_and_keep_the_first_of_each_name(names: list[str]) -> None:
    import pyarrow as pa

    from baml_studio.query.render import unique_names

    got = unique_names(pa.schema([(n, pa.int8()) for n in names]))
    assert len(set(got)) == len(got) == len(names)
    for index, name in enumerate(names):
        if name not in names[:index]:
            assert got[index] == name or name in got[:index]
