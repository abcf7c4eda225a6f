"""``LocalStoreSource``: the catalog v1 of a local profiles-v1 store (a :class:`CatalogSource`).

Construction fixes the snapshot: it lists every stream's segment names and probes its lock,
opening no segment. Every answer is as of that listing (no segment above a listed high water
is read); :meth:`LocalStoreSource.refreshed` gives a source on a new snapshot that shares the
fold cache. Costs:

* the index (every meta segment) is decoded once, on first use;
* per-execution relations fold the asked executions, reading their data segments (each
  segment once per batch, only their groups), through a :class:`FoldCache`;
* :meth:`LocalStoreSource.root_threads` answers root rows from the index alone, without a data
  file, when only :data:`META_ROOT_COLUMNS` are asked;
* ``store_files_v1`` reads every segment and ``value_index_v1`` every CAS object in full.

Errors::

    BamlStudioError
    └── CatalogError
        └── UnknownRelation     a relation name that is neither a v1 name nor an alias
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa

from baml_studio.catalog.fold import EXECUTION_RELATIONS, fold_rows
from baml_studio.catalog.fold_arrow import concat, to_table
from baml_studio.catalog.fold_cache import FoldCache, FoldKey
from baml_studio.catalog.fold_inputs import ExecutionInputs, ExecutionMeta
from baml_studio.catalog.fold_meta import META_ROOT_COLUMNS, index_state, meta_root_row, status
from baml_studio.catalog.fold_store import function_definition_rows, process_rows
from baml_studio.catalog.load import (
    FunctionTables,
    StoreIndex,
    StreamMarks,
    list_marks,
    load_data,
    load_index,
    store_file_rows,
    value_index_rows,
)
from baml_studio.catalog.schema import (
    BY_NAME,
    CATALOG_VERSION,
    FUNCTION_DEFINITIONS,
    HEALTH,
    PROCESSES,
    STORE_FILES,
    THREADS,
    VALUE_INDEX,
    Relation,
    resolve,
)
from baml_studio.catalog.source import Snapshot, ValueUnavailable
from baml_studio.format.cas import CAS_OVERHEAD_BYTES, CODEC_VALUE
from baml_studio.format.errors import BamlStudioError
from baml_studio.store import StoreIoError, StoreLayout, StoreNotFound, StoreReader

GENERATION_DOMAIN = b"baml-query-generation-v1"
FOLD_BATCH = 128
"""Executions of one process whose data is read and folded together."""


class CatalogError(BamlStudioError):
    """A catalog request that cannot be answered as asked."""


class UnknownRelation(CatalogError):
    def __init__(self, name: str) -> None:
        choices = ", ".join(r.name for r in BY_NAME.values())
        super().__init__(f"unknown relation {name!r}; valid: {choices} (or their aliases)")
        self.name = name


def snapshot_generation(marks: Iterable[StreamMarks]) -> str:
    """Hex SHA-256 of ``b"baml-query-generation-v1"`` then, per stream in euid order,
    ``euid[16] ‖ meta_hw u64 BE ‖ data_hw u64 BE`` (docs/formats.md, "Query snapshot
    generation")."""
    digest = hashlib.sha256(GENERATION_DOMAIN)
    for mark in sorted(marks, key=lambda m: m.euid):
        digest.update(mark.euid + mark.meta_hw.to_bytes(8, "big") + mark.data_hw.to_bytes(8, "big"))
    return digest.hexdigest()


def _relation(name: str) -> Relation:
    relation = BY_NAME.get(name) or resolve(name)
    if relation is None:
        raise UnknownRelation(name)
    return relation


class LocalStoreSource:
    """Catalog v1 over the store at ``root`` (a ``profiles-v1`` directory), as of now."""

    def __init__(
        self, root: Path, *, cache: FoldCache | None = None, fold_workers: int = 4
    ) -> None:
        self.root = Path(root)
        self.cache = cache if cache is not None else FoldCache()
        self.fold_workers = max(1, fold_workers)
        self._reader = StoreReader(self.root)
        self._marks = {m.euid: m for m in list_marks(self._reader)}
        self._snapshot = Snapshot(
            CATALOG_VERSION,
            snapshot_generation(self._marks.values()),
            max((m.data_hw for m in self._marks.values()), default=0),
        )
        self._function_tables = FunctionTables(self._reader)
        self._index: StoreIndex | None = None
        self._lock = threading.Lock()

    def refreshed(self) -> LocalStoreSource:
        """A source on a new snapshot of the same store, sharing this one's fold cache."""
        return LocalStoreSource(self.root, cache=self.cache, fold_workers=self.fold_workers)

    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def index(self) -> StoreIndex:
        """The meta plane of the snapshot (decoded on first use; opens no data file)."""
        with self._lock:
            if self._index is None:
                self._index = load_index(self._reader, self._marks.values())
            return self._index

    def execution_ids(self) -> list[str]:
        return [m.execution_id for m in self.index.executions]

    def tables(
        self, relations: Collection[str], execution_ids: Collection[str] | None
    ) -> dict[str, pa.Table]:
        wanted = [_relation(name) for name in relations]
        out: dict[str, pa.Table] = {}
        per_execution = [r for r in wanted if r.name in EXECUTION_RELATIONS]
        if per_execution:
            folds = self._folds(self._select(execution_ids))
            for relation in per_execution:
                out[relation.name] = concat(relation, (f[relation.name] for f in folds))
        for relation in wanted:
            if relation.name not in out and relation.name not in EXECUTION_RELATIONS:
                out[relation.name] = self._store_table(relation)
        return out

    def root_threads(
        self, execution_ids: Collection[str] | None = None, columns: Collection[str] | None = None
    ) -> pa.Table:
        """The root rows of ``threads_v1`` (one per listed execution), projected to
        ``columns`` in schema order (all if None; ``execution_id`` if empty, so the rows stay
        countable). Opens no data file when every column is in :data:`META_ROOT_COLUMNS`;
        otherwise folds the executions."""
        names = [f.name for f in THREADS.schema()]
        asked = set(names if columns is None else columns) or {"execution_id"}
        unknown = asked - set(names)
        if unknown:
            raise CatalogError(f"threads_v1 has no column(s) {sorted(unknown)}; valid: {names}")
        keep = [n for n in names if n in asked]
        metas = self._select(execution_ids)
        if asked <= META_ROOT_COLUMNS:
            processes = self.index.processes
            rows = [meta_root_row(m, processes[m.root.euid]) for m in metas]
            schema = pa.schema([THREADS.column(n).field() for n in keep])
            arrays = [pa.array([r[f.name] for r in rows], type=f.type) for f in schema]
            return pa.Table.from_arrays(arrays, schema=schema)
        threads = self.tables([THREADS.name], [m.execution_id for m in metas])[THREADS.name]
        roots = threads.filter(threads["parent_thread_id"].is_null())
        return roots.select(keep)

    def damage(self, execution_ids: Collection[str] | None) -> dict[str, str]:
        """Executions (of ``execution_ids``, all if None) whose evidence is not whole, each with
        the UnavailableReason that best names why: ``lost`` (missing data segment, group count
        mismatch, ended without RootEnded), ``corrupt`` (corrupt segment, unresolved
        dependency) or ``pending`` (still running). Folds them (cached) to find out."""
        metas = self._select(execution_ids)
        out: dict[str, str] = {}
        for meta, folded in zip(metas, self._folds(metas), strict=True):
            health = folded[HEALTH.name].to_pylist()
            issues = [r["reason"] for r in health if r["metric"] == "data_issue"]
            if issues:
                out[meta.execution_id] = _damage_reason(issues[0], meta, self)
        return out

    def read_value(self, codec: int, cid: bytes, max_bytes: int) -> bytes:
        if codec != CODEC_VALUE:
            raise ValueUnavailable("unsupported", f"value codec {codec} (only codec 1 decodes)")
        if len(cid) != 32:
            raise ValueUnavailable("corrupt", f"a CID is 32 bytes, got {len(cid)}")
        path = StoreLayout(self.root).cas_path(cid)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise ValueUnavailable("lost", f"no CAS object {cid.hex()}") from None
        except OSError as exc:
            raise ValueUnavailable("store_unavailable", f"{path}: {exc}") from exc
        if size - CAS_OVERHEAD_BYTES > max_bytes:
            raise ValueUnavailable(
                "truncated", f"value {cid.hex()} is {size - CAS_OVERHEAD_BYTES} bytes"
            )
        try:
            obj = self._reader.read_cas(cid)
        except StoreNotFound:
            raise ValueUnavailable("lost", f"no CAS object {cid.hex()}") from None
        except StoreIoError as exc:
            raise ValueUnavailable("store_unavailable", str(exc)) from exc
        except BamlStudioError as exc:
            raise ValueUnavailable("corrupt", f"CAS object {cid.hex()}: {exc}") from exc
        if obj.codec != codec:
            raise ValueUnavailable("corrupt", f"CAS object {cid.hex()} has codec {obj.codec}")
        return obj.body

    # --- internals ---------------------------------------------------------------------

    def _select(self, execution_ids: Collection[str] | None) -> list[ExecutionMeta]:
        executions = self.index.executions
        if execution_ids is None:
            return list(executions)
        wanted = set(execution_ids)
        return [m for m in executions if m.execution_id in wanted]

    def _key(self, meta: ExecutionMeta) -> FoldKey:
        process = self.index.processes[meta.root.euid]
        lo, hi = meta.data_range(process.data_hw)
        return FoldKey(
            meta.execution_id, lo, hi, meta.ended is not None,
            status(meta, process), index_state(meta, process),
        )  # fmt: skip

    def _folds(self, metas: Sequence[ExecutionMeta]) -> list[dict[str, pa.Table]]:
        """Folded tables of ``metas``, in order: cached ones, and the rest folded in batches
        of one process's executions (in parallel when there are several batches)."""
        keys = [self._key(m) for m in metas]
        found: dict[str, dict[str, pa.Table]] = {}
        missing: dict[bytes, list[ExecutionMeta]] = {}
        for meta, key in zip(metas, keys, strict=True):
            cached = self.cache.get(key)
            if cached is not None:
                found[meta.execution_id] = dict(cached)
            else:
                missing.setdefault(meta.root.euid, []).append(meta)
        batches = [
            group[i : i + FOLD_BATCH]
            for group in missing.values()
            for i in range(0, len(group), FOLD_BATCH)
        ]
        workers = min(self.fold_workers, len(batches))
        if workers > 1:
            with ThreadPoolExecutor(workers, thread_name_prefix="baml-fold") as pool:
                results = list(pool.map(self._fold_batch, batches))
        else:
            results = [self._fold_batch(batch) for batch in batches]
        for result in results:
            found.update(result)
        return [found[m.execution_id] for m in metas]

    def _fold_batch(self, metas: list[ExecutionMeta]) -> dict[str, dict[str, pa.Table]]:
        """Fold a batch of one process's executions into one table per relation, then cache
        and return each execution's zero-copy slice of it."""
        mark = self._marks[metas[0].root.euid]
        process = self.index.processes[mark.euid]
        reads = load_data(self._reader, mark, metas)
        rows: dict[str, list[dict[str, Any]]] = {name: [] for name in EXECUTION_RELATIONS}
        bounds: list[dict[str, tuple[int, int]]] = []
        for meta in metas:
            engine = meta.engine
            table = self._function_tables.get(None if engine is None else engine.function_table_cid)
            folded = fold_rows(ExecutionInputs(process, meta, table, reads[meta.root]))
            spans = {}
            for name, part in folded.items():
                spans[name] = (len(rows[name]), len(part))
                rows[name].extend(part)
            bounds.append(spans)
        batch = {name: to_table(BY_NAME[name], part) for name, part in rows.items()}
        row_bytes = {
            name: t.get_total_buffer_size() / max(1, t.num_rows) for name, t in batch.items()
        }
        out: dict[str, dict[str, pa.Table]] = {}
        for meta, spans in zip(metas, bounds, strict=True):
            tables = {name: batch[name].slice(*spans[name]) for name in EXECUTION_RELATIONS}
            size = sum(int(row_bytes[name] * spans[name][1]) for name in EXECUTION_RELATIONS)
            self.cache.put(self._key(meta), tables, size)
            out[meta.execution_id] = tables
        return out

    def _store_table(self, relation: Relation) -> pa.Table:
        if relation is FUNCTION_DEFINITIONS:
            rows = function_definition_rows(self.index.engines, self._function_tables.get)
        elif relation is PROCESSES:
            rows = process_rows(self.index.processes.values())
        elif relation is STORE_FILES:
            rows = store_file_rows(self._reader, self._marks.values())
        elif relation is VALUE_INDEX:
            rows = value_index_rows(self._reader)
        else:
            raise CatalogError(f"{relation.name} is not a store relation")
        return to_table(relation, rows)


def _damage_reason(issue: str, meta: ExecutionMeta, source: LocalStoreSource) -> str:
    if issue.startswith(("CorruptDataSegment", "UnresolvedDependency")):
        return "corrupt"
    if issue.startswith("NoRootEnded"):
        process = source.index.processes[meta.root.euid]
        return "pending" if status(meta, process) == "running" else "lost"
    return "lost"
