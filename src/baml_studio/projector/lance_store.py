"""The private datasets in Lance: :class:`PrivateStore` (docs/projector.md, DESIGN.md §4–§5).

Datasets under ``root_uri`` (a local directory, or
``s3://bucket/derived/v1/<tenant>/<project>/<environment>`` with ``storage_options``)::

    dataset          columns                                                   key
    values_v1        cid string, codec uint16, body large_binary, locator      cid
                     string
    value_paths_v1   cid, path, kind string, str_value large_string,           (cid, path)
                     num_value float64 (value_paths.py)
    <relation>       row_id string, execution_id string, then the relation's   row_id
                     private_schema columns (value handles are binary)
    projected_v1     execution_id, root_id, process_id string, projected_at    execution_id
                     timestamp[us, UTC]

A dataset is created by its first write. ``projected_v1`` is the commit marker: an execution is
indexed at a version of ``projected_v1`` iff its row is there, and :meth:`write_execution`
writes it last, after every relation, so a crash in between leaves no marker and a redelivery
rewrites the same rows (same row ids, update on match).

Writers. Every write of one dataset holds its writer lock: a process-wide lock per dataset URI
and, for a local root, an exclusive ``flock`` on ``<root>/<dataset>.lock``, so one writer per
dataset runs at a time across threads and processes. Under the lock a write reads the newest
version, finds the keys already there (:class:`~.fragment_keys.FragmentKeys`: each fragment's
keys read once and remembered) and appends the rows of new keys as one fragment; only an update
of keys already there (a redelivery of private rows) takes ``merge_insert``. Lance rebases the
commit over compatible concurrent commits, and a :class:`lance.commit.CommitConflictError` re-
plans the write against the newest version (bounded attempts, exponential backoff) — never a
blind re-append. Lance cannot lock an object store: on ``s3://`` several projector *processes*
writing one dataset must be serialised by the caller (one projector per
tenant/project/environment), because two concurrent inserts of the same new keys can both
commit (upstream Lance behaviour; without the lock, a local probe also lost a whole write when
two processes created one dataset at once). The alternative this module does not take is a
``lance-schema:unenforced-primary-key=true`` key field merged with ``use_index(False)``.

Ingest writes a batch's ``value_paths_v1`` rows before its ``values_v1`` rows, so a cid
present in ``values_v1`` always has its paths; a crash in between is repaired by the next
ingest of the cid, which appends paths only for cids that have none (one commit holds all
rows of a batch, so a cid's paths are all there or none are).

Maintenance: schedule :meth:`PrivateStore.compact` (for example hourly); it builds the scalar
indexes of :data:`INDEXES` (BTREE for ids and cids, NGRAM on ``value_paths_v1.str_value`` for
``contains`` / ``LIKE '%x%'``), folds small fragments together and removes versions older than
the retention, except the versions running queries leased (:attr:`PrivateStore.leases`,
:mod:`.version_leases`) and those superseded less than :data:`SUPERSEDED_GRACE` ago.

Errors (the ``ProjectorError`` tree of :mod:`.errors`; retry on ``exc.transient``)::

    ProjectorError
    ├── LanceCommitFailed               a write did not commit (conflicts past the retry
    │                                   budget, I/O); transient: every write is idempotent
    ├── PrivateStoreError               bad input or an unusable dataset; terminal
    └── PrivateStoreUnavailable         a read failed on I/O; transient
"""

from __future__ import annotations

import contextlib
import fcntl
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

import lance
import pyarrow as pa
import pyarrow.compute as pc
from lance.commit import CommitConflictError

from baml_studio.catalog.schema import RELATIONS
from baml_studio.catalog.split import private_schema
from baml_studio.format.errors import ValueCorrupt
from baml_studio.format.ids import InvalidWireId, parse_value_cid_wire, value_cid
from baml_studio.projector.errors import LanceCommitFailed, ProjectorError
from baml_studio.projector.fragment_keys import FragmentKeys
from baml_studio.projector.value_paths import (
    corrupt_row,
    leaf_rows,
    paths_table,
)
from baml_studio.projector.version_leases import (
    VersionLeases,
    dataset_versions,
    removable,
    version_stamps,
)

