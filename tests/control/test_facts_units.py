"""The fact store's pure parts and in-process machinery, without ClickHouse."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest
from facts_testkit import SCOPE_A, SCOPE_B, key, sample_rows
from hypothesis import given, settings
from hypothesis import strategies as st

from baml_studio.control.facts import BatchResult, FactStoreConfig, InvalidBatch
from baml_studio.control.facts.batch import (
    LEDGER_SCHEMA,
    check_batch,
    fact_rows,
    fact_rows_many,
    ledger_rows,
)
from baml_studio.control.facts.coalesce import (
    Coalescer,
    CoalescerClosed,
    GroupWriteFailed,
    Pending,
)
from baml_studio.control.facts.ledger import KeyLocks, LedgerCache, LedgerEntry, ScopeGate


def submit_together(coalescer: Coalescer, items: Sequence[Pending]) -> list[Any]:
    barrier = threading.Barrier(len(items))
    results: list[Any] = [None] * len(items)

    def body(i: int) -> None:
        barrier.wait()
        try:
            results[i] = coalescer.submit(items[i])
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=body, args=(i,)) for i in range(len(items))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def pending(i: int, rows: int = 2) -> Pending:
    """A batch waiting for its group; ``done`` is set once it is decided."""
    item = Pending(key("health_v1", f"r{i}"), sample_rows("health_v1", rows), "d")
    item.done = threading.Event()
    return item


class Recorder:
    def __init__(self, fail: Exception | None = None) -> None:
        self.groups: list[list[str]] = []
        self.fail = fail

    def __call__(self, group: Sequence[Pending]) -> None:
        self.groups.append([item.key.root_id for item in group])
        if self.fail is not None:
            raise self.fail
        for item in group:
            item.result = BatchResult("created", item.rows.num_rows)


def test_coalescer_groups_concurrent_batches() -> None:
    recorder = Recorder()
    coalescer = Coalescer(recorder, linger_s=0.2, max_rows=1000)
    results = submit_together(coalescer, [pending(i) for i in range(6)])
    coalescer.close()
    assert results == [BatchResult("created", 2)] * 6
    assert sorted(root for group in recorder.groups for root in group) == [
        f"r{i}" for i in range(6)
    ]
    assert len(recorder.groups) < 6


def test_coalescer_caps_group_rows() -> None:
    recorder = Recorder()
    coalescer = Coalescer(recorder, linger_s=0.2, max_rows=9)
    results = submit_together(coalescer, [pending(i, rows=4) for i in range(5)])
    coalescer.close()
    assert all(isinstance(r, BatchResult) for r in results)
    assert max(len(group) for group in recorder.groups) <= 2
    big = Coalescer(recorder, linger_s=0, max_rows=1)
    assert big.submit(pending(99, rows=3)) == BatchResult("created", 3)  # alone, over the cap
    big.close()


def test_coalescer_group_failure_fails_every_caller() -> None:
    cause = RuntimeError("insert failed")
    coalescer = Coalescer(Recorder(fail=cause), linger_s=0.1, max_rows=1000)
    results = submit_together(coalescer, [pending(i) for i in range(4)])
    coalescer.close()
    assert all(isinstance(r, GroupWriteFailed) for r in results)
    assert all(r.__cause__ is cause for r in results)
    assert len({id(r) for r in results}) == 4


def test_coalescer_keeps_per_batch_outcomes() -> None:
    conflict = ValueError("conflict for r1")

    def write(group: Sequence[Pending]) -> None:
        for item in group:
            if item.key.root_id == "r1":
                item.error = conflict
            else:
                item.result = BatchResult("existing", 0)
        raise RuntimeError("the rest failed")  # decided items keep their outcome

    coalescer = Coalescer(write, linger_s=0.1, max_rows=1000)
    results = submit_together(coalescer, [pending(i) for i in range(3)])
    coalescer.close()
    assert results[1] is conflict
    assert results[0] == results[2] == BatchResult("existing", 0)


def test_coalescer_groups_batches_of_different_relations() -> None:
    seen: list[list[str]] = []

    def write(group: Sequence[Pending]) -> None:
        seen.append(sorted(item.key.relation for item in group))
        for item in group:
            item.result = BatchResult("created", item.rows.num_rows)

    relations = ["calls_v1", "threads_v1", "health_v1", "errors_v1"]
    items = [Pending(key(r, "r1"), sample_rows(r, 2), "d") for r in relations]
    coalescer = Coalescer(write, linger_s=0.3, max_rows=1000)
    results = submit_together(coalescer, items)
    coalescer.close()
    assert results == [BatchResult("created", 2)] * 4
    assert sorted(r for group in seen for r in group) == sorted(relations)
    assert len(seen) < 4  # at least two relations shared a group


def test_coalescer_writers_decide_every_batch_once() -> None:
    lock = threading.Lock()
    written: list[str] = []
    threads: set[str] = set()

    def write(group: Sequence[Pending]) -> None:
        with lock:
            threads.add(threading.current_thread().name)
            written.extend(item.key.root_id for item in group)
        for item in group:
            item.result = BatchResult("created", item.rows.num_rows)

    coalescer = Coalescer(write, linger_s=0.001, max_rows=4, writers=3)
    results = submit_together(coalescer, [pending(i, rows=2) for i in range(40)])
    coalescer.close()
    assert results == [BatchResult("created", 2)] * 40
    assert sorted(written) == sorted(f"r{i}" for i in range(40))
    assert threads <= {"facts-coalesce-0", "facts-coalesce-1", "facts-coalesce-2"}
    with pytest.raises(ValueError, match="writers"):
        Coalescer(write, linger_s=0, max_rows=1, writers=0)


def test_coalescer_close_flushes_then_refuses() -> None:
    recorder = Recorder()
    coalescer = Coalescer(recorder, linger_s=0, max_rows=10)
    assert coalescer.submit(pending(1)).state == "created"
    coalescer.close()
    with pytest.raises(CoalescerClosed):
        coalescer.submit(pending(2))
    assert recorder.groups == [["r1"]]


def test_ledger_cache_is_bounded_and_drops_roots() -> None:
    cache = LedgerCache(capacity=3)
    entry = LedgerEntry("d", 1, "r1", "calls_v1", 0)
    for i in range(5):
        cache.put((SCOPE_A, "g", f"b{i}"), entry)
    assert len(cache) == 3
    assert cache.get((SCOPE_A, "g", "b0")) is None
    assert cache.get((SCOPE_A, "g", "b4")) == entry
    cache.put((SCOPE_B, "g", "b9"), entry)
    cache.put((SCOPE_A, "g2", "b8"), entry)
    assert cache.drop_roots(SCOPE_A, "g", frozenset({"r1"})) == 1
    assert cache.get((SCOPE_B, "g", "b9")) == entry
    assert cache.get((SCOPE_A, "g2", "b8")) == entry
    disabled = LedgerCache(capacity=0)
    disabled.put((SCOPE_A, "g", "b"), entry)
    assert disabled.get((SCOPE_A, "g", "b")) is None


def test_key_locks_serialise_one_key_and_clean_up() -> None:
    locks = KeyLocks()
    inside = threading.Event()
    release = threading.Event()
    order: list[str] = []

    def first() -> None:
        with locks.hold("k"):
            inside.set()
            release.wait()
            order.append("first")

    thread = threading.Thread(target=first)
    thread.start()
    inside.wait()
    with locks.hold("other"):
        order.append("other")  # another key is not blocked
    release.set()
    with locks.hold("k"):
        order.append("second")
    thread.join()
    assert order == ["other", "first", "second"]
    assert len(locks) == 0


def test_scope_gate_erasure_excludes_puts_of_its_scope_only() -> None:
    gate = ScopeGate()
    holding = threading.Event()
    done = threading.Event()
    with gate.shared(SCOPE_A, "g"):

        def erase() -> None:
            with gate.exclusive(SCOPE_A, "g"):
                holding.set()
            done.set()

        thread = threading.Thread(target=erase)
        thread.start()
        with gate.exclusive(SCOPE_B, "g"):
            pass  # another scope is not blocked
        assert not holding.wait(0.05)
    thread.join()
    assert done.is_set()


def test_fact_rows_add_internal_columns() -> None:
    rows = sample_rows("calls_v1", 3)
    k = key("calls_v1", "root_1", generation="gen_9")
    table = fact_rows(k, rows)
    assert table.column_names[: rows.num_columns] == rows.column_names
    assert table.select(rows.column_names).equals(rows)
    tail = table.select(table.column_names[rows.num_columns :]).to_pylist()
    assert tail[2] == {
        "tenant_id": "tenant_a",
        "project_id": "proj",
        "environment_id": "prod",
        "generation": "gen_9",
        "_root_id": "root_1",
        "_batch_id": "root_1.calls_v1.0",
        "_row": 2,
    }
    assert table.schema.field("_row").type == pa.uint32()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=7), min_size=1, max_size=6), st.data())
def test_fact_rows_of_a_group_equal_each_batch_s_concatenated(
    counts: list[int], data: st.DataObject
) -> None:
    relation = data.draw(st.sampled_from(["calls_v1", "errors_v1", "health_v1"]))
    batches = [
        (
            key(relation, f"root_{i % 3}", partition=i, generation=f"gen_{i % 2}",
                scope=SCOPE_A if i % 2 else SCOPE_B),
            sample_rows(relation, n, seed=f"s{i}"),
        )
        for i, n in enumerate(counts)
    ]  # fmt: skip
    many = fact_rows_many(batches)
    one_by_one = pa.concat_tables([fact_rows(k, rows) for k, rows in batches])
    assert many.schema.equals(one_by_one.schema, check_metadata=True)
    assert many.equals(one_by_one)


def test_ledger_rows() -> None:
    k = key("errors_v1", "root_1", partition=3)
    table = ledger_rows([(k, "sha256:x", 7)], 1_700_000_000_000)
    assert table.schema == LEDGER_SCHEMA
    row = table.to_pylist()[0]
    assert (row["batch_id"], row["partition"], row["row_count"]) == ("root_1.errors_v1.3", 3, 7)


def test_check_batch_refuses_aliases_and_bad_schemas() -> None:
    rows = sample_rows("calls_v1", 1)
    with pytest.raises(InvalidBatch, match="alias"):
        check_batch(key("calls", "r"), rows, "d")
    with pytest.raises(InvalidBatch, match="column 'call_id'"):
        check_batch(key("calls_v1", "r"), rows.set_column(1, "call_id", pa.array([None])), "d")
    with pytest.raises(InvalidBatch, match="batch_id"):
        check_batch(dataclasses.replace(key("calls_v1", "r"), batch_id=""), rows, "d")
    check_batch(key("calls_v1", "r"), rows, "d")


def test_coalescer_lingers_longer_only_when_it_finds_a_backlog() -> None:
    coalescer = Coalescer(Recorder(), linger_s=0.005, max_rows=1000, busy_linger_s=0.06, busy_at=3)
    assert [coalescer.linger_for(n) for n in (0, 1, 2, 3, 50)] == [0.005] * 3 + [0.06] * 2
    plain = Coalescer(Recorder(), linger_s=0.005, max_rows=1000)
    assert plain.linger_for(10_000) == 0.005  # no busy linger unless asked


def test_a_backlog_keeps_the_group_open_for_batches_arriving_meanwhile() -> None:
    """The flusher returns from a slow group to find a backlog: it lingers the busy time, so
    batches that arrive meanwhile join that backlog's group instead of starting another."""
    release, writing = threading.Event(), threading.Event()
    groups: list[list[str]] = []

    def write(group: Sequence[Pending]) -> None:
        groups.append([item.key.root_id for item in group])
        if len(groups) == 1:
            writing.set()
            release.wait(10)  # a slow first group: the backlog builds up behind it
        for item in group:
            item.result = BatchResult("created", item.rows.num_rows)

    coalescer = Coalescer(write, linger_s=0, max_rows=1000, busy_linger_s=2.0, busy_at=4)
    first = pending(0)
    coalescer.enqueue(first)
    assert writing.wait(10)
    backlog = [pending(i) for i in range(1, 6)]
    for item in backlog:
        coalescer.enqueue(item)
    release.set()
    late = [pending(i) for i in range(6, 9)]
    for item in late:  # well inside the 2 s busy linger
        coalescer.enqueue(item)
    for item in [first, *backlog, *late]:
        assert item.done is not None and item.done.wait(10)
    coalescer.close()
    assert groups == [["r0"], [f"r{i}" for i in range(1, 9)]]


def test_fact_store_config_refuses_negative_busy_settings() -> None:
    with pytest.raises(ValueError, match="coalesce_busy_linger_ms"):
        FactStoreConfig(dsn="chdb:///tmp/x", coalesce_busy_linger_ms=-1)
    with pytest.raises(ValueError, match="coalesce_busy_batches"):
        FactStoreConfig(dsn="chdb:///tmp/x", coalesce_busy_batches=0)
