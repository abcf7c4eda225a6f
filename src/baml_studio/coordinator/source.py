"""The coordinator's :class:`~baml_studio.catalog.source.CatalogSource`: public facts from the
control plane, private rows and values from Lance, under one bound snapshot.

For each relation the engine asks for, :meth:`CoordinatorSource.tables`:

1. sends one resident subquery per chunk of executions — ``SELECT <public columns the query
   reads> FROM <relation> WHERE <the query's public pruning predicate> [AND execution_id IN
   (…)]`` — built only from public column names, the query's own public predicates and
   execution ids, never from a value, a private literal or a source path;
2. when the query reads private columns of the relation, reads them from the relation's Lance
   dataset at the bound version, only for the executions those public rows belong to *and* whose
   marker is in the bound ``projected_v1`` (``execution_id IN (…)``, a BTREE lookup);
3. joins the halves on the relation's key. A public row without private row in the bound
   version is *pending*: its value columns hold the pending handle (counted as the ``pending``
   reason, never read as NULL or a non-match), its other private columns are NULL, and its
   execution is remembered in :attr:`CoordinatorSource.pending`.

Value bodies (:meth:`read_value`) come from ``values_v1`` (prefetched in one lookup per chunk
of CIDs when a table is served), else from the bucket's ``cas/values/`` prefix (large values),
through the read cache. Every Lance read counts in :class:`SourceStats`; the private bytes read
are checked against the query's ``max_private_bytes_read``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from baml_studio.catalog.handles import (
    LOSS_PENDING,
    Unavailable,
    encode_handle,
    handle_from_public,
)
from baml_studio.catalog.schema import BY_NAME, Relation, Visibility
from baml_studio.catalog.source import Snapshot, ValueUnavailable
from baml_studio.coordinator.cache import ReadCache
from baml_studio.coordinator.shape import QueryShape
from baml_studio.coordinator.shared import SharedCaches
from baml_studio.coordinator.snapshot import BoundSnapshot
from baml_studio.coordinator.value_index import ROLES, ValuePredicate, matching_cids
from baml_studio.format.ids import value_cid_wire
from baml_studio.objectstore.port import ObjectStore
from baml_studio.projector.evidence import EvidenceReader
from baml_studio.projector.lance_store import (
    PROJECTED,
    VALUE_PATHS,
    VALUES,
    PrivateStore,
    sql_literal,
)
from baml_studio.query.engine import pad_table
from baml_studio.query.errors import BudgetExceeded

ID_CHUNK = 500
"""Execution ids per resident subquery or Lance filter (well inside the 64 KiB SQL limit)."""
SCAN_THREADS = 4
"""Lance reads in flight at once (a process shares one pool of this size)."""
PENDING_HANDLE = encode_handle(Unavailable(LOSS_PENDING))
VALUE_STATE = {"args": "args_state", "output": "output_state", "error": "error_state"}
ERROR_VALUE_STATE = {"value": "value_state"}
VALUE_CODEC = 1

Resident = Callable[[str], pa.Table]
"""Runs one public SQL query under the bound snapshot; returns its Arrow answer."""


@dataclass
class SourceStats:
    """What one query (or, summed, a coordinator) read. Thread-safe through ``lock``."""

    resident_queries: int = 0
    public_rows: int = 0
    lance_scans: int = 0
    lance_rows_read: int = 0
    lance_bytes_read: int = 0
    value_lookups: int = 0
    bucket_value_reads: int = 0
    index_lookups: int = 0
    index_pruned_rows: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    @property
    def private_bytes(self) -> int:
        return self.lance_bytes_read


class CoordinatorSource:
    def __init__(
        self,
        snapshot: BoundSnapshot,
        resident: Resident,
        private: PrivateStore,
        shape: QueryShape,
        *,
        objects: ObjectStore | None = None,
        cache: ReadCache | None = None,
        max_private_bytes: int = 1 << 62,
        stats: SourceStats | None = None,
        shared: SharedCaches | None = None,
    ) -> None:
        self._snapshot = snapshot
        self._resident = resident
        self._private = private
        self._shape = shape
        self._objects = objects
        self._cache = cache or ReadCache.disabled()
        self._max_private = max_private_bytes
        self.stats = stats or SourceStats()
        self._shared = shared or SharedCaches()
        self.pending: set[str] = set()
        """Executions with public facts served whose private rows are not in the bound version."""
        self.private_rows_served = 0
        self._values: dict[bytes, bytes] = {}
        self._other_codec: set[bytes] = set()
        """CIDs whose ``values_v1`` row holds another codec than 1 (handles computed from
        public columns say codec 1; the stored codec says ``unsupported``)."""
        self._matched: dict[ValuePredicate, set[str]] = {}
        self._lock = threading.Lock()

    # --- CatalogSource -------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        s = self._snapshot
        return Snapshot(s.catalog_version, s.generation, s.lance_version)

    def execution_ids(self) -> list[str]:
        """The executions the query's (single) per-execution relation can reach, pruned."""
        names = [n for n in self._shape.relations if "execution_id" in _columns(BY_NAME[n])]
        name = names[0] if len(names) == 1 else "threads_v1"
        where = self._shape.filters.get(name) if len(names) == 1 else None
        sql = f"SELECT DISTINCT execution_id FROM {name}" + (f" WHERE {where}" if where else "")
        table = self._run(sql + " ORDER BY execution_id")
        return [str(x) for x in table["execution_id"].to_pylist()]

    def tables(
        self, relations: Collection[str], execution_ids: Collection[str] | None
    ) -> dict[str, pa.Table]:
        return {name: self._table(BY_NAME[name], execution_ids) for name in relations}

    def read_value(self, codec: int, cid: bytes, max_bytes: int) -> bytes:
        if codec != VALUE_CODEC:
            raise ValueUnavailable("unsupported")
        with self._lock:
            body = self._values.get(cid)
        if body is None:  # the shared layers, then values_v1 (counted as read)
            body = self._fetch_values([cid]).get(cid)
        with self._lock:
            if cid in self._other_codec:
                raise ValueUnavailable("unsupported", f"value {cid.hex()} is not a codec-1 body")
        if body is None:
            body = self._bucket_value(cid)
        if len(body) > max_bytes:
            raise ValueUnavailable("truncated")
        return body

    # --- one relation --------------------------------------------------------------------

    def _table(self, relation: Relation, execution_ids: Collection[str] | None) -> pa.Table:
        wanted = self._shape.columns.get(relation.name)
        columns = _columns(relation) if wanted is None else set(wanted)
        columns |= {c.name for c in relation.columns if c.key}
        private = [
            c.name
            for c in relation.columns
            if c.visibility is Visibility.PRIVATE and c.name in columns
        ]
        states = _state_columns(relation, private)
        predicates = self._shape.values.get(relation.name, ())
        extra = {p.cid_column for p in predicates} | {p.state_column for p in predicates}
        roles = ROLES.get(relation.name, {})
        handles_only = bool(private) and all(name in roles for name in private)
        if handles_only:  # the handles follow from public columns: no Lance row is read
            extra |= {roles[name][0] for name in private} | {roles[name][1] for name in private}
        public = [
            c.name
            for c in relation.columns
            if c.visibility is Visibility.PUBLIC
            and (c.name in columns or c.name in states.values() or c.name in extra)
        ]
        facts = self._public(relation, public, execution_ids)
        if predicates and facts.num_rows:
            facts = self._prune_by_values(facts, predicates)
        if handles_only:
            try:
                facts = self._with_handles(relation, facts, private)
            except ValueError:  # a state the fold never writes: read the stored handles
                facts = self._with_private(relation, facts, private, states)
        elif private:
            facts = self._with_private(relation, facts, private, states)
        return pad_table(facts, relation.schema())

    def _public(
        self, relation: Relation, columns: list[str], execution_ids: Collection[str] | None
    ) -> pa.Table:
        select = ", ".join(columns)
        where = self._shape.filters.get(relation.name)
        per_execution = "execution_id" in _columns(relation)
        if execution_ids is None or not per_execution:
            parts = [self._select(relation, select, where, None)]
        else:
            ids = sorted(execution_ids)
            parts = [
                self._select(relation, select, where, ids[i : i + ID_CHUNK])
                for i in range(0, len(ids), ID_CHUNK)
            ]
        schema = pa.schema([relation.schema().field(c) for c in columns])
        tables = [_conform(t, schema) for t in parts]
        table = pa.concat_tables(tables) if tables else schema.empty_table()
        self.stats.add(public_rows=table.num_rows)
        return table

    def _select(
        self, relation: Relation, select: str, where: str | None, ids: list[str] | None
    ) -> pa.Table:
        conditions = [f"({where})"] if where else []
        if ids is not None:
            conditions.append(f"execution_id IN ({', '.join(sql_literal(i) for i in ids)})")
        sql = f"SELECT {select} FROM {relation.name}"
        if conditions:
            sql += " WHERE " + " AND ".join(conditions)
        return self._run(sql)

    def _run(self, sql: str) -> pa.Table:
        self.stats.add(resident_queries=1)
        return self._resident(sql)

    def _with_private(
        self, relation: Relation, facts: pa.Table, private: list[str], states: dict[str, str]
    ) -> pa.Table:
        keys = [c.name for c in relation.columns if c.key]
        rows = self._private_rows(relation, facts, keys, private)
        left = facts.select(keys).append_column(
            "__row", pa.array(range(facts.num_rows), pa.int64())
        )
        rows = rows.append_column("__hit", pa.repeat(pa.scalar(True), rows.num_rows))
        joined = left.join(rows, keys, join_type="left outer").sort_by("__row")
        hit = pc.fill_null(joined["__hit"], False).to_pylist()
        missing = [i for i, found in enumerate(hit) if not found]
        if "execution_id" in facts.column_names:
            ids = facts["execution_id"].to_pylist()
            self.pending.update(ids[i] for i in missing)
        self.private_rows_served += facts.num_rows - len(missing)
        out = facts
        for name in private:
            column = joined[name]
            state = states.get(name)
            if state is not None and missing:
                column = _pending_handles(column, facts[state], missing)
            out = out.append_column(
                relation.schema().field(name), column.cast(relation.schema().field(name).type)
            )
        self._prefetch(relation, out, private)
        return out

    def _with_handles(self, relation: Relation, facts: pa.Table, private: list[str]) -> pa.Table:
        """``facts`` with their value handle columns computed from the public state and CID
        (:func:`~baml_studio.catalog.handles.handle_from_public`): the handle the projector
        stored in Lance is that same function of the fold's value fact, so reading it back
        would only cost scans. A row of an execution whose marker is not in the bound
        ``projected_v1`` is *pending*, as in :meth:`_with_private`. ``ValueError`` for a
        state/CID pair the fold never writes."""
        roles = ROLES[relation.name]
        executions = facts["execution_id"].to_pylist()
        marked = self._indexed(sorted(set(executions)))
        indexed = [e in marked for e in executions]
        out = facts
        for name in private:
            cid_column, state_column = roles[name]
            states = facts[state_column].to_pylist()
            handles = [
                handle_from_public(state, cid) if ok else _pending_handle(state)
                for ok, state, cid in zip(indexed, states, facts[cid_column].to_pylist(),
                                          strict=True)
            ]  # fmt: skip
            out = out.append_column(relation.schema().field(name), pa.array(handles, pa.binary()))
        self.pending.update(e for e, ok in zip(executions, indexed, strict=True) if not ok)
        self.private_rows_served += sum(indexed)
        self._prefetch(relation, out, private)
        return out

    def _private_rows(
        self, relation: Relation, facts: pa.Table, keys: list[str], private: list[str]
    ) -> pa.Table:
        dataset = self._open(relation.name)
        schema = pa.schema([relation.schema().field(c) for c in keys + private])
        if dataset is None or facts.num_rows == 0:
            return schema.empty_table()
        filters = _row_filters(facts, keys, self._indexed) if "execution_id" in keys else [None]
        parts = list(self._scans(dataset, keys + private, filters))
        table = (
            pa.concat_tables([_conform(p, schema) for p in parts])
            if parts
            else (schema.empty_table())
        )
        if "execution_id" not in keys:
            table = first_per_key(table, keys)
        return table

    def _prune_by_values(self, facts: pa.Table, predicates: tuple[ValuePredicate, ...]) -> pa.Table:
        """``facts`` without the rows the value index proves cannot satisfy ``predicates``:
        an available value of an indexed execution whose CID no predicate's lookup returned.
        Unavailable and pending values stay, for the engine to count."""
        executions = facts["execution_id"].to_pylist()
        indexed = self._indexed(sorted(set(executions)))
        keep = [True] * facts.num_rows
        for predicate in predicates:
            matches = self._matches(predicate)
            if matches is None:
                continue
            states = facts[predicate.state_column].to_pylist()
            cids = facts[predicate.cid_column].to_pylist()
            for i, (state, cid) in enumerate(zip(states, cids, strict=True)):
                if state == "available" and cid is not None and cid not in matches:
                    keep[i] = keep[i] and executions[i] not in indexed
        pruned = facts.filter(pa.array(keep))
        self.stats.add(index_pruned_rows=facts.num_rows - pruned.num_rows)
        return pruned

    def _matches(self, predicate: ValuePredicate) -> set[str] | None:
        """The CIDs that may satisfy ``predicate``; None when there is no index to ask."""
        with self._lock:
            hit = self._matched.get(predicate)
        if hit is not None:
            return hit
        dataset = self._open(VALUE_PATHS)
        if dataset is None:  # no index at this version: it decides nothing
            return None
        self.stats.add(index_lookups=1)
        found = matching_cids(predicate, lambda cols, where: self._scan(dataset, cols, where))
        with self._lock:
            self._matched[predicate] = found
        return found

    def _indexed(self, execution_ids: list[str]) -> set[str]:
        """Those of ``execution_ids`` whose marker is in the bound ``projected_v1`` (the whole
        marker set of a version is read once per coordinator: it never changes)."""
        version = self._snapshot.lance_version
        if version == 0 or not execution_ids:
            return set()
        marked = self._shared.markers.marked(self._private, version, self._read_markers)
        return {e for e in execution_ids if e in marked}

    def _read_markers(self) -> frozenset[str]:
        dataset = self._open(PROJECTED)
        if dataset is None:
            return frozenset()
        return frozenset(self._scan(dataset, ["execution_id"], None)["execution_id"].to_pylist())

    def _open(self, name: str) -> Any:
        """Dataset ``name`` at its bound version (None if it did not exist then)."""
        version = self._snapshot.dataset_versions.get(name)
        if not version:
            return None
        return self._shared.datasets.open(self._private, name, version)

    def _scan(
        self, dataset: object, columns: list[str], where: str | None, *, counted: bool = True
    ) -> pa.Table:
        """One Lance read; its Arrow bytes count as private bytes read unless the caller
        counts them itself (``counted=False``)."""
        table: pa.Table = dataset.to_table(columns=columns, filter=where)  # type: ignore[attr-defined]  # reason: lance is untyped
        self.stats.add(lance_scans=1, lance_rows_read=table.num_rows)
        if counted:
            self._count_private(table.nbytes)
        return table

    def _scans(
        self,
        dataset: object,
        columns: list[str],
        filters: Sequence[str | None],
        *,
        counted: bool = True,
    ) -> Iterator[pa.Table]:
        """:meth:`_scan` of each filter, up to ``SCAN_THREADS`` at a time (Lance releases the
        GIL, and a cold read waits on the disk or the bucket), in the filters' order."""
        if len(filters) <= 1:
            yield from (self._scan(dataset, columns, f, counted=counted) for f in filters)
            return
        futures = [
            _scan_pool().submit(self._scan, dataset, columns, f, counted=counted) for f in filters
        ]
        try:
            for future in futures:
                yield future.result()
        finally:
            for future in futures:
                future.cancel()

    def _count_private(self, nbytes: int) -> None:
        """Count ``nbytes`` of private data read and enforce ``max_private_bytes_read``."""
        self.stats.add(lance_bytes_read=nbytes)
        if self.stats.private_bytes > self._max_private:
            raise BudgetExceeded(
                f"the query read more than {self._max_private} private bytes from Lance",
                "narrow the query (function, time window, execution_id) or raise "
                "budget.max_private_bytes_read",
            )

    # --- values --------------------------------------------------------------------------

    def _prefetch(self, relation: Relation, table: pa.Table, private: list[str]) -> None:
        handles = [n for n in private if n in VALUE_STATE or n in ERROR_VALUE_STATE]
        cids: set[bytes] = set()
        for name in handles:
            for raw in table[name].to_pylist():
                if raw is not None and len(raw) == 35 and raw[0] == 1:
                    cids.add(bytes(raw[3:]))
        with self._lock:
            cids -= set(self._values)
        if cids:
            self._fetch_values(sorted(cids))

    def _fetch_values(self, cids: Iterable[bytes]) -> dict[bytes, bytes]:
        wanted = list(cids)
        found: dict[bytes, bytes] = {}
        outside = []
        for cid in wanted:
            hit = self._shared.values.get(cid)
            if hit is None:
                outside.append(cid)
            else:
                found[cid] = hit
        on_disk = self._cache.get_many("values", [cid.hex() for cid in outside])
        missing = []
        for cid in outside:
            hit = on_disk.get(cid.hex())
            if hit is None:
                missing.append(cid)
            else:
                found[cid] = hit
        # a value body counts its length as private bytes read wherever it comes from (the
        # caches included), so the budget's verdict does not depend on what they hold
        self._count_private(sum(len(b) for b in found.values()))
        dataset = self._open(VALUES)
        if dataset is not None and missing:
            by_wire = {value_cid_wire(c): c for c in missing}
            wires = sorted(by_wire)
            self.stats.add(value_lookups=1)
            filters = [
                f"cid IN ({', '.join(sql_literal(w) for w in wires[i : i + ID_CHUNK])})"
                for i in range(0, len(wires), ID_CHUNK)
            ]
            columns = ["cid", "codec", "body"]
            fills: list[tuple[str, bytes]] = []
            for table in self._scans(dataset, columns, filters, counted=False):
                for wire, codec, body in zip(
                    table["cid"].to_pylist(),
                    table["codec"].to_pylist(),
                    table["body"].to_pylist(),
                    strict=True,
                ):
                    cid = by_wire[wire]
                    if codec != VALUE_CODEC:
                        with self._lock:
                            self._other_codec.add(cid)
                    else:
                        found[cid] = body
                        self._count_private(len(body))
                        fills.append((cid.hex(), body))
                        self._shared.values.put(cid, body)
            self._cache.put_many_later("values", fills)
        with self._lock:
            self._values.update(found)
        return found

    def _bucket_value(self, cid: bytes) -> bytes:
        cached = self._cache.get("cas-values", cid.hex())
        if cached is not None:
            return cached
        if self._objects is None:
            raise ValueUnavailable("lost", "the value is not in values_v1 and no bucket is set")
        reader = EvidenceReader(self._objects, self._snapshot.scope)
        try:
            body = reader.cas_value(cid).body
        except Exception as exc:  # the reader's typed errors: missing, corrupt, unavailable
            reason = "store_unavailable" if isinstance(exc, OSError) else "lost"
            raise ValueUnavailable(reason, f"value {cid.hex()}: {exc}") from exc
        self.stats.add(bucket_value_reads=1, lance_bytes_read=0)
        self._cache.put_later("cas-values", cid.hex(), body)
        return body


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _scan_pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(SCAN_THREADS, thread_name_prefix="lance-scan")
        return _POOL


