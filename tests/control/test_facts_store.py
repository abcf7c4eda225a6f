"""Batches: round trip, idempotency, conflicts, crash recovery, coalescing, isolation, erasure."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from clickhouse_connect.driver.exceptions import OperationalError
from facts_testkit import RELATIONS, SCOPE_A, SCOPE_B, key, open_store, sample_rows

from baml_studio.control.facts import (
    BatchConflict,
    BatchResult,
    FactStore,
    FactStoreConfig,
    FactStoreUnavailable,
    InvalidBatch,
)
from baml_studio.control.facts.batch import fact_rows


@pytest.fixture
def store(chdb_dsn: str, fact_database: str) -> Iterator[FactStore]:
    with open_store(chdb_dsn, fact_database) as opened:
        yield opened


def run_together(n: int, work: Callable[[int], Any]) -> list[Any]:
    """Run ``work(i)`` on ``n`` threads released at once; results (or exceptions) by i."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n

    def body(i: int) -> None:
        barrier.wait()
        try:
            results[i] = work(i)
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


@pytest.mark.parametrize("relation", sorted(RELATIONS))
def test_round_trip_every_relation(store: FactStore, relation: str) -> None:
    rows = sample_rows(relation, 7)
    result = store.put_batch(key(relation, "root_1"), rows, "sha256:x")
    assert result == BatchResult("created", 7)
    got = store.rows(relation, SCOPE_A, "gen_1")
    assert got.schema.equals(rows.schema)
    assert got.equals(rows)
    assert store.batch_state(SCOPE_A, "gen_1", key(relation, "root_1").batch_id) == ("sha256:x", 7)


def test_empty_batch_is_visible_with_zero_rows(store: FactStore) -> None:
    empty = sample_rows("errors_v1", 0)
    assert store.put_batch(key("errors_v1", "r"), empty, "d").state == "created"
    assert store.put_batch(key("errors_v1", "r"), empty, "d") == BatchResult("existing", 0)
    assert store.rows("errors_v1", SCOPE_A, "gen_1").num_rows == 0


def test_same_batch_twice_is_existing_with_one_copy(store: FactStore, chdb_dsn: str) -> None:
    rows = sample_rows("calls_v1", 5)
    k = key("calls_v1", "r1")
    assert store.put_batch(k, rows, "sha256:1") == BatchResult("created", 5)
    inserts = store.stats.inserts
    assert store.put_batch(k, rows, "sha256:1") == BatchResult("existing", 5)
    assert store.stats.inserts == inserts
    assert store.stats.cache_hits == 1
    assert store.count("calls_v1", SCOPE_A, "gen_1") == 5
    # A second store (a restarted control plane) has no cache: the ledger answers.
    config = FactStoreConfig(dsn=chdb_dsn, database=store.config.database)
    with FactStore.connect(config) as restarted:
        assert restarted.put_batch(k, rows, "sha256:1") == BatchResult("existing", 5)
        assert restarted.stats.inserts == 0
        assert restarted.stats.cache_hits == 0
        with pytest.raises(BatchConflict):
            restarted.put_batch(k, rows, "sha256:2")
    assert store.count("calls_v1", SCOPE_A, "gen_1") == 5


def test_same_batch_id_with_another_digest_conflicts(store: FactStore) -> None:
    k = key("health_v1", "r1")
    store.put_batch(k, sample_rows("health_v1", 2), "sha256:1")
    with pytest.raises(BatchConflict) as caught:
        store.put_batch(k, sample_rows("health_v1", 3), "sha256:2")
    error = caught.value
    assert (error.status, error.code, error.retryable) == (409, "batch_digest_conflict", False)
    assert error.details["visible_content_digest"] == "sha256:1"
    moved = key("health_v1", "other_root", batch_id=k.batch_id)
    with pytest.raises(BatchConflict):
        store.put_batch(moved, sample_rows("health_v1", 2), "sha256:1")
    assert store.rows("health_v1", SCOPE_A, "gen_1").equals(sample_rows("health_v1", 2))


