"""Helpers and fixtures for the projector's evidence/gather/project tests.

Stores are real: the seeded workload and a profiler scenario. :func:`upload_store` ships a
store into a directory bucket with the publisher's keys and bytes (each object one zstd frame
of the store file, under :mod:`baml_studio.gateway.keys`); every value goes to ``cas/values/``
(the real publisher packs small ones; one test ships a store with the real publisher).
:func:`reassemble` joins a projection's public batches and private rows back into catalog
tables, which the tests compare with the local catalog over the same store.
"""

from __future__ import annotations

import hashlib
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import uvicorn

from baml_studio.catalog import LocalStoreSource
from baml_studio.catalog.fold import EXECUTION_RELATIONS
from baml_studio.catalog.fold_arrow import to_table
from baml_studio.catalog.fold_inputs import CorruptDataSegment, MissingDataSegment
from baml_studio.catalog.fold_store import function_definition_rows
from baml_studio.catalog.load import FunctionTables
from baml_studio.catalog.schema import BY_NAME, FUNCTION_DEFINITIONS
from baml_studio.catalog.split import join_split, private_schema
from baml_studio.control.schemas import PUBLIC_RELATIONS, registered_schema
from baml_studio.format.cas import CODEC_FUNCTION_TABLE
from baml_studio.format.records import EngineStarted
from baml_studio.gateway.config import Scope
from baml_studio.gateway.keys import cas_key, segment_key
from baml_studio.gateway.service import Dataplane, load_dataplane_config, open_dataplane
from baml_studio.gateway.tokens import mint_publisher_token
from baml_studio.objectstore.config import DirectoryBucketConfig
from baml_studio.objectstore.directory import DirectoryBucket
from baml_studio.objectstore.errors import ChecksumMismatch, ObjectAlreadyExists, ObjectNotFound
from baml_studio.objectstore.port import ObjectInfo, ObjectStore
from baml_studio.profiler import Profiler, ProfilerConfig, baml_function
from baml_studio.profiler.registry import FunctionRegistry
from baml_studio.projector.evidence import EvidenceReader
from baml_studio.projector.gather import Gathered, gather_root_ended
from baml_studio.projector.project import Projection, project_execution
from baml_studio.publisher.pack import compress
from baml_studio.store import Plane, StoreLayout, StoreReader
from baml_studio.store.layout import parse_cas_file_name
from baml_studio.workload.runner import execute_workload

SCOPE = Scope("tn_proj", "prj_proj", "env_proj")
META_SUFFIX = ".bamlmeta.zst"


# --- the bucket -----------------------------------------------------------------------------


def new_bucket(root: Path, name: str = "evidence-proj") -> DirectoryBucket:
    return DirectoryBucket(
        DirectoryBucketConfig(
            root=root, bucket=name, presign_base_url="http://127.0.0.1:9", signing_secret=b"k" * 32
        )
    )


class MemoryStore:
    """An in-memory ObjectStore (get, head, list, create-only put, delete) for tests that
    rewrite many objects; the shared buckets and the real publisher use directory buckets."""

    def __init__(self, name: str = "evidence-mem") -> None:
        self._bucket = name
        self.objects: dict[str, bytes] = {}

    @property
    def bucket(self) -> str:
        return self._bucket

    def _info(self, key: str) -> ObjectInfo:
        data = self.objects[key]
        md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
        return ObjectInfo(key, len(data), hashlib.sha256(data).hexdigest(), None, md5)

    def put_if_absent(self, key: str, data: bytes, sha256: str) -> ObjectInfo:
        if hashlib.sha256(data).hexdigest() != sha256:
            raise ChecksumMismatch(key, sha256, None)
        if key in self.objects:
            raise ObjectAlreadyExists(key)
        self.objects[key] = bytes(data)
        return self._info(key)

    def head(self, key: str) -> ObjectInfo:
        if key not in self.objects:
            raise ObjectNotFound(key)
        return self._info(key)

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        if key not in self.objects:
            raise ObjectNotFound(key)
        return self.objects[key][start:end]

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        for key in sorted(self.objects):
            if key.startswith(prefix):
                yield self._info(key)

    def delete(self, key: str, *, all_versions: bool = True) -> None:
        self.objects.pop(key, None)

    def presign_put(self, key: str, size: int, sha256: str, expires_in: int) -> Any:
        raise NotImplementedError("the projector never presigns")


def put(store: ObjectStore, key: str, body: bytes) -> None:
    """Store ``body`` under ``key``, replacing what is there (tests damage objects)."""
    store.delete(key)
    store.put_if_absent(key, body, hashlib.sha256(body).hexdigest())


def segment_file(root: Path, euid: bytes, plane: Plane, seq: int) -> Path:
    return StoreLayout(root).segment_path(euid, plane, seq)