def _row_filters(
    facts: pa.Table, keys: list[str], indexed: Callable[[list[str]], set[str]]
) -> list[str | None]:
    """Lance filters for the private rows of ``facts``: the indexed executions, in chunks,
    and within them only the rows' own second key (``call_id`` …), so a scan returns the
    candidate rows, not every row of the candidates' executions."""
    executions = facts["execution_id"].to_pylist()
    marked = indexed(sorted(set(executions)))
    other = keys[1] if len(keys) == 2 else None
    by_execution: dict[str, set[str]] = {}
    values = facts[other].to_pylist() if other is not None else [None] * len(executions)
    for execution, value in zip(executions, values, strict=True):
        if execution in marked:
            by_execution.setdefault(execution, set()).add(value)
    ordered = sorted(by_execution)
    filters: list[str | None] = []
    for i in range(0, len(ordered), ID_CHUNK):
        chunk = ordered[i : i + ID_CHUNK]
        where = f"execution_id IN ({', '.join(sql_literal(e) for e in chunk)})"
        if other is not None:
            wanted = sorted({v for e in chunk for v in by_execution[e] if isinstance(v, str)})
            if len(wanted) <= 4 * ID_CHUNK:
                where += f" AND {other} IN ({', '.join(sql_literal(v) for v in wanted)})"
        filters.append(where)
    return filters


