"""Budgets end the stream with budget_exhausted / E_QUERY_BUDGET_EXCEEDED; streamed rows stay."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from query_fakes import E1, FakeSource, standard

from baml_studio.query import QueryBudgets, QueryEngine
from baml_studio.query.session import BATCH_ROWS


def many_calls(n: int) -> FakeSource:
    s = FakeSource()
    for i in range(n):
        s.call(E1, f"c{i:05d}", args={"i": i, "pad": "x" * 100}, started_ns=i)
    return s


def assert_exhausted(outcome: dict[str, Any], flag: str) -> None:
    assert outcome["resultState"] == "budget_exhausted"
    assert outcome["queryCompleted"] is False
    error = outcome["error"]
    assert error["code"] == "E_QUERY_BUDGET_EXCEEDED"
    assert error["retryable"] is False
    assert flag in error["remedy"]


def test_row_budget_keeps_streamed_rows() -> None:
    engine = QueryEngine(many_calls(50), QueryBudgets(max_result_rows=10))
    result = engine.execute("SELECT call_id FROM calls ORDER BY started_ns")
    rows = list(result)
    assert [r["call_id"] for r in rows] == [f"c{i:05d}" for i in range(10)]
    outcome = result.outcome()
    assert outcome["rowsStreamed"] == 10
    assert_exhausted(outcome, "--max-rows")


def test_exactly_the_row_budget_is_complete() -> None:
    engine = QueryEngine(many_calls(10), QueryBudgets(max_result_rows=10))
    result = engine.execute("SELECT call_id FROM calls")
    assert len(list(result)) == 10
    assert result.outcome()["resultState"] == "complete"


def test_rows_stream_before_the_query_ends() -> None:
    source = many_calls(20_000)
    engine = QueryEngine(source, QueryBudgets(max_result_rows=100_000))
    result = engine.execute("SELECT call_id, args['i'] AS i FROM calls")
    first = list(itertools.islice(iter(result), 3))
    assert [r["i"] for r in first] == [0, 1, 2]
    assert result.rows_streamed == 3
    # Only the first batch has been computed: the other values have not been read yet.
    assert len(source.reads) == BATCH_ROWS
    assert result.outcome()["resultState"] == "cancelled"
    assert len(source.reads) == BATCH_ROWS  # closing the result stopped the stream


def test_hydration_budget() -> None:
    engine = QueryEngine(many_calls(30), QueryBudgets(max_hydrations=5))
    result = engine.execute("SELECT call_id FROM calls WHERE args['i'] >= 0")
    assert list(result) == []
    outcome = result.outcome()
    assert_exhausted(outcome, "max_hydrations")
    assert outcome["valueEvaluations"]["byReason"] == {"query_budget_exhausted": 1}
    assert outcome["valueEvaluations"]["available"] == 5


def test_hydration_budget_in_projection_keeps_streamed_rows() -> None:
    source = many_calls(30)
    engine = QueryEngine(source, QueryBudgets(max_hydrations=12))
    result = engine.execute("SELECT args['i'] AS i FROM calls")
    rows = list(result)
    outcome = result.outcome()
    assert_exhausted(outcome, "max_hydrations")
    assert outcome["rowsStreamed"] == len(rows)
    assert len(source.reads) == 12


def test_decoded_bytes_budget() -> None:
    engine = QueryEngine(many_calls(30), QueryBudgets(max_decoded_bytes=1000))
    result = engine.execute("SELECT call_id FROM calls WHERE args['i'] >= 0")
    list(result)
    assert_exhausted(result.outcome(), "max_decoded_bytes")


def test_value_bytes_budget_makes_values_truncated_not_fatal() -> None:
    s = FakeSource()
    s.call(E1, "small", args={"a": 1})
    s.call(E1, "big", args={"a": 1, "pad": "x" * 5000})
    result = QueryEngine(s, QueryBudgets(max_value_bytes=1000)).execute(
        "SELECT call_id FROM calls WHERE args['a'] = 1"
    )
    assert [r["call_id"] for r in result] == ["small"]
    outcome = result.outcome()
    assert outcome["resultState"] == "incomplete"
    assert outcome["valueEvaluations"]["byReason"] == {"truncated": 1}


def test_wall_budget_before_streaming() -> None:
    result = QueryEngine(standard(), QueryBudgets(max_wall_s=1e-9)).execute(
        "SELECT call_id FROM calls"
    )
    assert list(result) == []
    outcome = result.outcome()
    assert outcome["rowsStreamed"] == 0
    assert_exhausted(outcome, "--max-wall")


def test_wall_budget_during_streaming() -> None:
    source = many_calls(20_000)

    def clock() -> float:
        return len(source.reads) / 10_000  # one second per 10,000 value reads

    result = QueryEngine(source, QueryBudgets(max_wall_s=1.0), clock=clock).execute(
        "SELECT call_id, args['i'] AS i FROM calls"
    )
    rows = list(result)
    outcome = result.outcome()
    assert_exhausted(outcome, "--max-wall")
    assert 0 < len(rows) < 20_000
    assert outcome["rowsStreamed"] == len(rows)


@pytest.mark.parametrize(
    "field", ["max_wall_s", "max_result_rows", "max_hydrations", "max_decoded_bytes"]
)
def test_budgets_must_be_positive(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        QueryBudgets(**{field: 0})