def test_invalid_batches_are_refused_before_any_write(store: FactStore) -> None:
    rows = sample_rows("calls_v1", 2)
    with pytest.raises(InvalidBatch, match="processes_v1"):
        store.put_batch(key("processes_v1", "r"), rows, "d")
    with pytest.raises(InvalidBatch, match="public schema of threads_v1"):
        store.put_batch(key("threads_v1", "r"), rows, "d")
    with_private = rows.append_column("args", pa.array([b"x", None], pa.binary()))
    with pytest.raises(InvalidBatch, match="columns"):
        store.put_batch(key("calls_v1", "r"), with_private, "d")
    with pytest.raises(InvalidBatch, match="partition"):
        store.put_batch(key("calls_v1", "r", partition=-1), rows, "d")
    with pytest.raises(InvalidBatch, match="content_digest"):
        store.put_batch(key("calls_v1", "r"), rows, "")
    assert store.count("calls_v1", SCOPE_A, "gen_1") == 0


def test_rows_written_without_ledger_row_are_not_written_again(store: FactStore) -> None:
    rows = sample_rows("calls_v1", 4)
    k = key("calls_v1", "r1")
    # the crash: intent and rows written, no visible ledger row
    store._tables.insert_intents([(k, "sha256:1", 4)])
    store._tables.insert_facts("calls_v1", fact_rows(k, rows))
    assert store.batch_state(SCOPE_A, "gen_1", k.batch_id) is None
    assert store.put_batch(k, rows, "sha256:1") == BatchResult("created", 4)
    assert store.stats.recovered == 1
    assert store.stats.inserts == 0
    assert store.rows("calls_v1", SCOPE_A, "gen_1").equals(rows)
    assert store.put_batch(k, rows, "sha256:1").state == "existing"


def test_orphan_rows_that_differ_are_replaced(store: FactStore) -> None:
    k = key("errors_v1", "r1")
    store._tables.insert_intents([(k, "sha256:old", 2)])
    store._tables.insert_facts("errors_v1", fact_rows(k, sample_rows("errors_v1", 2, seed="old")))
    rows = sample_rows("errors_v1", 3)
    assert store.put_batch(k, rows, "sha256:new").state == "created"
    assert store.stats.recovered == 0
    assert store.rows("errors_v1", SCOPE_A, "gen_1").equals(rows)


def fail_once(monkeypatch: pytest.MonkeyPatch, store: FactStore, method: str) -> list[int]:
    """Make ``store._tables.<method>`` fail (as the client would) until the patch is undone."""
    calls: list[int] = []

    def broken(*args: object) -> None:
        calls.append(1)

        def raise_(client: object) -> None:
            raise OperationalError("connection reset by peer")

        store._tables.run(method, raise_)

    monkeypatch.setattr(store._tables, method, broken)
    return calls