VALUES = "values_v1"
VALUE_PATHS = "value_paths_v1"
PROJECTED = "projected_v1"
RELATION_DATASETS: tuple[str, ...] = tuple(
    r.name for r in RELATIONS if not r.internal and r.private_columns()
)
"""Public relations with private columns, each with its own dataset."""
DATASETS: tuple[str, ...] = (VALUES, VALUE_PATHS, *RELATION_DATASETS, PROJECTED)

VALUES_SCHEMA = pa.schema(
    [
        pa.field("cid", pa.string(), nullable=False),
        pa.field("codec", pa.uint16(), nullable=False),
        pa.field("body", pa.large_binary(), nullable=False),
        pa.field("locator", pa.string(), nullable=False),
    ]
)
PROJECTED_SCHEMA = pa.schema(
    [
        pa.field("execution_id", pa.string(), nullable=False),
        pa.field("root_id", pa.string(), nullable=False),
        pa.field("process_id", pa.string(), nullable=False),
        pa.field("projected_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
IndexType = Literal["BTREE", "NGRAM"]
INDEXES: dict[str, tuple[tuple[str, IndexType], ...]] = {
    VALUES: (("cid", "BTREE"),),
    VALUE_PATHS: (("cid", "BTREE"), ("path", "BTREE"), ("str_value", "NGRAM")),
    PROJECTED: (("execution_id", "BTREE"),),
    **{name: (("row_id", "BTREE"), ("execution_id", "BTREE")) for name in RELATION_DATASETS},
}
"""Scalar indexes :meth:`PrivateStore.compact` builds: ``(column, index type)`` per dataset."""
IN_LIST_CHUNK = 1000
DEFAULT_KEY_CACHE_KEYS = 1_000_000
"""Keys of fragments remembered per store (:class:`~.fragment_keys.FragmentKeys`), ~150 MB."""
DEFAULT_MAX_ATTEMPTS = 6
DEFAULT_BACKOFF_S = 0.05
SUPERSEDED_GRACE = timedelta(minutes=10)
"""Compaction keeps a version this long after a newer one was committed (the time a query
that bound it as the newest has to write its lease)."""
MAX_BACKOFF_S = 2.0


DATASET_SCHEMES = frozenset({"file", "s3", "s3+ddb", "gs", "az", "abfss", "memory"})
"""The URI schemes Lance opens datasets under; a root without ``://`` is a local path."""


def check_dataset_root(uri: str) -> str:
    """``uri`` when it is a local path or a URI Lance can open (:data:`DATASET_SCHEMES`);
    ``ValueError`` naming the schemes otherwise (a typo there used to fail every write, and
    quarantine the messages that made them)."""
    if not uri.strip():
        raise ValueError("the Lance datasets' root is empty")
    scheme, sep, rest = uri.partition("://")
    if sep and (scheme.lower() not in DATASET_SCHEMES or not rest.strip("/")):
        raise ValueError(
            f"{uri!r:.120} is not a local path or a URI Lance opens "
            f"({', '.join(sorted(s + '://' for s in DATASET_SCHEMES))})"
        )
    return uri


class PrivateStoreError(ProjectorError):
    """Bad input to the private store (a wrong CID, rows that do not fit the relation), or a
    dataset it cannot use. Terminal: the same call fails the same way."""

    transient = False


class PrivateStoreUnavailable(ProjectorError):
    """A read failed on I/O (the bucket or disk did not answer). Retry later."""

    transient = True


def relation_schema(relation: str) -> pa.Schema:
    """``row_id``, ``execution_id``, then ``private_schema(relation)`` without field metadata."""
    schema = _RELATION_SCHEMAS.get(relation)
    if schema is None:
        schema = _RELATION_SCHEMAS[relation] = _relation_schema(relation)
    return schema


_RELATION_SCHEMAS: dict[str, pa.Schema] = {}
"""Built once per relation (every execution's rows are checked against it)."""


def _relation_schema(relation: str) -> pa.Schema:
    if relation not in RELATION_DATASETS:
        raise PrivateStoreError(
            f"{relation!r} has no private dataset; valid relations: {list(RELATION_DATASETS)}"
        )
    head = [pa.field("row_id", pa.string(), False), pa.field("execution_id", pa.string(), False)]
    rest = [
        pa.field(f.name, f.type, f.nullable)
        for f in private_schema(next(r for r in RELATIONS if r.name == relation))
        if f.name not in ("row_id", "execution_id")
    ]
    return pa.schema(head + rest)


@dataclass(frozen=True, slots=True)
class DatasetCompaction:
    name: str
    version_before: int
    version_after: int
    fragments_removed: int
    fragments_added: int
    indexes_created: tuple[str, ...]
    versions_removed: int
    bytes_removed: int
    kept_from_version: int | None = None
    """The lowest version a live lease named: it and every later version were kept."""


@dataclass(frozen=True, slots=True)
class CompactReport:
    datasets: tuple[DatasetCompaction, ...]
    leases_live: int = 0
    """Live version leases (running queries' bound versions) the compaction respected."""
    leases_malformed: tuple[str, ...] = ()
    """Lease files that could not be decoded (ignored; left for an operator)."""


_PROCESS_LOCKS: dict[str, threading.Lock] = {}
_PROCESS_LOCKS_GUARD = threading.Lock()


def _process_lock(uri: str) -> threading.Lock:
    with _PROCESS_LOCKS_GUARD:
        return _PROCESS_LOCKS.setdefault(uri, threading.Lock())


def sql_literal(text: str) -> str:
    """``text`` as a quoted SQL string literal for a Lance filter."""
    return "'" + text.replace("'", "''") + "'"


def _in_filter(column: str, keys: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(sql_literal(k) for k in keys)})"


def _chunks(keys: Iterable[str]) -> Iterator[list[str]]:
    ordered = sorted(set(keys))
    for start in range(0, len(ordered), IN_LIST_CHUNK):
        yield ordered[start : start + IN_LIST_CHUNK]


Write = Callable[["lance.LanceDataset | None"], None]


class PrivateStore:
    """The private Lance datasets of one tenant/project/environment (module docstring)."""

    def __init__(
        self,
        root_uri: str,
        *,
        storage_options: dict[str, str] | None = None,
        clock: Callable[[], datetime] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        backoff_s: float = DEFAULT_BACKOFF_S,
        key_cache_keys: int = DEFAULT_KEY_CACHE_KEYS,
        fragment_keys: FragmentKeys | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        check_dataset_root(root_uri)
        remote = "://" in root_uri and not root_uri.startswith("file://")
        local = None if remote else Path(root_uri.removeprefix("file://")).resolve()
        self._local_root = local
        self._root = str(local) if local is not None else root_uri.rstrip("/")
        self._storage_options = dict(storage_options or {})
        self._clock = clock or (lambda: datetime.now(UTC))
        self._sleep = sleep
        self._max_attempts = max_attempts
        self._backoff_s = backoff_s
        self._keys = FragmentKeys(key_cache_keys) if fragment_keys is None else fragment_keys
        self._writers: ThreadPoolExecutor | None = None
        self._writers_lock = threading.Lock()
        self._leases: VersionLeases | None = None

    @property
    def leases(self) -> VersionLeases:
        """The version leases of this scope (made on first use; :mod:`.version_leases`)."""
        with self._writers_lock:
            if self._leases is None:
                self._leases = VersionLeases(
                    self._root,
                    storage_options=self._storage_options,
                    clock=lambda: self._clock().timestamp(),
                )
            return self._leases

    @property
    def root_uri(self) -> str:
        return self._root

    @property
    def key_cache_keys(self) -> int:
        """Keys of fragments this store remembers (:class:`~.fragment_keys.FragmentKeys`;
        shared with the other stores of its cache, if it was given one)."""
        return self._keys.max_keys

    @property
    def fragment_keys(self) -> FragmentKeys:
        """The remembered fragment keys: the store's own, or the cache it was given."""
        return self._keys

    def uri(self, name: str) -> str:
        """The URI of dataset ``name``."""
        return f"{self._root}/{name}"

    # --- values ---------------------------------------------------------------------------

    def ingest_values(
        self, entries: Iterable[tuple[str, int, bytes, str]], *, verified: bool = False
    ) -> int:
        """Store ``(cid, codec, body, locator)`` entries whose cid is new; return how many.

        Duplicates within the call keep the first entry; every cid must be the wire CID of its
        codec and body (checked here, unless the caller says it is ``verified``: a pack's
        entries, which :func:`~baml_studio.publisher.pack.decode_pack` checked, or a CAS object
        read with :meth:`~.evidence.EvidenceReader.cas_value`). The path rows
        of the new codec-1 values are written first, then the values (so a value present in
        ``values_v1`` always has its paths); a body that does not decode is stored without path
        rows.
        """
        batch: dict[str, tuple[int, bytes, str]] = {}
        for cid, codec, body, locator in entries:
            if cid not in batch:
                if not verified:
                    _check_cid(cid, codec, body)
                batch[cid] = (codec, bytes(body), locator)
        if not batch:
            return 0
        with self._writer(VALUE_PATHS), self._writer(VALUES):
            new = sorted(self.missing_values(batch))
            if not new:
                return 0
            rows = []
            for cid in new:
                codec, body, _ = batch[cid]
                try:
                    rows.extend(leaf_rows(cid, codec, body))
                except ValueCorrupt:  # indexed as undecidable, so index lookups keep it
                    rows.append(corrupt_row(cid))
            if rows:
                self._commit_locked(
                    VALUE_PATHS, self._merge(VALUE_PATHS, paths_table(rows), "cid", update=False)
                )
            values = pa.Table.from_pydict(
                {
                    "cid": new,
                    "codec": [batch[c][0] for c in new],
                    "body": [batch[c][1] for c in new],
                    "locator": [batch[c][2] for c in new],
                },
                schema=VALUES_SCHEMA,
            )
            self._commit_locked(VALUES, self._merge(VALUES, values, "cid", update=False))
        return len(new)

    def missing_values(self, cids: Iterable[str]) -> set[str]:
        """The cids of ``cids`` not in the newest ``values_v1`` (all of them if it is absent)."""
        wanted = set(cids)
        return wanted - self._present(self._open(VALUES), "cid", wanted)

    def get_values(self, cids: Iterable[str]) -> dict[str, tuple[int, bytes]]:
        """``cid -> (codec, body)`` for the cids present; absent cids are left out."""
        ds = self._open(VALUES)
        out: dict[str, tuple[int, bytes]] = {}
        if ds is None:
            return out
        for chunk in _chunks(cids):
            table = self._read(ds, ["cid", "codec", "body"], _in_filter("cid", chunk))
            for cid, codec, body in zip(
                *(table[c].to_pylist() for c in table.column_names), strict=True
            ):
                out[cid] = (codec, body)
        return out

    def delete_values(self, cids: Iterable[str]) -> int:
        """Delete the ``values_v1`` rows of ``cids`` (wire CIDs), then their ``value_paths_v1``
        rows (erasure); the number of values that were present. ``values_v1`` goes first: it
        is what ingest reads to decide a cid is stored, so a crash in between leaves path rows
        without a value (a repeated call removes them), never a value without its paths (which
        ingest would not repair). A dataset holding none of the cids gets no new version."""
        wanted = set(cids)
        present = self._present(self._open(VALUES), "cid", wanted)
        for chunk in _chunks(present):
            self._commit(VALUES, _delete(_in_filter("cid", chunk)))
        with_paths = self._present(self._open(VALUE_PATHS), "cid", wanted)
        for chunk in _chunks(with_paths):
            self._commit(VALUE_PATHS, _delete(_in_filter("cid", chunk)))
        return len(present)

    # --- executions -----------------------------------------------------------------------

    def write_execution(
        self,
        execution_id: str,
        root_id: str,
        process_id: str,
        private: Sequence[tuple[str, pa.Table]],
    ) -> None:
        """Upsert the private rows of one execution by ``row_id``, then its marker.

        Each table holds ``row_id`` and the relation's ``private_schema`` columns
        (``execution_id`` may be left out; if present it must equal ``execution_id``). Rows
        of an earlier run that this run does not produce are kept: projection is
        deterministic; to re-project differently, :meth:`delete_executions` first.
        """
        self.write_executions([(execution_id, root_id, process_id, private)])

    def write_executions(
        self,
        executions: Sequence[tuple[str, str, str, Sequence[tuple[str, pa.Table]]]],
        *,
        unmarked: Sequence[tuple[str, Sequence[tuple[str, pa.Table]]]] = (),
    ) -> None:
        """:meth:`write_execution` for several executions with one commit per dataset: every
        relation's rows of all of them merged at once, then all their markers (last).
        ``unmarked`` are ``(execution_id, [(relation, rows), ...])`` written in the same
        commits without a marker (the engine definitions a kept-out execution carried)."""
        by_relation: dict[str, list[pa.Table]] = {}
        for execution_id, private in unmarked:
            for name, table in private:
                by_relation.setdefault(name, []).append(_prepare_rows(name, table, execution_id))
        markers = []
        for execution_id, root_id, process_id, private in executions:
            names = [name for name, _ in private]
            if len(set(names)) != len(names):
                raise PrivateStoreError(f"execution {execution_id}: a relation repeats in {names}")
            for name, table in private:
                by_relation.setdefault(name, []).append(_prepare_rows(name, table, execution_id))
            markers.append(
                {
                    "execution_id": execution_id,
                    "root_id": root_id,
                    "process_id": process_id,
                    "projected_at": self._clock(),
                }
            )
        if len({m["execution_id"] for m in markers}) != len(markers):
            raise PrivateStoreError("an execution repeats in one write")
        writes = [(name, pa.concat_tables(tables)) for name, tables in by_relation.items()]
        writes = [(name, table) for name, table in writes if table.num_rows]

        def write(item: tuple[str, pa.Table]) -> None:
            name, table = item
            self._commit(name, self._merge(name, table, "row_id", update=True))

        # the relations' datasets at once (each has its own writer lock; Lance writes without
        # the GIL); a failure is raised before the markers, so no marker is written
        list(self._pool().map(write, writes))
        if markers:
            marker = pa.Table.from_pylist(markers, schema=PROJECTED_SCHEMA)
            self._commit(PROJECTED, self._merge(PROJECTED, marker, "execution_id", update=False))

    def projected(self, execution_ids: Iterable[str]) -> set[str]:
        """The ids of ``execution_ids`` with a marker in the newest ``projected_v1``."""
        return self._present(self._open(PROJECTED), "execution_id", set(execution_ids))

    def projected_at(self, version: int) -> set[str]:
        """Every execution id with a marker at ``version`` of ``projected_v1`` (0: none)."""
        if version == 0:
            return set()
        ds = self._open(PROJECTED, version=version)
        if ds is None:
            raise PrivateStoreError(f"{PROJECTED} does not exist; version {version} is unknown")
        return set(self._read(ds, ["execution_id"], None)["execution_id"].to_pylist())

    def version(self, names: Iterable[str] = DATASETS) -> dict[str, int]:
        """The newest version of each of ``names`` (every dataset by default) that exists
        (absent datasets are left out)."""
        out = {}
        for name in names:
            ds = self._open(name)
            if ds is not None:
                out[name] = ds.version
        return out

    def open_dataset(self, name: str, *, version: int | None = None) -> lance.LanceDataset | None:
        """Dataset ``name`` at ``version`` (newest if ``None``) for readers; ``None`` if it
        does not exist. Raises :class:`PrivateStoreError` for an unknown name or version."""
        if name not in DATASETS:
            raise PrivateStoreError(f"unknown dataset {name!r}; valid: {list(DATASETS)}")
        return self._open(name, version=version)

    def delete_executions(self, execution_ids: Iterable[str]) -> None:
        """Delete the rows of ``execution_ids`` from ``projected_v1`` (first, so no execution
        is indexed without its rows) and from every relation dataset. Values stay."""
        ids = set(execution_ids)
        if not ids:
            return
        for name in (PROJECTED, *RELATION_DATASETS):
            for chunk in _chunks(ids):
                self._commit(name, _delete(_in_filter("execution_id", chunk)))

    # --- maintenance ----------------------------------------------------------------------

    def compact(
        self,
        retention: timedelta,
        *,
        now: datetime | None = None,
        superseded_grace: timedelta = SUPERSEDED_GRACE,
    ) -> CompactReport:
        """Compact small fragments, build missing scalar indexes (:data:`INDEXES`), add new
        rows to existing ones, and remove versions older than ``now - retention`` except those
        a live version lease names and every version after them (:mod:`.version_leases`):
        a query bound to a version keeps reading it however old it is. A version that stopped
        being the newest less than ``superseded_grace`` ago stays too (a query that has just
        bound it may not have written its lease yet)."""
        if retention < timedelta(0) or superseded_grace < timedelta(0):
            raise PrivateStoreError(
                f"retention and grace must not be negative, got {retention}, {superseded_grace}"
            )
        now = now or self._clock()
        try:
            floor = self.leases.floor(now=now.timestamp())
        except ProjectorError as exc:
            raise PrivateStoreUnavailable(f"cannot read the version leases: {exc}") from exc
        # Lance stamps versions with the real clock; the cut-offs are in the store's clock
        before = (now - retention).timestamp()
        settled = (now - superseded_grace).timestamp()
        reports = []
        for name in DATASETS:
            with self._writer(name):
                ds = self._open(name)
                if ds is not None:
                    keep = floor.versions.get(name)
                    reports.append(self._compact_one(name, ds, before, keep, settled))
        return CompactReport(tuple(reports), floor.live, floor.malformed)

    def _compact_one(
        self,
        name: str,
        ds: lance.LanceDataset,
        before: float,
        keep: int | None,
        settled: float,
    ) -> DatasetCompaction:
        before_version = ds.version
        try:
            metrics = ds.optimize.compact_files()
            ds = self._require(name)
            existing = {index.name for index in ds.describe_indices()}
            created = []
            for column, index_type in INDEXES[name]:
                index_name = f"{column}_{index_type.lower()}"
                if index_name not in existing:
                    ds.create_scalar_index(column, index_type, name=index_name)
                    created.append(index_name)
            if existing:
                ds.optimize.optimize_indices(index_names=sorted(existing))
            ds = self._require(name)
            doomed = removable(
                version_stamps(dataset_versions(ds)),
                before=before,
                leased=keep,
                settled=settled,
            )
            removed, freed = 0, 0
            if doomed:  # named, not by age: a leased version cannot slip under a cut-off
                stats = ds.cleanup_old_versions(versions=doomed)
                removed, freed = stats.old_versions, stats.bytes_removed
        except OSError as exc:  # CommitConflictError included: compaction is rescheduled
            raise LanceCommitFailed(f"compaction of {self.uri(name)} failed: {exc}") from exc
        return DatasetCompaction(
            name,
            before_version,
            ds.version,
            metrics.fragments_removed,
            metrics.fragments_added,
            tuple(created),
            removed,
            freed,
            keep,
        )

    # --- Lance plumbing -------------------------------------------------------------------

    def _pool(self) -> ThreadPoolExecutor:
        """Threads writing one call's relation datasets side by side (made on first use)."""
        with self._writers_lock:
            if self._writers is None:
                self._writers = ThreadPoolExecutor(
                    len(RELATION_DATASETS), thread_name_prefix="lance-write"
                )
            return self._writers

    @contextlib.contextmanager
    def _writer(self, name: str) -> Iterator[None]:
        """The writer lock of dataset ``name`` (module docstring). Not reentrant."""
        with _process_lock(self.uri(name)):
            if self._local_root is None:
                yield
                return
            self._local_root.mkdir(parents=True, exist_ok=True)
            with open(self._local_root / f"{name}.lock", "a+b") as handle:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _commit(self, name: str, write: Write) -> None:
        with self._writer(name):
            self._commit_locked(name, write)

    def _commit_locked(self, name: str, write: Write) -> None:
        """Run ``write`` against the newest version; re-plan on a commit conflict."""
        for attempt in range(self._max_attempts):
            try:
                write(self._open(name))
                return
            except CommitConflictError as exc:
                if attempt + 1 == self._max_attempts:
                    raise LanceCommitFailed(
                        f"{self.uri(name)}: still conflicting after {self._max_attempts} "
                        f"attempts: {exc}"
                    ) from exc
                delay = min(MAX_BACKOFF_S, self._backoff_s * 2**attempt)
                self._sleep(delay * (0.5 + random.random() / 2))
            except OSError as exc:
                raise LanceCommitFailed(f"writing {self.uri(name)} failed: {exc}") from exc
            except ValueError as exc:
                raise PrivateStoreError(f"Lance refused a write to {self.uri(name)}: {exc}") from (
                    exc
                )

    def _create(self, name: str, table: pa.Table) -> None:
        """First write of ``name``. Losing a creation race (another process on an object
        store) reads as a commit conflict: the next attempt merges into the winner."""
        try:
            lance.write_dataset(
                table, self.uri(name), mode="create", storage_options=self._storage_options
            )
        except OSError as exc:
            if isinstance(exc, CommitConflictError) or self._open(name) is None:
                raise
            raise CommitConflictError(f"{self.uri(name)} was created concurrently") from exc

    def _merge(self, name: str, table: pa.Table, on: str, *, update: bool) -> Write:
        """Insert the rows whose ``on`` key is absent; with ``update``, replace the others.

        Which keys are there comes from the remembered fragment keys (:meth:`_present`): rows
        whose keys are all new (a first projection, new values) are appended as one fragment;
        only an update of keys already there (a redelivery) takes Lance's ``merge_insert``,
        whose join reads the key column of every fragment. Without ``update``, ``on`` need
        not be unique: every row of an absent key is appended (``value_paths_v1``: a crash
        after an earlier append of the same cids committed all of their rows, or none)."""

        def write(ds: lance.LanceDataset | None) -> None:
            if ds is None:
                self._create(name, table)
                return
            present = self._present(ds, on, set(table[on].to_pylist()))
            if present and update:
                builder = ds.merge_insert(on).when_matched_update_all()
                transaction, stats = builder.when_not_matched_insert_all().execute_uncommitted(
                    table
                )
                if stats["num_inserted_rows"] or stats["num_updated_rows"]:
                    lance.LanceDataset.commit(ds, transaction)
                return
            rows = table
            if present:
                absent = pc.invert(pc.is_in(table[on], pa.array(sorted(present), pa.string())))
                rows = table.filter(absent)
            if rows.num_rows:
                self._append(ds, rows)

        return write

    def _append(self, ds: lance.LanceDataset, rows: pa.Table) -> None:
        if not rows.schema.equals(ds.schema):
            raise PrivateStoreError(
                f"{ds.uri}: rows with schema {rows.schema} do not fit the dataset's {ds.schema}"
            )
        fragments = lance.fragment.write_fragments(
            rows, ds, schema=ds.schema, storage_options=self._storage_options
        )
        lance.LanceDataset.commit(
            ds, lance.LanceOperation.Append(fragments), read_version=ds.version
        )

    def _open(self, name: str, *, version: int | None = None) -> lance.LanceDataset | None:
        if self._local_root is not None and not (self._local_root / name / "_versions").is_dir():
            return None
        try:
            return lance.dataset(
                self.uri(name), version=version, storage_options=self._storage_options
            )
        except ValueError as exc:
            # Lance reports a missing dataset or version as ValueError("... was not found").
            if "not found" not in str(exc):
                raise PrivateStoreError(f"cannot open {self.uri(name)}: {exc}") from exc
            if version is not None:
                raise PrivateStoreError(
                    f"{self.uri(name)} has no version {version}; see PrivateStore.version()"
                ) from exc
            return None
        except OSError as exc:
            raise PrivateStoreUnavailable(f"cannot open {self.uri(name)}: {exc}") from exc

    def _require(self, name: str) -> lance.LanceDataset:
        ds = self._open(name)
        if ds is None:
            raise PrivateStoreError(f"{self.uri(name)} disappeared during maintenance")
        return ds

    def _read(self, ds: lance.LanceDataset, columns: list[str], where: str | None) -> pa.Table:
        try:
            return ds.to_table(columns=columns, filter=where)
        except OSError as exc:
            raise PrivateStoreUnavailable(f"reading {ds.uri} failed: {exc}") from exc

    def _present(self, ds: lance.LanceDataset | None, column: str, keys: set[str]) -> set[str]:
        """The keys of ``keys`` that version ``ds`` holds in ``column``: from the remembered
        keys of its fragments (:class:`~.fragment_keys.FragmentKeys`), a filtered scan for
        the fragments that do not fit."""
        if ds is None or not keys:
            return set()
        try:
            return self._keys.present(ds, column, keys, self._scan_present)
        except OSError as exc:
            raise PrivateStoreUnavailable(f"reading {ds.uri} failed: {exc}") from exc

    def _scan_present(
        self,
        ds: lance.LanceDataset,
        fragments: Sequence[lance.LanceFragment],
        column: str,
        keys: set[str],
    ) -> set[str]:
        found: set[str] = set()
        for chunk in _chunks(keys):
            scanner = ds.scanner(
                columns=[column], filter=_in_filter(column, chunk), fragments=fragments
            )
            table = scanner.to_table()
            found.update(table[column].to_pylist())
        return found


def _delete(where: str) -> Write:
    def write(ds: lance.LanceDataset | None) -> None:
        if ds is not None:
            ds.delete(where)

    return write


def _check_cid(cid: str, codec: int, body: bytes) -> None:
    if not 0 <= codec <= 0xFFFF:
        raise PrivateStoreError(f"value {cid}: codec must fit in u16, got {codec}")
    try:
        raw = parse_value_cid_wire(cid)
    except InvalidWireId as exc:
        raise PrivateStoreError(f"not a value CID (bamlv_1_<64 hex>): {cid!r}") from exc
    if value_cid(codec, body) != raw:
        raise PrivateStoreError(
            f"value {cid}: the CID does not match codec {codec} and the {len(body)}-byte body"
        )


def _prepare_rows(relation: str, table: pa.Table, execution_id: str) -> pa.Table:
    """``table`` cast to :func:`relation_schema`, checked: no extra or missing columns, no
    NULL or repeated ``row_id``, every ``execution_id`` equal to the execution's. Rows that
    already have the schema (what the projector's fold gives) are only checked, not rebuilt:
    89 against 17 µs a table (``calls_v1`` and four other relations of 600 executions)."""
    schema = relation_schema(relation)
    if table.schema.equals(schema):
        _check_ids(relation, table, execution_id)
        return table
    given = set(table.column_names)
    missing = [f.name for f in schema if f.name not in given and f.name != "execution_id"]
    extra = sorted(given - set(schema.names))
    if missing or extra:
        raise PrivateStoreError(
            f"{relation} rows of {execution_id}: missing columns {missing}, unknown {extra}; "
            f"expected {schema.names}"
        )
    if "execution_id" not in given:
        table = table.append_column("execution_id", pa.array([execution_id] * table.num_rows))
    _check_ids(relation, table, execution_id)
    try:
        columns = [table[f.name].cast(f.type) for f in schema]
        return pa.Table.from_arrays(columns, schema=schema).combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise PrivateStoreError(
            f"{relation} rows of {execution_id} do not fit {schema.names}: {exc}"
        ) from exc


def _check_ids(relation: str, table: pa.Table, execution_id: str) -> None:
    """Every ``execution_id`` is the execution's; no ``row_id`` is NULL or repeated."""
    ids = table["execution_id"]
    if ids.null_count or (table.num_rows and ids.unique().to_pylist() != [execution_id]):
        raise PrivateStoreError(f"{relation} rows carry execution ids other than {execution_id}")
    row_ids = table["row_id"]
    if row_ids.null_count or pc.count_distinct(row_ids).as_py() != table.num_rows:
        raise PrivateStoreError(f"{relation} rows of {execution_id}: row_id NULL or repeated")
