"""Read-only budgeted queries, error mapping, connections, and the one-chDB-path guard."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError
from facts_testkit import SCOPE_A, key, open_store, sample_rows

from baml_studio.apierrors import ApiError, error_body
from baml_studio.control.facts import (
    BudgetExceeded,
    ChdbPathInUse,
    FactStore,
    FactStoreConfig,
    FactStoreUnavailable,
    QueryCaps,
    QueryRejected,
)
from baml_studio.control.facts.budget import budget_settings, parse_settings, settings_clause
from baml_studio.control.facts.connection import ClientPool, translate


@pytest.fixture
def store(chdb_dsn: str, fact_database: str) -> Iterator[FactStore]:
    with open_store(chdb_dsn, fact_database) as opened:
        for i in range(4):
            opened.put_batch(key("calls_v1", f"r{i}"), sample_rows("calls_v1", 25), "d")
        yield opened


def calls(store: FactStore) -> str:
    return f"{store.config.database}.calls_v1"


def test_query_returns_arrow(store: FactStore) -> None:
    table = store.query_arrow(
        f"SELECT count() AS n FROM {calls(store)}", {"max_rows_to_read": 1000}
    )
    assert table.to_pylist() == [{"n": 100}]
    assert store.stats.queries == 1


@pytest.mark.parametrize(
    ("settings", "limit"),
    [
        ({"max_rows_to_read": 10}, "max_rows_to_read"),
        ({"max_bytes_to_read": 100}, "max_bytes_to_read"),
        ({"max_result_rows": 5, "result_overflow_mode": "throw"}, "max_result_rows"),
        ({"max_memory_usage": 1000}, "max_memory_usage"),
    ],
)
def test_budgets_become_budget_exceeded(
    store: FactStore, settings: dict[str, Any], limit: str
) -> None:
    with pytest.raises(BudgetExceeded) as caught:
        store.query_arrow(f"SELECT * FROM {calls(store)} ORDER BY call_id", settings)
    error = caught.value
    assert (error.status, error.code, error.retryable) == (413, "budget_exceeded", False)
    assert error.details["limit"] == limit


def test_time_budget(store: FactStore, chdb_dsn: str) -> None:
    roomy = QueryCaps(max_rows_to_read=10**13, max_bytes_to_read=10**15)
    config = FactStoreConfig(dsn=chdb_dsn, database=store.config.database, query_caps=roomy)
    with FactStore.connect(config) as wide, pytest.raises(BudgetExceeded) as caught:
        wide.query_arrow(
            "SELECT count() FROM numbers(1000000000000) WHERE sipHash64(number) = 1",
            {"max_execution_time": 0.2},
        )
    assert caught.value.details["limit"] == "max_execution_time"


def test_caps_apply_when_the_caller_sets_none(chdb_dsn: str, fact_database: str) -> None:
    with open_store(chdb_dsn, fact_database, query_caps=QueryCaps(max_result_rows=3)) as store:
        store.put_batch(key("health_v1", "r"), sample_rows("health_v1", 5), "d")
        table = f"{fact_database}.health_v1"
        with pytest.raises(BudgetExceeded) as caught:
            store.query_arrow(f"SELECT * FROM {table}", {"max_result_rows": 1000})
        assert caught.value.details["limit"] == "max_result_rows"
        assert store.query_arrow(f"SELECT * FROM {table} LIMIT 3", {}).num_rows == 3


@pytest.mark.parametrize(
    ("sql", "clickhouse_error"),
    [
        ("SELEC 1", "SYNTAX_ERROR"),
        ("SELECT no_such_column FROM {calls}", "UNKNOWN_IDENTIFIER"),
        ("SELECT * FROM {db}.no_such_table", "UNKNOWN_TABLE"),
        ("SELECT no_such_function(1)", "UNKNOWN_FUNCTION"),
        ("SELECT 1 + 'a'", "ILLEGAL_TYPE_OF_ARGUMENT"),
        ("INSERT INTO {calls} SELECT * FROM {calls}", "READONLY"),
        ("SELECT 1 SETTINGS readonly = 0", "READONLY"),
        ("DROP TABLE {calls}", "READONLY"),
        # values the query computes: the same query fails the same way (was a retryable 503)
        ("SELECT intDiv(1, 0)", "ILLEGAL_DIVISION"),
        ("SELECT 1 LIMIT 18446744073709551616", "INVALID_LIMIT_EXPRESSION"),
        ("SELECT toInt64('abc')", "CANNOT_PARSE_TEXT"),
        ("SELECT toDate('x')", "CANNOT_PARSE_DATE"),
        ("SELECT CAST('x' AS UUID)", "CANNOT_PARSE_UUID"),
        ("SELECT throwIf(1)", "FUNCTION_THROW_IF_VALUE_IS_NON_ZERO"),
        ("SELECT repeat('x', 10000000000)", "TOO_LARGE_STRING_SIZE"),
        ("SELECT toDecimal32(1e20, 2)", "DECIMAL_OVERFLOW"),
    ],
)
def test_bad_sql_is_rejected(store: FactStore, sql: str, clickhouse_error: str) -> None:
    text = sql.format(calls=calls(store), db=store.config.database)
    with pytest.raises(QueryRejected) as caught:
        store.query_arrow(text, {})
    error = caught.value
    assert (error.status, error.code, error.retryable) == (400, "query_rejected", False)
    assert error.details["clickhouse_error"] == clickhouse_error
    assert store.count("calls_v1", SCOPE_A, "gen_1") == 100


def test_callers_readonly_is_overridden(store: FactStore) -> None:
    with pytest.raises(QueryRejected):
        store.query_arrow(f"TRUNCATE TABLE {calls(store)}", {"readonly": 0})
    assert store.count("calls_v1", SCOPE_A, "gen_1") == 100


def test_budget_settings_order_and_caps() -> None:
    caps = QueryCaps(max_execution_time=10, max_rows_to_read=1000)
    got = budget_settings(
        {"readonly": 0, "max_rows_to_read": 5000, "max_execution_time": 2.5, "join_use_nulls": 1},
        caps,
    )
    names = list(got)
    assert names[-1] == "readonly" and got["readonly"] == 1
    assert names[:3] == ["max_rows_to_read", "max_execution_time", "join_use_nulls"]
    assert got["max_rows_to_read"] == 1000
    assert got["max_execution_time"] == 2.5
    assert budget_settings({"max_rows_to_read": 0}, caps)["max_rows_to_read"] == 1000
    assert set(caps.as_settings()) <= set(got)
    with pytest.raises(QueryRejected):
        budget_settings({"max_rows_to_read; DROP": 1}, caps)
    with pytest.raises(QueryRejected):
        budget_settings({"max_rows_to_read": "lots"}, caps)


def test_a_client_that_raised_is_closed_and_one_that_answered_is_reused(
    store: FactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[Any] = []
    closed: list[Any] = []
    real_open = store._connector.open

    def spying_open() -> Any:
        client = real_open()
        real_close = client.close

        def close() -> None:
            closed.append(client)
            real_close()

        client.close = close
        opened.append(client)
        return client

    monkeypatch.setattr(store._connector, "open", spying_open)
    with pytest.raises(QueryRejected):
        store.query_arrow(f"SELECT nope FROM {calls(store)}", {})
    assert len(opened) == 1 and closed == opened  # chDB may taint the next answer: never reused
    after_error = store.query_arrow("SELECT 42 AS answer", {})
    assert after_error.to_pylist() == [{"answer": 42}]
    assert len(opened) == 2 and opened[0] is not opened[1]
    again = store.query_arrow("SELECT 43 AS answer", {})
    assert again.to_pylist() == [{"answer": 43}]
    assert len(opened) == 2 and closed == [opened[0]]  # the healthy client served again


def test_a_querys_settings_do_not_outlive_it_on_a_pooled_client(store: FactStore) -> None:
    with pytest.raises(BudgetExceeded):
        store.query_arrow("SELECT number FROM numbers(50)", {"max_result_rows": 10})
    small = store.query_arrow("SELECT number FROM numbers(5)", {"max_result_rows": 10})
    assert small.num_rows == 5
    # the same pooled client: no max_result_rows of 10 left on its session
    assert store.query_arrow("SELECT number FROM numbers(5000)", {}).num_rows == 5000
    store.query_arrow("SELECT 1 AS one", {"join_use_nulls": 1})  # not a capped budget
    settings = store.query_arrow(
        "SELECT name FROM system.settings WHERE changed AND name = 'join_use_nulls'", {}
    )
    assert settings.num_rows == 0
    assert store._queries.idle >= 1


def test_settings_clause_renders_literals_and_leaves_parse_settings_to_the_client() -> None:
    settings = {
        "max_query_size": 300_000,
        "max_execution_time": 2.5,
        "result_overflow_mode": "it's\\",
        "readonly": 1,
    }
    clause = settings_clause(settings)
    assert clause == (
        " SETTINGS max_execution_time = 2.5, result_overflow_mode = 'it\\'s\\\\', readonly = 1"
    )
    assert parse_settings(settings) == {"max_query_size": 300_000}
    assert settings_clause({"max_query_size": 1}) == ""
    with pytest.raises(QueryRejected):
        settings_clause({"max_rows_to_read; DROP": 1})
    with pytest.raises(QueryRejected):
        settings_clause({"max_execution_time": float("nan")})


def test_a_query_longer_than_the_default_max_query_size_runs(store: FactStore) -> None:
    values = ", ".join(f"'{i:08d}'" for i in range(40_000))  # about 440 KB of SQL
    sql = f"SELECT count() AS n FROM {calls(store)} WHERE call_id IN ({values})"
    assert len(sql) > 262_144
    with pytest.raises(QueryRejected):  # ClickHouse's default limit refuses it
        store.query_arrow(sql, {})
    assert store.query_arrow(sql, {"max_query_size": len(sql) + 1}).num_rows == 1


def test_concurrent_queries_each_get_their_answer(store: FactStore) -> None:
    answers: list[Any] = [None] * 8

    def ask(i: int) -> None:
        sql = f"SELECT {i} AS i, count() AS n FROM {calls(store)}"
        try:
            answers[i] = store.query_arrow(sql, {"max_rows_to_read": 10_000}).to_pylist()
        except Exception as exc:
            answers[i] = exc

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [[{"i": i, "n": 100}] for i in range(8)]


class FakeClient:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class FakeConnector:
    def __init__(self) -> None:
        self.opened: list[FakeClient] = []

    def open(self) -> FakeClient:
        self.opened.append(FakeClient())
        return self.opened[-1]


def test_pool_discards_a_client_after_an_error() -> None:
    connector = FakeConnector()
    pool = ClientPool(connector, max_idle=2)  # type: ignore[arg-type]
    with pool.client() as first:
        pass
    with pool.client() as again:
        assert again is first
    with pytest.raises(OperationalError), pool.client() as failing:
        raise OperationalError("boom")
    assert failing.closed and pool.idle == 0
    with pool.client() as fresh:
        assert fresh is not failing
    assert len(connector.opened) == 2
    pool.close()
    assert fresh.closed


def test_internal_failure_closes_the_pooled_client(
    store: FactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    with store._pool.client() as client:
        broken = client
    monkeypatch.setattr(broken, "query", lambda *a, **k: (_ for _ in ()).throw(DatabaseError("x")))
    with pytest.raises(FactStoreUnavailable):
        store.count("calls_v1", SCOPE_A, "gen_1")
    monkeypatch.undo()
    assert store.count("calls_v1", SCOPE_A, "gen_1") == 100


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_server_is_unavailable() -> None:
    config = FactStoreConfig(dsn=f"http://127.0.0.1:{closed_port()}", connect_timeout_s=2)
    with pytest.raises(FactStoreUnavailable) as caught:
        FactStore.connect(config)
    error = caught.value
    assert (error.status, error.code, error.retryable) == (503, "fact_store_unavailable", True)
    assert error.retry_after is not None
    assert error_body(error, "req_1")["error"]["code"] == "fact_store_unavailable"


def test_second_chdb_path_is_refused(store: FactStore, chdb_dsn: str, tmp_path: Path) -> None:
    other = tmp_path / "other-chdb"
    with pytest.raises(ChdbPathInUse) as caught:
        FactStore.connect(FactStoreConfig(dsn=f"chdb://{other}"))
    error = caught.value
    assert error.details == {
        "opened": os.path.realpath(chdb_dsn.removeprefix("chdb://")),
        "requested": os.path.realpath(other),
    }
    assert str(other) in error.message
    assert not other.exists()
    spelled_differently = FactStore.connect(
        FactStoreConfig(dsn=chdb_dsn + "/", database=store.config.database)
    )
    spelled_differently.close()


@pytest.mark.parametrize(
    ("message", "kind", "detail"),
    [
        (
            "Code: 158. DB::Exception: Limit for rows (controlled by 'max_rows_to_read' setting)"
            " exceeded. (TOO_MANY_ROWS)",
            BudgetExceeded,
            "max_rows_to_read",
        ),
        (
            "Code: 159. DB::Exception: Timeout exceeded: elapsed 1 s. (TIMEOUT_EXCEEDED)",
            BudgetExceeded,
            "max_execution_time",
        ),
        (
            "Code: 396. DB::Exception: Limit for result exceeded, max bytes: 10.00 B. "
            "(TOO_MANY_ROWS_OR_BYTES)",
            BudgetExceeded,
            "max_result_bytes",
        ),
        (
            "Code: 999. DB::Exception: Limit for something new exceeded. (NEW_LIMIT)",
            BudgetExceeded,
            "NEW_LIMIT",
        ),
        (
            "Code: 386. DB::Exception: There is no supertype. (NO_COMMON_TYPE)",
            QueryRejected,
            "NO_COMMON_TYPE",
        ),
        (
            "Code: 241. DB::Exception: Query memory limit exceeded: would use 56 KiB. "
            "(MEMORY_LIMIT_EXCEEDED)",
            BudgetExceeded,
            "max_memory_usage",
        ),
        (
            "Code: 241. DB::Exception: Memory limit (total) exceeded: would use 9 GiB. "
            "(MEMORY_LIMIT_EXCEEDED)",
            FactStoreUnavailable,
            None,
        ),
        (
            "Code: 210. DB::NetException: Connection refused. (NETWORK_ERROR)",
            FactStoreUnavailable,
            None,
        ),
        ("HTTPConnectionPool: Max retries exceeded", FactStoreUnavailable, None),
    ],
)
def test_translate(message: str, kind: type[ApiError], detail: str | None) -> None:
    error = translate(DatabaseError(message), "query")
    assert type(error) is kind
    if kind is BudgetExceeded:
        assert error.details["limit"] == detail
    elif kind is QueryRejected:
        assert error.details["clickhouse_error"] == detail


def test_config_refuses_bad_values() -> None:
    with pytest.raises(ValueError, match="scheme"):
        FactStoreConfig(dsn="postgres://x")
    with pytest.raises(ValueError, match="identifier"):
        FactStoreConfig(dsn="chdb:///x", database="a-b; DROP")
    with pytest.raises(ValueError, match="coalesce"):
        FactStoreConfig(dsn="chdb:///x", coalesce_max_rows=0)