def upload_store(root: Path, store: ObjectStore, scope: Scope = SCOPE) -> None:
    """Every segment and CAS file of the store at ``root``, one zstd frame each, by key."""
    reader = StoreReader(root)
    for euid in reader.list_streams():
        for plane in (Plane.META, Plane.DATA):
            sequences = (
                reader.meta_sequences(euid) if plane is Plane.META else reader.data_sequences(euid)
            )
            for seq in sequences:
                raw = segment_file(root, euid, plane, seq).read_bytes()
                key = segment_key(scope, euid.hex(), plane.value, seq)  # type: ignore[arg-type]
                put(store, key, compress(raw))
    for path in sorted(StoreLayout(root).cas_dir.glob("*/*.bamlvalue")):
        cid = parse_cas_file_name(path.name)
        assert cid is not None
        raw = path.read_bytes()
        codec = int.from_bytes(raw[10:12], "big")
        family = "tables" if codec == CODEC_FUNCTION_TABLE else "values"
        put(store, cas_key(scope, family, cid.hex()), compress(raw))  # type: ignore[arg-type]


def meta_objects(store: ObjectStore, scope: Scope = SCOPE) -> list[tuple[str, int]]:
    """``(euid hex, sequence)`` of every meta object in the bucket, in key order."""
    prefix = f"evidence/v1/{scope.tenant}/{scope.project}/{scope.environment}/streams/"
    out = []
    for info in store.list(prefix):
        if info.key.endswith(META_SUFFIX):
            parts = info.key[len(prefix) :].split("/")
            out.append((parts[0], int(parts[2].removesuffix(META_SUFFIX))))
    return out


# --- comparing with the local catalog --------------------------------------------------------


def reassemble(projection: Projection) -> dict[str, pa.Table]:
    """The catalog tables of one projection: public batches concatenated per relation, the
    private rows joined back on the key columns (``split.join_split``)."""
    out: dict[str, pa.Table] = {}
    for relation in PUBLIC_RELATIONS:
        batches = [b.table for b in projection.public if b.relation == relation.name]
        public = (
            pa.concat_tables(batches) if batches else registered_schema(relation.name).empty_table()
        )
        rows = [p.table for p in projection.private if p.relation == relation.name]
        names = private_schema(relation).names
        private = rows[0].select(names) if rows else private_schema(relation).empty_table()
        out[relation.name] = join_split(relation, public, private).combine_chunks()
    return out


def local_expected(source: LocalStoreSource, execution_id: str) -> dict[str, pa.Table]:
    """What the local catalog says for one execution: its five folded relations, and the
    ``function_definitions_v1`` rows of its engine (``fold_store.function_definition_rows``
    over that one engine, the table read from the local CAS)."""
    tables = source.tables(list(EXECUTION_RELATIONS), [execution_id])
    meta = next(m for m in source.index.executions if m.execution_id == execution_id)
    engines = [] if meta.engine is None else [meta.engine]
    rows = function_definition_rows(engines, FunctionTables(StoreReader(source.root)).get)
    tables[FUNCTION_DEFINITIONS.name] = to_table(FUNCTION_DEFINITIONS, rows)
    return {name: t.combine_chunks() for name, t in tables.items()}


def assert_same(got: dict[str, pa.Table], want: dict[str, pa.Table], what: str) -> None:
    for name in want:
        expected = want[name].cast(BY_NAME[name].schema())
        assert got[name].schema.equals(expected.schema), (what, name)
        if not got[name].equals(expected):
            raise AssertionError(
                f"{what}: {name} differs\n got: {got[name].to_pylist()[:3]}\n"
                f"want: {expected.to_pylist()[:3]}"
            )


@dataclass
class Projected:
    gathered: Gathered
    projections: list[Projection]


def project_all(
    reader: EvidenceReader,
    *,
    walk_bound: int = 2000,
    partition_rows: int = 50_000,
    skip: frozenset[int] = frozenset(),
) -> dict[tuple[str, int], Projected]:
    """Gather and project every meta object of the reader's bucket (but sequences in
    ``skip``: damaged ones, which a worker quarantines)."""
    out = {}
    for euid_hex, seq in meta_objects(reader.store, reader.scope):
        if seq in skip:
            continue
        gathered = gather_root_ended(reader, euid_hex, seq, walk_bound=walk_bound)
        projections = [
            project_execution(
                inputs,
                gathered.definitions[inputs.meta.execution_id],
                partition_rows=partition_rows,
            )
            for inputs in gathered.executions
        ]
        out[(euid_hex, seq)] = Projected(gathered, projections)
    return out


