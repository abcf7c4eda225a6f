"""Decoded values shared across queries (``DecodedValues``): same answers and outcomes, every
body still read through the source (budgets and unavailability per query), decoded once."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from query_fakes import E1, FakeSource

import baml_studio.query.values as values_mod
from baml_studio.format.values import String
from baml_studio.query import QueryBudgets, QueryEngine
from baml_studio.query.render import batch_rows
from baml_studio.query.values import DecodedValues

SQL = [
    "SELECT call_id, args['k'] AS k FROM calls WHERE args['i'] >= 3 ORDER BY call_id",
    "SELECT args['k'] AS k, count(*) AS n FROM calls GROUP BY args['k'] ORDER BY k",
]


def source(n: int = 20) -> FakeSource:
    s = FakeSource()
    for i in range(n):
        s.call(E1, f"c{i:03d}", args={"i": i, "k": f"k{i % 4}"}, started_ns=i)
    corrupt, _ = s.body(b"\xff\xff")  # not a codec-1 body: unavailable, never cached
    s.call(E1, "c999", args=corrupt, started_ns=999)
    return s


def run(engine: QueryEngine, sql: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    result = engine.execute(sql)
    rows = list(result)
    return rows, result.outcome()


@pytest.mark.parametrize("sql", SQL)
def test_a_repeated_query_decodes_nothing_and_answers_the_same(
    sql: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    decodes: list[bytes] = []
    real = values_mod.decode_value

    def counting(body: bytes) -> Any:
        decodes.append(body)
        return real(body)

    monkeypatch.setattr(values_mod, "decode_value", counting)
    s = source()
    alone = run(QueryEngine(s, QueryBudgets()), sql)
    reads_alone = len(s.reads)
    shared = DecodedValues()
    engine = QueryEngine(s, QueryBudgets(), decoded=shared)
    first = run(engine, sql)
    decoded_first, reads_first = len(decodes), len(s.reads)
    second = run(engine, sql)
    assert first == second == alone
    assert first[1]["valueEvaluations"]["byReason"] == {"corrupt": 1}
    assert len(decodes) - decoded_first == 1  # only the corrupt body, which is not cached
    # every body is still read through the source, as many as without the shared cache
    assert len(s.reads) - reads_first == reads_first - reads_alone == reads_alone
    assert shared.hits > 0


def test_every_body_is_still_read_so_budgets_do_not_depend_on_the_cache() -> None:
    s = source(30)
    shared = DecodedValues()
    sql = "SELECT call_id FROM calls WHERE args['i'] >= 0"
    run(QueryEngine(s, QueryBudgets(), decoded=shared), sql)  # fills the cache
    cold = run(QueryEngine(s, QueryBudgets(max_hydrations=5)), sql)
    warm = run(QueryEngine(s, QueryBudgets(max_hydrations=5), decoded=shared), sql)
    assert cold == warm
    assert warm[1]["resultState"] == "budget_exhausted"


def test_a_body_gone_since_it_was_decoded_is_unavailable() -> None:
    s = source(5)
    shared = DecodedValues()
    sql = "SELECT call_id, args['k'] AS k FROM calls ORDER BY call_id"
    run(QueryEngine(s, QueryBudgets(), decoded=shared), sql)
    s.bodies.clear()  # erased: the source no longer has them
    rows, outcome = run(QueryEngine(s, QueryBudgets(), decoded=shared), sql)
    assert all(r["k"] is None for r in rows)
    assert outcome["valueEvaluations"]["byReason"] == {"lost": 6}  # the corrupt one too


def test_the_cache_is_bounded_by_entries_and_body_bytes() -> None:
    by_count = DecodedValues(max_entries=3, max_body_bytes=1 << 20)
    for i in range(5):
        by_count.put(bytes([i]), String(str(i)), 10)
    assert len(by_count) == 3
    assert by_count.get(bytes([0])) is None and by_count.get(bytes([4])) == String("4")
    by_bytes = DecodedValues(max_entries=100, max_body_bytes=800)
    for i in range(10):
        by_bytes.put(bytes([i]), String(str(i)), 100)
    assert len(by_bytes) == 8
    by_bytes.put(b"big", String("x"), 101)  # over an eighth of the bound: not kept
    assert by_bytes.get(b"big") is None
    assert DecodedValues(max_entries=0).put(b"a", String("a"), 1) is None


def test_a_value_column_nested_deeper_than_python_parses_stays_text() -> None:
    deep = "[" * 5000 + "]" * 5000
    batch = pa.record_batch({"v": pa.array([deep, "[1]", None], pa.string())})
    no_handles: Any = None  # no handle column: the resolver is never asked
    rows = batch_rows(batch, ["v"], frozenset({"v"}), resolver=no_handles)
    assert [row["v"] for row in rows] == [deep, [1], None]
