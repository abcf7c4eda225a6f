"""The fact store: public facts in ClickHouse (embedded chDB or a server) behind one class.

:meth:`FactStore.put_batch` makes a batch visible exactly once per ``(scope, generation,
batch_id)``. Ledger decisions are serialised per key in-process (ClickHouse has no
compare-and-set); batches of one relation waiting at the same time are decided by one ledger
lookup and written by one fact insert and one ledger insert (:mod:`.coalesce`), rows first,
ledger second. :meth:`FactStore.erase` deletes facts by root. :meth:`FactStore.query_arrow`
runs one caller query, read-only and with budgets, on a pooled client (its settings in
the query's own ``SETTINGS`` clause; a client that raised is closed, never reused). Only our
errors leave.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import anyio
import pyarrow as pa

from baml_studio.apierrors import ApiError
from baml_studio.catalog.schema import PUBLIC_RELATIONS
from baml_studio.control.facts.batch import (
    BatchKey,
    BatchResult,
    FactStoreStats,
    check_batch,
    fact_rows_many,
)
from baml_studio.control.facts.budget import budget_settings, parse_settings, settings_clause
from baml_studio.control.facts.coalesce import (
    Coalescer,
    CoalescerClosed,
    GroupWriteFailed,
    Pending,
)
from baml_studio.control.facts.config import FactStoreConfig
from baml_studio.control.facts.connection import ClientPool, Connector, translate
from baml_studio.control.facts.ddl import (
    LEDGER_TABLE,
    MERGE_SETTING_PROBE,
    in_list_sql,
    public_relation,
    schema_sql,
    scope_where_sql,
)
from baml_studio.control.facts.errors import BatchConflict, FactStoreUnavailable
from baml_studio.control.facts.ledger import KeyLocks, LedgerCache, LedgerEntry, ScopeGate
from baml_studio.control.facts.tables import CLIENT_ERRORS, Tables, batch_where
from baml_studio.gateway.config import Scope

ERASE_CHUNK = 1000
"""Root ids per ``ALTER TABLE … DELETE`` (the erasure API sends at most 1,000)."""


class FactStorePort(Protocol):
    """What the control plane's handlers need of a fact store."""

    def put_batch(self, key: BatchKey, rows: pa.Table, content_digest: str) -> BatchResult: ...

    def erase(self, scope: Scope, generation: str, root_ids: Sequence[str]) -> None: ...

    def query_arrow(self, sql: str, settings: Mapping[str, int | float | str]) -> pa.Table: ...

    def batch_state(
        self, scope: Scope, generation: str, batch_id: str
    ) -> tuple[str, int] | None: ...


Admission = Callable[[Scope, str], ApiError | None]
"""Whether batches of ``(scope, generation)`` may be written or answered now: ``None``, or
the refusal each of them gets (the control plane's: the generation is not the active one)."""


FORMAT_ROOM = 64
"""Bytes the client appends to a query (`` FORMAT ArrowStream``) beyond its SETTINGS clause."""