def check_against_local(root: Path, reader: EvidenceReader, **kwargs: Any) -> dict[str, Projection]:
    """Project every RootEnded of the bucket and check each execution equals the local
    catalog over ``root``; every ended local execution is projected exactly once. Returns
    the projections by execution id."""
    source = LocalStoreSource(root)
    seen: dict[str, Projection] = {}
    for (euid_hex, seq), projected in project_all(reader, **kwargs).items():
        gaps = {
            inputs.meta.execution_id
            for inputs in projected.gathered.executions
            if any(
                isinstance(i, MissingDataSegment | CorruptDataSegment) for i in inputs.data.issues
            )
        }
        for projection in projected.projections:
            assert projection.root_id not in seen, projection.root_id
            seen[projection.root_id] = projection
            want = local_expected(source, projection.root_id)
            if projection.root_id in gaps:  # the contract: a data gap makes it index_corrupt
                want["threads_v1"] = _index_corrupt(want["threads_v1"], projection.root_id)
            assert_same(reassemble(projection), want, f"{euid_hex}/{seq} {projection.root_id}")
    ended = {m.execution_id for m in source.index.executions if m.ended is not None}
    assert set(seen) == ended
    return seen


def _index_corrupt(threads: pa.Table, root_id: str) -> pa.Table:
    rows = threads.to_pylist()
    for row in rows:
        if row["thread_id"] == root_id:
            row["index_state"] = "index_corrupt"
    return pa.Table.from_pylist(rows, schema=threads.schema)


def copy_store(src: Path, parent: Path) -> Path:
    dst = parent / ".baml" / "profiles-v1"
    shutil.copytree(src, dst)
    return dst


def flip_byte(path: Path, offset: int = 60) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))


# --- stores -----------------------------------------------------------------------------------

_STORES: dict[str, Path] = {}
"""Stores built once per session (fixtures of the same name in several modules share them)."""


def _once(name: str, factory: pytest.TempPathFactory, build: Any) -> Path:
    if name not in _STORES:
        root = factory.mktemp(name) / ".baml" / "profiles-v1"
        build(root)
        _STORES[name] = root
    return _STORES[name]


LOSS_COUNTERS = (
    "internal_errors", "roots_dropped", "events_dropped", "meta_batch_lost", "root_ended_lost",
    "function_table_publish_failed", "data_segments_lost", "cas_lost",
)  # fmt: skip
"""Profiler counters that must stay 0 while a fixture's workload builds its store."""


def whole_workload(root: Path, executions: int, processes: int, seed: int) -> None:
    """Run the seeded workload into ``root`` and check the store is whole: no profiler counted
    a loss, and every stream announces its engine with a function table the store holds. A
    fixture store that lost something would fail later tests far from the cause; this says
    which process lost what (counters and each stream's engines)."""
    run = execute_workload(root, executions, processes, seed)
    losses = {
        (p.index, p.pid, name): p.stats.get(name, 0)
        for p in run.processes
        for name in LOSS_COUNTERS
        if p.stats.get(name, 0)
    }
    reader = StoreReader(root)
    cas = {parse_cas_file_name(p.name) for p in StoreLayout(root).cas_dir.glob("*/*.bamlvalue")}
    engines: dict[str, list[tuple[int, int, str | None]]] = {}
    for euid in reader.list_streams():
        found = engines.setdefault(euid.hex(), [])
        for seq in reader.meta_sequences(euid):
            for record in reader.read_meta(euid, seq).records:
                if isinstance(record, EngineStarted):
                    cid = record.function_table_cid
                    found.append((seq, record.engine_id, None if cid is None else cid.hex()))
    unannounced = {
        euid: found
        for euid, found in engines.items()
        if not found or any(c is None or bytes.fromhex(c) not in cas for _, _, c in found)
    }
    assert not losses and not unannounced, (
        f"the workload store at {root} is not whole: losses {losses}; streams without an "
        f"engine and its table (meta seq, engine, table CID) {unannounced}; all engines "
        f"{engines}; stats per process {[(p.index, dict(p.stats)) for p in run.processes]}"
    )


@pytest.fixture(scope="session")
def workload_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """30 executions of the seeded workload in 2 processes (spawns, errors, large values).
    Do not modify: damage a copy."""
    return _once("workload", tmp_path_factory, lambda root: whole_workload(root, 30, 2, 11))


REGISTRY = FunctionRegistry()


class LeafError(Exception):
    pass


@baml_function(name="proj.Leaf", llm=True, registry=REGISTRY)
def leaf(tag: str) -> dict[str, object]:
    if tag.startswith("bad"):
        raise LeafError(f"cannot handle {tag}")
    return {"tag": tag, "size": len(tag)}


@baml_function(name="proj.Long", registry=REGISTRY)
def long_root(reached: threading.Event, release: threading.Event) -> list[object]:
    first = leaf("first")
    reached.set()
    release.wait(30)
    return [first, leaf("second")]


@baml_function(name="proj.Short", registry=REGISTRY)
def short(i: int) -> object:
    try:
        return leaf(f"bad-{i}" if i % 4 == 3 else f"short-{i}")
    except LeafError:
        return None


