"""``FactStore.put_batch_async``: the event-loop path of a batch put (the HTTP route's). Same
outcomes as ``put_batch``; a batch awaits its group instead of parking a thread; the locks of
the synchronous path hold until the batch is decided, even when its caller stops awaiting."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from collections.abc import Iterator

import pytest
from facts_testkit import SCOPE_A, key, open_store, sample_rows

from baml_studio.apierrors import ApiError, Conflict
from baml_studio.control.facts import BatchConflict, BatchResult, FactStore
from baml_studio.control.facts.coalesce import Pending
from baml_studio.gateway.config import Scope


@pytest.fixture
def store(chdb_dsn: str, fact_database: str) -> Iterator[FactStore]:
    with open_store(chdb_dsn, fact_database, coalesce_linger_ms=30) as opened:
        yield opened


def test_created_existing_and_conflict_as_the_synchronous_path(store: FactStore) -> None:
    rows = sample_rows("calls_v1", 4)
    k = key("calls_v1", "r1")

    async def main() -> list[object]:
        first = await store.put_batch_async(k, rows, "sha256:1")
        again = await store.put_batch_async(k, rows, "sha256:1")  # cached: decided in a group
        try:
            await store.put_batch_async(k, sample_rows("calls_v1", 2), "sha256:2")
        except BatchConflict as exc:
            return [first, again, exc]
        return [first, again, None]

    first, again, conflict = asyncio.run(main())
    assert first == BatchResult("created", 4)
    assert again == BatchResult("existing", 4)
    assert isinstance(conflict, BatchConflict)
    assert store.count("calls_v1", SCOPE_A, "gen_1") == 4
    assert len(store._key_locks) == 0  # reason: every lock the puts took is released


def test_many_awaiting_batches_share_groups_without_a_thread_each(store: FactStore) -> None:
    n = 60
    threads_before = threading.active_count()

    async def main() -> list[BatchResult]:
        return list(
            await asyncio.gather(
                *(
                    store.put_batch_async(key("health_v1", f"r{i}"), sample_rows("health_v1"), "d")
                    for i in range(n)
                )
            )
        )

    results = asyncio.run(main())
    assert [r.state for r in results] == ["created"] * n
    assert store.stats.batches == n and store.stats.inserts < n / 4
    assert store.count("health_v1", SCOPE_A, "gen_1") == 3 * n
    # no thread per waiting batch: at most the store's own flusher and insert threads appeared
    assert threading.active_count() - threads_before <= 1 + len(
        store._inserts._threads
    )  # reason: the store's pools


def test_the_same_id_at_once_is_written_once(store: FactStore) -> None:
    rows = sample_rows("calls_v1", 5)
    k = key("calls_v1", "r1")

    async def main() -> list[BatchResult]:
        return list(await asyncio.gather(*(store.put_batch_async(k, rows, "d") for _ in range(4))))

    results = asyncio.run(main())
    assert sorted(r.state for r in results) == ["created", "existing", "existing", "existing"]
    assert store.stats.batches == 1
    assert store.count("calls_v1", SCOPE_A, "gen_1") == 5


def test_an_erasure_holding_the_scope_makes_the_put_wait_for_it(store: FactStore) -> None:
    k = key("health_v1", "r1")
    held, release = threading.Event(), threading.Event()

    def erasure() -> None:
        with store._gate.exclusive(SCOPE_A, "gen_1"):  # reason: an erasure in progress
            held.set()
            release.wait(10)

    eraser = threading.Thread(target=erasure)
    eraser.start()
    assert held.wait(10)

    async def main() -> tuple[bool, BatchResult]:
        task = asyncio.ensure_future(store.put_batch_async(k, sample_rows("health_v1"), "d"))
        await asyncio.sleep(0.3)
        waited = not task.done()
        release.set()
        return waited, await task

    waited, result = asyncio.run(main())
    eraser.join()
    assert waited  # it did not write into a scope an erasure held
    assert result == BatchResult("created", 3)


def test_a_caller_that_stops_awaiting_keeps_the_batch_locked_until_decided(
    store: FactStore,
) -> None:
    rows = sample_rows("calls_v1", 3)
    k = key("calls_v1", "r1")

    async def main() -> tuple[bool, BatchResult]:
        task = asyncio.ensure_future(store.put_batch_async(k, rows, "d"))
        await asyncio.sleep(0)  # enqueued; its group lingers 30 ms
        task.cancel()
        locked = len(store._key_locks) == 1  # reason: still held for the undecided batch
        for _ in range(200):
            if not len(store._key_locks):  # reason: released once decided
                break
            await asyncio.sleep(0.01)
        return locked, await store.put_batch_async(k, rows, "d")

    locked, again = asyncio.run(main())
    assert locked
    assert again == BatchResult("existing", 3)  # the abandoned put still landed, once
    assert store.count("calls_v1", SCOPE_A, "gen_1") == 3


def test_repeats_from_the_cache_share_groups_and_generation_checks(
    store: FactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay's repeats: answered from the ledger cache in groups, one generation check per
    group and no ledger query, not one metastore read each; a refusal still reaches each."""
    n = 40
    keys = [key("health_v1", f"r{i}") for i in range(n)]
    rows = sample_rows("health_v1")

    async def put_all(digest: str) -> list[object]:
        puts = (store.put_batch_async(k, rows, digest) for k in keys)
        return list(await asyncio.gather(*puts, return_exceptions=True))

    assert asyncio.run(put_all("d")) == [BatchResult("created", 3)] * n
    checks: list[tuple[Scope, str]] = []
    refuse = False

    def admission(scope: Scope, generation: str) -> ApiError | None:
        checks.append((scope, generation))
        return Conflict("not active", code="inactive_generation") if refuse else None

    store.admit_with(admission)
    lookups = 0
    real_lookup = store._tables.lookup

    def counted(keys: object) -> object:
        nonlocal lookups
        lookups += 1
        return real_lookup(keys)  # type: ignore[arg-type]  # reason: a pass-through

    monkeypatch.setattr(store._tables, "lookup", counted)
    hits = store.stats.cache_hits
    repeats = asyncio.run(put_all("d"))
    assert repeats == [BatchResult("existing", 3)] * n
    assert store.stats.cache_hits - hits == n and lookups == 0
    assert 1 <= len(checks) < n / 4
    conflicts = asyncio.run(put_all("other digest"))
    assert all(isinstance(c, BatchConflict) for c in conflicts)
    refuse = True
    refused = asyncio.run(put_all("d"))
    assert all(isinstance(r, Conflict) and r.code == "inactive_generation" for r in refused)
    assert lookups == 0 and len(store._key_locks) == 0  # reason: every lock released


def test_a_decided_batch_is_freed_without_the_cycle_collector(
    store: FactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing of a put stays in a reference cycle once it is answered: its rows and its
    item go when the caller lets go, not at the next collection (a cycle per batch made the
    control plane's young collections ~100 ms each, freeing ~50,000 objects every time)."""
    items: list[weakref.ref[Pending]] = []
    enqueue = store._coalescer.enqueue

    def watched(item: Pending) -> None:
        items.append(weakref.ref(item))
        enqueue(item)

    monkeypatch.setattr(store._coalescer, "enqueue", watched)
    rows = sample_rows("calls_v1", 3)

    async def main() -> list[BatchResult]:
        return [
            await store.put_batch_async(key("calls_v1", f"r{i}"), rows, f"sha256:{i}")
            for i in range(3)
        ]

    gc.collect()
    gc.disable()
    try:
        assert asyncio.run(main()) == [BatchResult("created", 3)] * 3
        store._coalescer.close()  # its flusher's frame lets go of the last group
        assert len(items) == 3
        assert [ref() for ref in items] == [None, None, None]
    finally:
        gc.enable()