class FactStore:
    """Public facts of every scope and generation in one ClickHouse database."""

    def __init__(self, config: FactStoreConfig, connector: Connector) -> None:
        self.config = config
        self.stats = FactStoreStats()
        self._connector = connector
        self._pool = ClientPool(connector)
        self._queries = ClientPool(connector)  # caller queries: never the store's statements
        self._tables = Tables(
            self._pool, config.database, compression="none" if config.embedded else "zstd"
        )
        self._cache = LedgerCache(config.ledger_cache_entries)
        self._key_locks = KeyLocks()
        self._gate = ScopeGate()
        self._wakers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopWaker] = (
            weakref.WeakKeyDictionary()
        )
        self._inserts = ThreadPoolExecutor(len(PUBLIC_RELATIONS), thread_name_prefix="facts-insert")
        self._admit: Admission | None = None
        self._coalescer = Coalescer(
            self._write_group,
            linger_s=config.coalesce_linger_ms / 1000,
            max_rows=config.coalesce_max_rows,
            writers=config.coalesce_writers,
            busy_linger_s=config.coalesce_busy_linger_ms / 1000,
            busy_at=config.coalesce_busy_batches,
        )

    @classmethod
    def connect(cls, config: FactStoreConfig) -> FactStore:
        """Open the store and check ClickHouse answers: :class:`FactStoreUnavailable` if it
        does not, :class:`ChdbPathInUse` for a second chDB path in this process."""
        store = cls(config, Connector(config))
        store._tables.command("connect", "SELECT 1")
        return store

    def close(self) -> None:
        """Write what is queued, stop the flushers and close the pooled clients."""
        self._coalescer.close()
        self._inserts.shutdown()
        self._pool.close()
        self._queries.close()

    def __enter__(self) -> FactStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def admit_with(self, admission: Admission) -> None:
        """Check every batch with ``admission`` before it is answered: once per scope and
        generation of a coalesced group (fresh at write time, one metastore read for the
        group), and for a batch answered from the ledger cache."""
        self._admit = admission

    def ensure_schema(self) -> None:
        """Create the database, the six relation tables and the ledger (idempotent); the
        relation tables get ``merge_selector_base`` when the server knows the setting."""
        base = self.config.merge_selector_base
        if base is not None and not self._knows_merge_setting():
            base = None
        for statement in schema_sql(self.config.database, merge_selector_base=base):
            self._tables.command("ensure_schema", statement)

    def _knows_merge_setting(self) -> bool:
        rows = self._tables.run(
            "ensure_schema", lambda client: client.query(MERGE_SETTING_PROBE).result_rows
        )
        return bool(rows and int(rows[0][0]))

    # ----------------------------------------------------------------------------- writes

    def put_batch(self, key: BatchKey, rows: pa.Table, content_digest: str) -> BatchResult:
        """Make ``rows`` (exactly ``key.relation``'s public schema) visible as batch ``key``.

        ``existing`` when the same digest is already visible (nothing written);
        :class:`BatchConflict` when another digest (or another root, relation or partition)
        is visible under the id; else ``created`` once rows and ledger row are visible. Rows
        already written without their ledger row (a crash between the two) are not written
        again: only the ledger row is. :class:`FactStoreUnavailable` is transient."""
        check_batch(key, rows, content_digest)
        with self._gate.shared(key.scope, key.generation), self._key_locks.hold(key.ledger_key):
            cached = self._cache.get(key.ledger_key)
            if cached is not None:
                refusal = None if self._admit is None else self._admit(key.scope, key.generation)
                if refusal is not None:
                    raise refusal
                self.stats.add(cache_hits=1)
                return self._visible(key, cached, content_digest)
            item = Pending(key, rows, content_digest)
            try:
                return self._coalescer.submit(item)
            except (CoalescerClosed, GroupWriteFailed) as exc:
                raise FactStoreUnavailable(str(exc), details={"batch_id": key.batch_id}) from exc
            finally:
                if item.visible is not None:
                    self._cache.put(key.ledger_key, item.visible)

    async def put_batch_async(
        self, key: BatchKey, rows: pa.Table, content_digest: str
    ) -> BatchResult:
        """:meth:`put_batch` for an event loop: the batch waits for its group as a future on
        the loop instead of parking a thread (one loop wake-up per group, not two thread
        hand-offs per batch). Same outcomes. A batch whose id is in the ledger cache waits for
        a group too, which answers it from the cache after the group's one generation check
        (no ledger query; no metastore read per batch, as a replay's repeats would cost).
        When it would have to wait for a lock (an erasure holds the scope's gate, or another
        put holds the batch id), it runs :meth:`put_batch` on a worker thread instead. The
        locks are held until the batch is decided, whether or not the caller still awaits
        it."""
        check_batch(key, rows, content_digest)
        release_gate = self._gate.try_shared(key.scope, key.generation)
        release_key = None if release_gate is None else self._key_locks.try_hold(key.ledger_key)
        if release_gate is None or release_key is None:
            if release_gate is not None:
                release_gate()
            return await anyio.to_thread.run_sync(self.put_batch, key, rows, content_digest)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        item = Pending(key, rows, content_digest, waker=self._waker(loop))
        item.cached = self._cache.get(key.ledger_key)

        def settle() -> None:  # on the loop, once the item is decided
            try:
                if item.visible is not None:
                    self._cache.put(key.ledger_key, item.visible)
            finally:
                release_key()
                release_gate()
                if not future.done():
                    future.set_result(None)

        item.settle = settle
        try:
            self._coalescer.enqueue(item)
        except CoalescerClosed as exc:
            release_key()
            release_gate()
            raise FactStoreUnavailable(str(exc), details={"batch_id": key.batch_id}) from exc
        await asyncio.shield(future)
        try:
            return item.outcome()
        except GroupWriteFailed as exc:
            raise FactStoreUnavailable(str(exc), details={"batch_id": key.batch_id}) from exc

    def _waker(self, loop: asyncio.AbstractEventLoop) -> _LoopWaker:
        waker = self._wakers.get(loop)
        if waker is None:
            waker = self._wakers[loop] = _LoopWaker(loop)
        return waker

    def _visible(self, key: BatchKey, entry: LedgerEntry, content_digest: str) -> BatchResult:
        """The answer to a put of ``key`` when ``entry`` is visible under its id."""
        if entry != key.entry(content_digest, entry.row_count):
            raise BatchConflict(
                f"batch {key.batch_id!r} of generation {key.generation!r} is already visible "
                f"with digest {entry.content_digest} ({entry.relation} partition "
                f"{entry.partition} of root {entry.root_id}); a batch id is written once. "
                "Rebuild into a new generation to change it",
                details={
                    "batch_id": key.batch_id,
                    "generation": key.generation,
                    "visible_content_digest": entry.content_digest,
                },
            )
        self.stats.add(existing=1)
        return BatchResult("existing", entry.row_count)

    def _write_group(self, group: Sequence[Pending]) -> None:
        """Decide and write one coalesced group (on a flusher thread): one ledger lookup;
        one intent insert for the new batches; one fact insert per relation with new
        batches; one visible ledger insert. A batch whose newest ledger row is an intent
        (a crash or failure after its intent) is looked for in its fact table first."""
        group = self._answer_cached(self._admitted(group))
        if not group:
            return
        visible, intents = self._tables.lookup([item.key for item in group])
        new: dict[str, list[Pending]] = {}
        recovered: list[Pending] = []
        for item in group:
            entry = visible.get(item.key.ledger_key)
            if entry is not None:
                item.visible = entry
                try:
                    item.result = self._visible(item.key, entry, item.content_digest)
                except BatchConflict as exc:
                    item.error = exc
            elif item.key.ledger_key in intents and self._recover(item):
                recovered.append(item)
            else:
                new.setdefault(item.key.relation, []).append(item)
        fresh = [item for items in new.values() for item in items]
        intent_at = -1
        if fresh:
            intent_at = self._tables.insert_intents(
                [(item.key, item.content_digest, item.rows.num_rows) for item in fresh]
            )
        inserts = [
            (relation, fact_rows_many([(item.key, item.rows) for item in items]))
            for relation, items in sorted(new.items())
        ]
        # the relations' inserts at once: ClickHouse works on them without holding the GIL
        for table in self._inserts.map(lambda insert: self._insert(*insert), inserts):
            self.stats.add(inserts=1, rows=table.num_rows)
        self.stats.add(batches=len(fresh))
        written = [*recovered, *fresh]
        if written:
            self._tables.insert_ledger(
                [(item.key, item.content_digest, item.rows.num_rows) for item in written],
                written_at_ms=max(time.time_ns() // 1_000_000, intent_at + 1),
            )
            self.stats.add(ledger_inserts=1, recovered=len(recovered))
        for item in written:
            item.visible = item.key.entry(item.content_digest, item.rows.num_rows)
            item.result = BatchResult("created", item.rows.num_rows)

    def _answer_cached(self, group: Sequence[Pending]) -> Sequence[Pending]:
        """Decide the admitted batches queued with a cached ledger entry from it (as
        :meth:`put_batch` does); the others, which need the ledger query."""
        rest = []
        for item in group:
            if item.cached is None:
                rest.append(item)
                continue
            try:
                item.result = self._visible(item.key, item.cached, item.content_digest)
            except BatchConflict as exc:
                item.error = exc
            else:
                self.stats.add(cache_hits=1)
        return rest

    def _admitted(self, group: Sequence[Pending]) -> Sequence[Pending]:
        """The batches of ``group`` the admission lets through; the others get its refusal."""
        if self._admit is None:
            return group
        verdicts: dict[tuple[Scope, str], ApiError | None] = {}
        for item in group:
            scope_generation = (item.key.scope, item.key.generation)
            if scope_generation not in verdicts:
                verdicts[scope_generation] = self._admit(*scope_generation)
        passed = []
        for item in group:
            refusal = verdicts[(item.key.scope, item.key.generation)]
            if refusal is None:
                passed.append(item)
            else:
                item.error = copy.copy(refusal)  # one instance per caller's thread
        return passed

    def _insert(self, relation: str, table: pa.Table) -> pa.Table:
        self._tables.insert_facts(relation, table)
        return table

    def _recover(self, item: Pending) -> bool:
        """Whether the rows already stored under the batch are exactly its rows (then only
        its ledger row is missing). Rows that differ are deleted, so it is written whole."""
        stored = self._tables.batch_rows(item.key)
        if stored.equals(item.rows):
            return True
        if stored.num_rows:
            self._tables.delete(item.key.relation, batch_where(item.key))
        return False

    def erase(self, scope: Scope, generation: str, root_ids: Sequence[str]) -> None:
        """Delete every fact row and ledger row of the listed roots in ``scope`` and
        ``generation``; return once the delete is visible. Idempotent. Puts of the same scope
        and generation wait meanwhile. Ledger rows go first: a crash midway leaves rows
        without a ledger row, which a retried erasure deletes and a re-put completes."""
        roots = sorted(set(root_ids))
        if not roots:
            return
        scope_sql = scope_where_sql(scope, generation)
        chunks = [roots[i : i + ERASE_CHUNK] for i in range(0, len(roots), ERASE_CHUNK)]
        with self._gate.exclusive(scope, generation):
            try:
                for chunk in chunks:
                    where = f"{scope_sql} AND {in_list_sql('root_id', chunk)}"
                    self._tables.delete(LEDGER_TABLE, where)
            finally:
                self._cache.drop_roots(scope, generation, frozenset(roots))
            for relation in PUBLIC_RELATIONS:
                for chunk in chunks:
                    where = f"{scope_sql} AND {in_list_sql('_root_id', chunk)}"
                    self._tables.delete(relation.name, where)
        self.stats.add(erasures=1)

    # ------------------------------------------------------------------------------ reads

    def query_arrow(self, sql: str, settings: Mapping[str, int | float | str]) -> pa.Table:
        """Run one caller query: the caller's settings in order, lowered to the configured
        caps, then ``readonly=1`` last, all in the query's ``SETTINGS`` clause (so they bind
        this query only) but for :data:`~.budget.PARSE_SETTINGS`. The client comes from a pool
        of caller-query clients and goes back only if the query succeeded: after an error chDB
        can prepend the failed query's partial output to the next result on that connection.
        :class:`BudgetExceeded` (``details["limit"]``), :class:`QueryRejected` or
        :class:`FactStoreUnavailable` on failure."""
        effective = budget_settings(settings, self.config.query_caps)
        clause = settings_clause(effective)
        parse = parse_settings(effective)
        if "max_query_size" in parse:  # the caller sized it for its SQL; ours follows it
            parse["max_query_size"] = int(parse["max_query_size"]) + len(clause) + FORMAT_ROOM
        try:
            with self._queries.client() as client:
                table = client.query_arrow(sql + clause, settings=parse)
        except CLIENT_ERRORS as exc:
            raise translate(exc, "query") from exc
        self.stats.add(queries=1)
        return table

    def count(self, relation: str, scope: Scope, generation: str) -> int:
        """Rows stored for ``relation`` in ``scope`` and ``generation`` (every copy)."""
        rel = public_relation(relation)
        return self._tables.count(rel.name, scope_where_sql(scope, generation))

    def rows(self, relation: str, scope: Scope, generation: str) -> pa.Table:
        """The public rows stored for ``relation`` in ``scope`` and ``generation``, in write
        order (root, batch, position), with the relation's public schema."""
        rel = public_relation(relation)
        return self._tables.select_public(rel.name, scope_where_sql(scope, generation))

    def batch_state(self, scope: Scope, generation: str, batch_id: str) -> tuple[str, int] | None:
        """``(content_digest, row_count)`` of a visible batch, else ``None``."""
        key = (scope, generation, batch_id)
        entry = self._cache.get(key) or self._tables.read_ledger(scope, generation, batch_id)
        return None if entry is None else (entry.content_digest, entry.row_count)


class _LoopWaker:
    """Tells an event loop that items of a group are decided: one ``call_soon_threadsafe``
    per group, which settles each item's future on the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)  # the store's map of wakers is weak on the loop

    def wake(self, items: Sequence[Pending]) -> None:
        loop = self._loop()
        if loop is None:
            return  # the loop is gone: nobody awaits these any more
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody awaits these any more
            loop.call_soon_threadsafe(_settle_all, list(items))


def _settle_all(items: Sequence[Pending]) -> None:
    """Run each item's ``settle`` once, dropping it from the item first: it closes over the
    item, and that cycle would keep the item and its rows alive until a cycle collection."""
    for item in items:
        settle, item.settle = item.settle, None
        if settle is not None:
            settle()