def _columns(relation: Relation) -> set[str]:
    return {c.name for c in relation.columns}


def _state_columns(relation: Relation, private: list[str]) -> dict[str, str]:
    """Private value column -> the public state column that says whether it applies."""
    table = ERROR_VALUE_STATE if relation.name == "errors_v1" else VALUE_STATE
    return {name: table[name] for name in private if name in table}


def _pending_handles(column: pa.ChunkedArray, state: pa.ChunkedArray, rows: list[int]) -> pa.Array:
    """``column`` with the rows in ``rows`` replaced: the pending handle where the value role
    applies (its public state is not ``not_applicable``), NULL where it does not."""
    values = column.to_pylist()
    states = state.to_pylist()
    for i in rows:
        values[i] = _pending_handle(states[i])
    return pa.array(values, pa.binary())


def _pending_handle(state: str | None) -> bytes | None:
    """What a value column holds for a pending row: the pending handle where the role applies
    (its public state is not ``not_applicable``), NULL where it does not."""
    return None if state is None or state in ("not_applicable", "none") else PENDING_HANDLE


def first_per_key(table: pa.Table, keys: list[str]) -> pa.Table:
    """The first row of each distinct ``keys`` tuple, in table order."""
    seen: set[tuple[object, ...]] = set()
    keep = []
    for i, key in enumerate(zip(*(table[k].to_pylist() for k in keys), strict=True)):
        if key not in seen:
            seen.add(key)
            keep.append(i)
    return table.take(pa.array(keep, pa.int64()))


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The columns of ``schema`` from ``table``, cast to the catalog types."""
    return pa.Table.from_arrays([table[f.name].cast(f.type) for f in schema], schema=schema)
