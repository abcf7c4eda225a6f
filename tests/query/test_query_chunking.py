"""Row-wise scans run chunk by chunk: the same rows, first rows early, LIMIT stops folding."""

from __future__ import annotations

from query_fakes import FakeSource

from baml_studio.query import QueryEngine
from baml_studio.query.chunking import CHUNK_EXECUTIONS


def _source(executions: int) -> FakeSource:
    source = FakeSource()
    for e in range(executions):
        execution = f"baml_thread_1_{e:032d}"
        for c in range(3):
            source.call(execution, f"{execution}-c{c}", args={"n": e * 3 + c}, started_ns=c)
    return source


def test_a_chunked_scan_returns_the_same_rows_as_one_pass() -> None:
    source = _source(3 * CHUNK_EXECUTIONS + 5)
    scan = list(QueryEngine(source).execute("SELECT call_id FROM calls WHERE args['n'] >= 10"))
    assert len({ids for _, ids in source.table_calls}) == 4  # four chunks were folded
    whole = list(
        QueryEngine(_source(3 * CHUNK_EXECUTIONS + 5)).execute(
            "SELECT call_id FROM calls WHERE args['n'] >= 10 ORDER BY call_id"
        )
    )
    assert sorted(r["call_id"] for r in scan) == [r["call_id"] for r in whole]
    assert len(scan) == 3 * (3 * CHUNK_EXECUTIONS + 5) - 10


def test_a_limit_stops_folding_once_met() -> None:
    source = _source(5 * CHUNK_EXECUTIONS)
    result = QueryEngine(source).execute("SELECT call_id FROM calls LIMIT 7")
    assert len(list(result)) == 7
    assert result.outcome()["resultState"] == "complete"
    assert len(source.table_calls) == 1


def test_views_and_ordered_queries_are_not_chunked() -> None:
    import sqlglot

    from baml_studio.query.chunking import chunkable

    for sql in (
        "SELECT fqn FROM hot_call_paths LIMIT 5",
        "SELECT fqn FROM hot_call_paths_v1",
        "SELECT call_id FROM calls ORDER BY call_id LIMIT 5",
        "SELECT count(*) FROM calls",
    ):
        assert chunkable(sqlglot.parse_one(sql, read="postgres")) == (False, None), sql
    assert chunkable(sqlglot.parse_one("SELECT call_id FROM calls LIMIT 5")) == (True, 5)