def test_crash_between_rows_and_ledger_then_retry(
    store: FactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = sample_rows("threads_v1", 3)
    k = key("threads_v1", "r1")
    fail_once(monkeypatch, store, "insert_ledger")
    with pytest.raises(FactStoreUnavailable) as caught:
        store.put_batch(k, rows, "sha256:1")
    assert caught.value.retryable and caught.value.status == 503
    assert store.count("threads_v1", SCOPE_A, "gen_1") == 3  # rows landed, ledger did not
    assert store.batch_state(SCOPE_A, "gen_1", k.batch_id) is None
    monkeypatch.undo()
    assert store.put_batch(k, rows, "sha256:1") == BatchResult("created", 3)
    assert store.stats.recovered == 1
    assert store.rows("threads_v1", SCOPE_A, "gen_1").equals(rows)


def test_insert_failure_fails_every_caller_of_the_group(
    chdb_dsn: str, fact_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_store(chdb_dsn, fact_database, coalesce_linger_ms=50) as store:
        calls = fail_once(monkeypatch, store, "insert_facts")
        rows = sample_rows("health_v1", 2)
        results = run_together(8, lambda i: store.put_batch(key("health_v1", f"r{i}"), rows, "d"))
        assert all(isinstance(r, FactStoreUnavailable) for r in results)
        assert len({id(r) for r in results}) == 8  # each caller has its own exception
        assert len(calls) < 8
        assert store.count("health_v1", SCOPE_A, "gen_1") == 0
        monkeypatch.undo()
        results = run_together(8, lambda i: store.put_batch(key("health_v1", f"r{i}"), rows, "d"))
        assert [r.state for r in results] == ["created"] * 8
        assert store.count("health_v1", SCOPE_A, "gen_1") == 16


def test_two_threads_same_batch_write_once(store: FactStore) -> None:
    rows = sample_rows("calls_v1", 6)
    k = key("calls_v1", "r1")
    results = run_together(2, lambda i: store.put_batch(k, rows, "sha256:1"))
    assert sorted(r.state for r in results) == ["created", "existing"]
    assert store.stats.batches == 1
    assert store.count("calls_v1", SCOPE_A, "gen_1") == 6


def test_two_threads_same_batch_other_digests_one_wins(store: FactStore) -> None:
    k = key("calls_v1", "r1")
    tables = [sample_rows("calls_v1", 2, seed="x"), sample_rows("calls_v1", 3, seed="y")]
    results = run_together(2, lambda i: store.put_batch(k, tables[i], f"sha256:{i}"))
    winners = [i for i, r in enumerate(results) if isinstance(r, BatchResult)]
    losers = [r for r in results if isinstance(r, BatchConflict)]
    assert len(winners) == 1 and len(losers) == 1
    assert results[winners[0]].state == "created"
    assert store.rows("calls_v1", SCOPE_A, "gen_1").equals(tables[winners[0]])


def test_many_small_batches_are_coalesced(chdb_dsn: str, fact_database: str) -> None:
    with open_store(chdb_dsn, fact_database, coalesce_linger_ms=50) as store:
        n = 40
        results = run_together(
            n, lambda i: store.put_batch(key("calls_v1", f"r{i}"), sample_rows("calls_v1", 3), "d")
        )
        assert [r.state for r in results] == ["created"] * n
        assert store.stats.batches == n
        assert store.stats.inserts < n
        assert store.stats.ledger_inserts == store.stats.inserts
        assert store.count("calls_v1", SCOPE_A, "gen_1") == 3 * n
        for i in range(n):
            assert store.batch_state(SCOPE_A, "gen_1", f"r{i}.calls_v1.0") == ("d", 3)


def test_coalesced_group_respects_max_rows(chdb_dsn: str, fact_database: str) -> None:
    with open_store(chdb_dsn, fact_database, coalesce_linger_ms=50, coalesce_max_rows=10) as store:
        results = run_together(
            6,
            lambda i: store.put_batch(key("health_v1", f"r{i}"), sample_rows("health_v1", 4), "d"),
        )
        assert [r.state for r in results] == ["created"] * 6
        assert store.stats.inserts >= 3  # at most two 4-row batches fit under 10 rows
        assert store.count("health_v1", SCOPE_A, "gen_1") == 24


def test_scopes_and_generations_are_isolated(store: FactStore) -> None:
    rows_a = sample_rows("calls_v1", 2, seed="a")
    rows_b = sample_rows("calls_v1", 3, seed="b")
    rows_g2 = sample_rows("calls_v1", 4, seed="g2")
    assert store.put_batch(key("calls_v1", "r1"), rows_a, "sha256:a").state == "created"
    assert store.put_batch(key("calls_v1", "r1", scope=SCOPE_B), rows_b, "sha256:b").state == (
        "created"
    )
    assert store.put_batch(
        key("calls_v1", "r1", generation="gen_2"), rows_g2, "sha256:g"
    ).state == ("created")
    assert store.rows("calls_v1", SCOPE_A, "gen_1").equals(rows_a)
    assert store.rows("calls_v1", SCOPE_B, "gen_1").equals(rows_b)
    assert store.rows("calls_v1", SCOPE_A, "gen_2").equals(rows_g2)
    assert store.count("calls_v1", SCOPE_B, "gen_2") == 0
    assert store.batch_state(SCOPE_B, "gen_1", "r1.calls_v1.0") == ("sha256:b", 3)


def put_roots(store: FactStore, roots: list[str], **where: Any) -> None:
    for root in roots:
        for relation in RELATIONS:
            store.put_batch(key(relation, root, **where), sample_rows(relation, 2), "d")


def test_erase_deletes_only_the_listed_roots_of_one_scope_and_generation(store: FactStore) -> None:
    put_roots(store, ["r1", "r2"])
    put_roots(store, ["r1"], scope=SCOPE_B)
    put_roots(store, ["r1"], generation="gen_2")
    store.erase(SCOPE_A, "gen_1", ["r1", "never_written"])
    for relation in RELATIONS:
        assert store.count(relation, SCOPE_A, "gen_1") == 2  # r2 only
        assert store.count(relation, SCOPE_B, "gen_1") == 2
        assert store.count(relation, SCOPE_A, "gen_2") == 2
        assert store.batch_state(SCOPE_A, "gen_1", f"r1.{relation}.0") is None
        assert store.batch_state(SCOPE_A, "gen_1", f"r2.{relation}.0") == ("d", 2)
        assert store.batch_state(SCOPE_B, "gen_1", f"r1.{relation}.0") == ("d", 2)
    ledger = store.query_arrow(
        f"SELECT root_id FROM {store.config.database}.projection_batches FINAL "
        "WHERE tenant_id = 'tenant_a' AND generation = 'gen_1'",
        {},
    )
    assert set(ledger.column("root_id").to_pylist()) == {"r2"}
    store.erase(SCOPE_A, "gen_1", ["r1"])  # idempotent
    store.erase(SCOPE_A, "gen_1", [])
    assert store.count("calls_v1", SCOPE_A, "gen_1") == 2


def test_erased_batch_can_be_written_again(store: FactStore) -> None:
    rows = sample_rows("calls_v1", 3)
    k = key("calls_v1", "r1")
    store.put_batch(k, rows, "sha256:1")
    store.erase(SCOPE_A, "gen_1", ["r1"])
    assert store.count("calls_v1", SCOPE_A, "gen_1") == 0
    assert store.put_batch(k, rows, "sha256:1") == BatchResult("created", 3)
    assert store.rows("calls_v1", SCOPE_A, "gen_1").equals(rows)
    store.erase(SCOPE_A, "gen_1", ["r1"])
    assert store.put_batch(k, rows, "sha256:other").state == "created"


def test_erase_waits_for_puts_of_its_scope(store: FactStore) -> None:
    rows = sample_rows("health_v1", 2)
    results = run_together(
        9,
        lambda i: (
            store.erase(SCOPE_A, "gen_1", ["r1"])
            if i == 0
            else store.put_batch(key("health_v1", "r1", partition=i), rows, "d")
        ),
    )
    assert not any(isinstance(r, Exception) for r in results)
    ledger = {i for i in range(1, 9) if store.batch_state(SCOPE_A, "gen_1", f"r1.health_v1.{i}")}
    # Every batch is either wholly visible (put after the erasure) or wholly gone.
    assert store.count("health_v1", SCOPE_A, "gen_1") == 2 * len(ledger)


def test_a_lookup_of_several_scopes_and_generations_keeps_each_key_apart(
    store: FactStore,
) -> None:
    """One group's ledger lookup ORs a ``batch_id IN (…)`` per scope and generation: the same
    batch id under another scope or generation is another key, an intent stays an intent."""
    tables = store._tables
    same = "root_1.calls_v1.0"
    visible_keys = [
        key("calls_v1", "root_1", batch_id=same),
        key("calls_v1", "root_1", batch_id=same, scope=SCOPE_B),
        key("calls_v1", "root_2", generation="gen_2"),
        key("calls_v1", "it's", scope=SCOPE_B, generation="gen_2"),  # a quote in the id
    ]
    intent = key("threads_v1", "root_3", scope=SCOPE_B)
    not_asked = [
        key("calls_v1", "root_1", batch_id=same, generation="gen_3"),
        key("calls_v1", "root_2", scope=SCOPE_B),
    ]
    tables.insert_ledger([(k, f"sha256:{i}", i + 1) for i, k in enumerate(visible_keys)])
    tables.insert_ledger([(k, "sha256:n", 1) for k in not_asked])
    tables.insert_intents([(intent, "sha256:i", 9)])
    absent = [
        key("calls_v1", "root_1", batch_id=same, generation="gen_2"),
        key("calls_v1", "root_2"),  # visible under gen_2 only
    ]
    asked = [*visible_keys, intent, *absent]
    visible, intents = tables.lookup(asked)
    assert visible == {
        k.ledger_key: k.entry(f"sha256:{i}", i + 1) for i, k in enumerate(visible_keys)
    }
    assert intents == {intent.ledger_key}
    one_scope, _ = tables.lookup([visible_keys[0], absent[0]])
    assert one_scope == {visible_keys[0].ledger_key: visible_keys[0].entry("sha256:0", 1)}