def _late(i: int) -> object:
    return leaf(f"late-{i}")


SHORTS = 12
LATES = 6


def build_walk_store(root: Path) -> None:
    """Long starts (meta 1: StreamStarted, engine 1, its RootStarted), then ``SHORTS`` short
    roots each flushed alone (two meta objects each: RootStarted, RootEnded), then a function
    registered late (engine 2 in the first late root's RootStarted object) and ``LATES`` late
    roots flushed alone, then Long ends in the last meta object."""
    profiler = Profiler(
        ProfilerConfig(store_root=root, publish_interval_s=None), REGISTRY
    ).activate()
    try:
        reached, release = threading.Event(), threading.Event()
        worker = threading.Thread(target=long_root, args=(reached, release))
        worker.start()
        assert reached.wait(30)
        assert profiler.flush()
        for i in range(SHORTS):
            short(i)
            assert profiler.flush()
        late = baml_function(name="proj.Late", registry=REGISTRY)(_late)
        for i in range(LATES):
            late(i)
            assert profiler.flush()
        release.set()
        worker.join(30)
        assert profiler.flush()
    finally:
        profiler.close()


@pytest.fixture(scope="session")
def walk_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The :func:`build_walk_store` scenario. Do not modify: damage a copy."""
    return _once("walk", tmp_path_factory, build_walk_store)


def entry_names(root: Path) -> dict[str, str]:
    """Execution id → entry function name, from the local catalog."""
    roots = LocalStoreSource(root).root_threads(columns=["execution_id", "entry_fqn"])
    return dict(zip(roots["execution_id"].to_pylist(), roots["entry_fqn"].to_pylist(), strict=True))


# --- the real gateway --------------------------------------------------------------------------


@contextmanager
def real_dataplane(data_dir: Path) -> Iterator[tuple[str, str, Dataplane]]:
    """``serve dataplane``'s embedded defaults on 127.0.0.1: (base URL, token, dataplane)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    dataplane = open_dataplane(load_dataplane_config(data_dir, host="127.0.0.1", port=port))
    dataplane.environments.add(SCOPE)
    token = mint_publisher_token(dataplane.keys.load(), SCOPE, 3600)
    server = uvicorn.Server(
        uvicorn.Config(dataplane.app, log_level="warning", lifespan="off", access_log=False)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    try:
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)  # readiness poll of the server thread, bounded by the deadline
        yield f"http://127.0.0.1:{port}", token, dataplane
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
        dataplane.close()


def _bucket_of(name: str, factory: pytest.TempPathFactory, root: Path) -> DirectoryBucket:
    key = f"bucket:{name}"
    if key not in _STORES:
        path = factory.mktemp(key.replace(":", "-"))
        upload_store(root, new_bucket(path))
        _STORES[key] = path
    return new_bucket(_STORES[key])


@pytest.fixture(scope="session")
def workload_bucket(
    tmp_path_factory: pytest.TempPathFactory, workload_store: Path
) -> DirectoryBucket:
    """The workload store uploaded (read only: damage tests use their own bucket)."""
    return _bucket_of("workload", tmp_path_factory, workload_store)


@pytest.fixture(scope="session")
def walk_bucket(tmp_path_factory: pytest.TempPathFactory, walk_store: Path) -> DirectoryBucket:
    """The walk store uploaded (read only)."""
    return _bucket_of("walk", tmp_path_factory, walk_store)


class CountingStore:
    """An ObjectStore wrapper that counts gets and heads per key and can fail them."""

    def __init__(self, inner: ObjectStore, fail: Any = None) -> None:
        self.inner = inner
        self.gets: dict[str, int] = {}
        self.heads: dict[str, int] = {}
        self.fail = fail
        """``fail(key) -> Exception | None``: raised instead of answering."""

    @property
    def bucket(self) -> str:
        return self.inner.bucket

    def _check(self, key: str) -> None:
        error = self.fail(key) if self.fail is not None else None
        if error is not None:
            raise error

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        self.gets[key] = self.gets.get(key, 0) + 1
        self._check(key)
        return self.inner.get(key, start, end)

    def head(self, key: str) -> Any:
        self.heads[key] = self.heads.get(key, 0) + 1
        self._check(key)
        return self.inner.head(key)

    def list(self, prefix: str = "") -> Any:
        return self.inner.list(prefix)

    def put_if_absent(self, key: str, data: bytes, sha256: str) -> Any:
        return self.inner.put_if_absent(key, data, sha256)

    def delete(self, key: str, *, all_versions: bool = True) -> None:
        self.inner.delete(key, all_versions=all_versions)

    def presign_put(self, key: str, size: int, sha256: str, expires_in: int) -> Any:
        return self.inner.presign_put(key, size, sha256, expires_in)
