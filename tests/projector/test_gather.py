"""gather_root_ended over real evidence: equality with the local catalog, the walk-back and
its bound, damage, function tables, values, read counts, and a store shipped by the real
publisher."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from projector_fixtures import (
    LATES,
    SCOPE,
    SHORTS,
    CountingStore,
    MemoryStore,
    check_against_local,
    copy_store,
    entry_names,
    flip_byte,
    meta_objects,
    put,
    real_dataplane,
    reassemble,
    segment_file,
    upload_store,
    walk_bucket,
    walk_store,
    workload_bucket,
    workload_store,
)

from baml_studio.catalog import LocalStoreSource
from baml_studio.catalog.fold_inputs import (
    CorruptDataSegment,
    ExecutionInputs,
    GroupCountMismatch,
    MissingDataSegment,
)
from baml_studio.catalog.handles import Available, decode_handle
from baml_studio.format.cas import CODEC_FUNCTION_TABLE
from baml_studio.format.meta import decode_meta_segment, encode_meta_segment
from baml_studio.format.records import ROOT_ENDED_FLAG_ROOT_STARTED_LOST
from baml_studio.gateway.keys import cas_key, segment_key
from baml_studio.objectstore.directory import DirectoryBucket
from baml_studio.objectstore.errors import ObjectStoreUnavailable
from baml_studio.projector.errors import EvidenceCorrupt, EvidenceMissing, EvidenceUnavailable
from baml_studio.projector.evidence import EvidenceReader
from baml_studio.projector.gather import Gathered, gather_root_ended
from baml_studio.projector.project import project_execution
from baml_studio.publisher import Publisher
from baml_studio.publisher.pack import compress
from baml_studio.store import Plane, StoreLayout, StoreReader

__all__ = ["walk_bucket", "walk_store", "workload_bucket", "workload_store"]

LAST_META = 2 * SHORTS + 2 * LATES + 2
"""The walk store's meta objects: meta 1 (Long starts), two per short and late root, and
the one where Long ends."""
LONG_DATA = (1, SHORTS + LATES + 2)


def by_name(root: Path, gathered: Gathered) -> dict[str, ExecutionInputs]:
    names = entry_names(root)
    return {names[i.meta.execution_id]: i for i in gathered.executions}


def euid_of(root: Path) -> str:
    (euid,) = StoreReader(root).list_streams()
    return euid.hex()


def root_row(inputs: ExecutionInputs, definitions: Any = ()) -> dict[str, Any]:
    threads = reassemble(project_execution(inputs, list(definitions)))["threads_v1"]
    rows = threads.filter(pc.is_null(threads["parent_thread_id"])).to_pylist()
    assert len(rows) == 1
    return dict(rows[0])


def damaged_pair(tmp_path: Path, store: Path) -> tuple[Path, MemoryStore]:
    root = copy_store(store, tmp_path / "local")
    bucket = MemoryStore()
    upload_store(root, bucket)
    return root, bucket


# --- equality with the local catalog -----------------------------------------------------------


def test_every_root_ended_equals_the_local_catalog(
    workload_store: Path, workload_bucket: DirectoryBucket
) -> None:
    seen = check_against_local(workload_store, EvidenceReader(workload_bucket, SCOPE))
    assert len(seen) == 30
    # the workload has spawned threads, errors, lost-free values and two processes
    tables = [reassemble(p) for p in seen.values()]
    assert sum(t["errors_v1"].num_rows for t in tables) > 0
    assert sum(t["threads_v1"].num_rows for t in tables) > len(seen)
    assert len({p.root_id.split("_")[-1][:6] for p in seen.values()}) > 1


def test_walk_back_across_many_meta_objects_equals_local(
    walk_store: Path, walk_bucket: DirectoryBucket
) -> None:
    store = CountingStore(walk_bucket)
    seen = check_against_local(walk_store, EvidenceReader(store, SCOPE))
    assert len(seen) == 1 + SHORTS + LATES
    euid = euid_of(walk_store)
    assert meta_objects(walk_bucket)[-1] == (euid, LAST_META)
    reader = EvidenceReader(CountingStore(walk_bucket), SCOPE)
    gathered = gather_root_ended(reader, euid, LAST_META)
    (long,) = gathered.executions
    assert long.meta.started_seq == 1 and long.meta.ended_seq == LAST_META
    assert long.data.groups and long.meta.ended is not None
    assert (long.meta.ended.data_first_seq, long.meta.ended.data_last_seq) == LONG_DATA
    assert long.process.meta_gaps == () and long.process.stream_started is not None
    assert long.process.meta_hw == LAST_META and long.process.data_hw == LONG_DATA[1]
    assert not long.process.alive
    counting = reader.store
    assert isinstance(counting, CountingStore)
    meta_reads = {k: n for k, n in counting.gets.items() if k.endswith(".bamlmeta.zst")}
    assert len(meta_reads) == LAST_META and set(meta_reads.values()) == {1}


def test_the_walk_stops_once_it_has_found_both_records(
    walk_store: Path, walk_bucket: DirectoryBucket
) -> None:
    """A short root: RootEnded at 2k+1, RootStarted at 2k, its engine in meta 1 (read for
    StreamStarted anyway): three meta reads, not a walk to sequence 1."""
    store = CountingStore(walk_bucket)
    gathered = gather_root_ended(EvidenceReader(store, SCOPE), euid_of(walk_store), 9)
    (inputs,) = gathered.executions
    assert inputs.meta.started_seq == 8 and inputs.meta.engine is not None
    meta_reads = sorted(k for k in store.gets if k.endswith(".bamlmeta.zst"))
    assert [int(k.rsplit("/", 1)[1][:20]) for k in meta_reads] == [1, 8, 9]


def test_each_data_segment_is_read_once_per_notification(
    workload_store: Path, workload_bucket: DirectoryBucket
) -> None:
    for euid, seq in meta_objects(workload_bucket):
        store = CountingStore(workload_bucket)
        gathered = gather_root_ended(EvidenceReader(store, SCOPE), euid, seq)
        wanted = {
            s
            for i in gathered.executions
            if i.meta.ended is not None
            for s in range(i.meta.ended.data_first_seq, i.meta.ended.data_last_seq + 1)
        }
        data_reads = {k: n for k, n in store.gets.items() if k.endswith(".bamldata.zst")}
        assert {segment_key(SCOPE, euid, "data", s) for s in wanted} == set(data_reads)
        assert set(data_reads.values()) <= {1}
        if len(gathered.executions) > 1:
            assert len(data_reads) < len(gathered.executions)


def test_a_meta_object_without_root_ended_gathers_nothing(
    walk_store: Path, walk_bucket: DirectoryBucket
) -> None:
    gathered = gather_root_ended(EvidenceReader(walk_bucket, SCOPE), euid_of(walk_store), 1)
    assert gathered.executions == () and gathered.segment.sequence == 1
    assert gathered.definitions == {} and gathered.value_cids == {}
    with pytest.raises(ValueError):
        gather_root_ended(EvidenceReader(walk_bucket, SCOPE), euid_of(walk_store), 3, walk_bound=0)


# --- the walk bound ---------------------------------------------------------------------------


def test_root_started_beyond_the_bound_is_index_corrupt(
    walk_store: Path, walk_bucket: DirectoryBucket
) -> None:
    store = CountingStore(walk_bucket)
    euid = euid_of(walk_store)
    gathered = gather_root_ended(EvidenceReader(store, SCOPE), euid, LAST_META, walk_bound=5)
    (long,) = gathered.executions
    assert long.meta.started is None and long.meta.engine is not None  # engine from meta 1
    assert long.process.meta_gaps == (LAST_META - 5,)
    row = root_row(long)
    assert row["index_state"] == "index_corrupt" and row["status"] == "succeeded"
    meta_reads = sorted(int(k.rsplit("/", 1)[1][:20]) for k in store.gets if "meta" in k)
    assert meta_reads == [1, *range(LAST_META - 4, LAST_META + 1)]
    # with the default bound the same object is complete
    full = gather_root_ended(EvidenceReader(walk_bucket, SCOPE), euid, LAST_META)
    assert root_row(full.executions[0])["index_state"] == "complete"


def test_engine_beyond_the_bound_is_index_corrupt(
    walk_store: Path, walk_bucket: DirectoryBucket
) -> None:
    """The last late root: RootStarted one object back, its engine (the late one) started
    ``2 * LATES`` objects back and not in meta 1."""
    euid = euid_of(walk_store)
    last_late = LAST_META - 1
    reader = EvidenceReader(walk_bucket, SCOPE)
    bounded = gather_root_ended(reader, euid, last_late, walk_bound=3)
    (inputs,) = bounded.executions
    assert inputs.meta.engine is None and inputs.meta.started is None
    assert inputs.function_table is None and bounded.definitions[inputs.meta.execution_id] == []
    row = root_row(inputs)
    assert row["index_state"] == "index_corrupt" and row["program_id"] is None
    full = gather_root_ended(reader, euid, last_late)
    (whole,) = full.executions
    assert whole.meta.engine is not None and whole.meta.engine.engine_id == 2
    assert root_row(whole)["index_state"] == "complete"
    names = {d["fqn"] for d in full.definitions[whole.meta.execution_id]}
    assert names == {"proj.Leaf", "proj.Long", "proj.Short", "proj.Late"}


def test_each_engine_s_definitions_travel_with_its_first_execution_of_the_object(
    workload_bucket: DirectoryBucket,
) -> None:
    reader = EvidenceReader(workload_bucket, SCOPE)
    several = 0
    for euid, seq in meta_objects(workload_bucket):
        gathered = gather_root_ended(reader, euid, seq)
        carried = gathered.carried_definitions()
        firsts: dict[Any, str] = {}
        for inputs in gathered.executions:
            assert inputs.meta.engine is not None
            firsts.setdefault(inputs.meta.engine, inputs.meta.execution_id)
        assert list(carried) == list(firsts.values())
        for engine, execution_id in firsts.items():
            same = [
                gathered.definitions[i.meta.execution_id]
                for i in gathered.executions
                if i.meta.engine == engine
            ]
            assert carried[execution_id] and all(rows == carried[execution_id] for rows in same)
            several += len(same) > 1
        assert gather_root_ended(reader, euid, seq).carried_definitions() == carried
    assert several  # the workload has meta objects where one execution carries for others


# --- damage -------------------------------------------------------------------------------------


def test_missing_and_corrupt_data_segments(tmp_path: Path, walk_store: Path) -> None:
    root, bucket = damaged_pair(tmp_path, walk_store)
    euid = euid_of(root)
    missing, corrupt = 10, 5
    segment_file(root, bytes.fromhex(euid), Plane.DATA, missing).unlink()
    bucket.delete(segment_key(SCOPE, euid, "data", missing))
    path = segment_file(root, bytes.fromhex(euid), Plane.DATA, corrupt)
    flip_byte(path)
    put(bucket, segment_key(SCOPE, euid, "data", corrupt), compress(path.read_bytes()))
    reader = EvidenceReader(bucket, SCOPE)
    check_against_local(root, reader)
    issues: dict[tuple[int, int], tuple[object, ...]] = {}
    for _, seq in meta_objects(bucket):
        for inputs in gather_root_ended(reader, euid, seq).executions:
            ended = inputs.meta.ended
            assert ended is not None
            if inputs.data.issues:
                issues[(ended.data_first_seq, ended.data_last_seq)] = inputs.data.issues
    assert issues == {
        LONG_DATA: (CorruptDataSegment(corrupt), MissingDataSegment(missing)),
        (corrupt, corrupt): (CorruptDataSegment(corrupt), GroupCountMismatch(1, 0)),
        (missing, missing): (MissingDataSegment(missing), GroupCountMismatch(1, 0)),
    }


def test_a_zstd_frame_that_does_not_decompress_is_a_corrupt_data_segment(
    tmp_path: Path, walk_store: Path
) -> None:
    bucket = MemoryStore()
    upload_store(walk_store, bucket)
    euid = euid_of(walk_store)
    put(bucket, segment_key(SCOPE, euid, "data", 3), b"\x28\xb5\x2f\xfd garbage")
    (inputs,) = gather_root_ended(EvidenceReader(bucket, SCOPE), euid, 5).executions
    assert inputs.data.issues == (CorruptDataSegment(3), GroupCountMismatch(1, 0))


def test_the_notified_object_must_read(tmp_path: Path, walk_store: Path) -> None:
    bucket = MemoryStore()
    upload_store(walk_store, bucket)
    euid = euid_of(walk_store)
    key = segment_key(SCOPE, euid, "meta", 5)
    raw = bytearray(segment_file(walk_store, bytes.fromhex(euid), Plane.META, 5).read_bytes())
    raw[45] ^= 0x40
    put(bucket, key, compress(bytes(raw)))
    with pytest.raises(EvidenceCorrupt) as info:
        gather_root_ended(EvidenceReader(bucket, SCOPE), euid, 5)
    assert info.value.key == key
    bucket.delete(key)
    with pytest.raises(EvidenceMissing):
        gather_root_ended(EvidenceReader(bucket, SCOPE), euid, 5)


def test_missing_meta_1_is_a_gap(tmp_path: Path, walk_store: Path) -> None:
    root, bucket = damaged_pair(tmp_path, walk_store)
    euid = euid_of(root)
    segment_file(root, bytes.fromhex(euid), Plane.META, 1).unlink()
    bucket.delete(segment_key(SCOPE, euid, "meta", 1))
    reader = EvidenceReader(bucket, SCOPE)
    check_against_local(root, reader)
    (long,) = gather_root_ended(reader, euid, LAST_META).executions
    assert long.process.stream_started is None and long.process.meta_gaps == (1,)
    row = root_row(long)
    assert row["index_state"] == "index_corrupt" and row["started_at"] is None
    (short,) = gather_root_ended(reader, euid, 9).executions
    row = root_row(short)
    assert row["index_state"] == "complete"  # the gap is before its RootStarted
    assert row["started_at"] is None and row["program_id"] is None  # engine 1 was in meta 1


def test_a_corrupt_meta_object_on_the_walk_is_a_gap(tmp_path: Path, walk_store: Path) -> None:
    root, bucket = damaged_pair(tmp_path, walk_store)
    euid = euid_of(root)
    gap = 20  # RootStarted of the short root that ends in 21
    path = segment_file(root, bytes.fromhex(euid), Plane.META, gap)
    flip_byte(path, 44)
    put(bucket, segment_key(SCOPE, euid, "meta", gap), compress(path.read_bytes()))
    reader = EvidenceReader(bucket, SCOPE)
    check_against_local(root, reader, skip=frozenset({gap}))
    states = {}
    for _, seq in meta_objects(bucket):
        if seq == gap:
            continue
        for inputs in gather_root_ended(reader, euid, seq).executions:
            states[seq] = root_row(inputs)["index_state"]
    assert states.pop(gap + 1) == "index_corrupt"  # its RootStarted is lost
    assert states.pop(LAST_META) == "index_corrupt"  # Long spans the gap
    assert set(states.values()) == {"complete"}


def rewrite_meta(root: Path, bucket: MemoryStore, seq: int, edit: Any) -> None:
    """Re-encode meta object ``seq`` with ``edit(records)`` in the local copy and the bucket."""
    euid = bytes.fromhex(euid_of(root))
    path = segment_file(root, euid, Plane.META, seq)
    segment = decode_meta_segment(path.read_bytes())
    raw = encode_meta_segment(dataclasses.replace(segment, records=tuple(edit(segment.records))))
    path.write_bytes(raw)
    put(bucket, segment_key(SCOPE, euid.hex(), "meta", seq), compress(raw))


def test_root_started_lost_needs_no_walk(tmp_path: Path, walk_store: Path) -> None:
    """A RootEnded flagged root_started_lost (its RootStarted never written): the walk does
    not look for RootStarted, and the rows equal the local ones."""
    root, bucket = damaged_pair(tmp_path, walk_store)
    lost = ROOT_ENDED_FLAG_ROOT_STARTED_LOST
    rewrite_meta(root, bucket, 8, lambda records: [])
    rewrite_meta(
        root, bucket, 9, lambda records: [dataclasses.replace(r, flags=lost) for r in records]
    )
    store = CountingStore(bucket)
    check_against_local(root, EvidenceReader(bucket, SCOPE))
    (inputs,) = gather_root_ended(EvidenceReader(store, SCOPE), euid_of(root), 9).executions
    assert inputs.meta.started is None and inputs.meta.engine is not None
    assert root_row(inputs)["index_state"] == "root_started_lost"
    assert sorted(int(k.rsplit("/", 1)[1][:20]) for k in store.gets if "/meta/" in k) == [1, 9]


def test_a_missing_function_table_gives_null_labels(tmp_path: Path, walk_store: Path) -> None:
    root, bucket = damaged_pair(tmp_path, walk_store)
    euid = euid_of(root)
    reader = EvidenceReader(bucket, SCOPE)
    (before,) = gather_root_ended(reader, euid, 9).executions
    assert before.meta.engine is not None and before.function_table is not None
    cid = before.meta.engine.function_table_cid
    assert cid is not None
    StoreLayout(root).cas_path(cid).unlink()
    bucket.delete(cas_key(SCOPE, "tables", cid.hex()))
    check_against_local(root, EvidenceReader(bucket, SCOPE))
    gathered = gather_root_ended(EvidenceReader(bucket, SCOPE), euid, 9)
    (inputs,) = gathered.executions
    assert inputs.function_table is None and inputs.meta.engine is not None
    assert gathered.definitions[inputs.meta.execution_id] == []
    tables = reassemble(project_execution(inputs, []))
    assert set(tables["calls_v1"]["fqn"].to_pylist()) == {None}
    assert tables["calls_v1"].num_rows > 0 and tables["function_definitions_v1"].num_rows == 0
    # a corrupt table reads the same way
    put(bucket, cas_key(SCOPE, "tables", cid.hex()), compress(b"BAMLVAL1 broken"))
    (again,) = gather_root_ended(EvidenceReader(bucket, SCOPE), euid, 9).executions
    assert again.function_table is None


def test_transient_failures_propagate(walk_store: Path, walk_bucket: DirectoryBucket) -> None:
    """A bucket failure is never a gap, an issue or a NULL table: the message retries."""
    euid = euid_of(walk_store)
    table_prefix = cas_key(SCOPE, "tables", "00" * 32).rsplit("/", 2)[0]
    for failing in (
        segment_key(SCOPE, euid, "meta", 1),
        segment_key(SCOPE, euid, "meta", 20),
        segment_key(SCOPE, euid, "data", 7),
        table_prefix,
    ):
        store = CountingStore(
            walk_bucket,
            fail=lambda key, f=failing: (
                ObjectStoreUnavailable("slow") if key.startswith(f) else None
            ),
        )
        with pytest.raises(EvidenceUnavailable):
            gather_root_ended(EvidenceReader(store, SCOPE), euid, LAST_META)


# --- values -------------------------------------------------------------------------------------


def test_value_cids(workload_store: Path, workload_bucket: DirectoryBucket) -> None:
    reader = EvidenceReader(workload_bucket, SCOPE)
    source = LocalStoreSource(workload_store)
    total = 0
    for euid, seq in meta_objects(workload_bucket):
        gathered = gather_root_ended(reader, euid, seq)
        for inputs in gathered.executions:
            execution_id = inputs.meta.execution_id
            projection = project_execution(inputs, gathered.definitions[execution_id])
            local = source.tables(["calls_v1", "errors_v1"], [execution_id])
            handles = [
                *(h for c in ("args", "output", "error") for h in local["calls_v1"][c].to_pylist()),
                *local["errors_v1"]["value"].to_pylist(),
            ]
            expected = set()
            for raw in handles:
                handle = None if raw is None else decode_handle(raw)
                if isinstance(handle, Available):
                    expected.add(handle.cid)
            assert projection.value_cids == expected
            assert gathered.value_cids[execution_id] >= projection.value_cids
            for cid in projection.value_cids:
                assert source.read_value(1, cid, 1 << 30)
            total += len(expected)
    assert total > 30


# --- the real publisher --------------------------------------------------------------------------


def test_a_store_shipped_by_the_real_publisher(tmp_path: Path, workload_store: Path) -> None:
    root = copy_store(workload_store, tmp_path / "local")
    with real_dataplane(tmp_path / "dataplane") as (url, token, dataplane):
        report = Publisher(root, url, token).flush()
        assert report.complete, report.problems
        reader = EvidenceReader(dataplane.store, SCOPE)
        seen = check_against_local(root, reader)
        assert len(seen) == 30
        large = [k for k in report.uploaded if k.endswith(".bamlvalue.zst")]
        tables = [k for k in report.uploaded if k.endswith(".bamltable.zst")]
        assert tables and large
        for key in large:
            cid = bytes.fromhex(key.rsplit("/", 1)[1].split(".")[0])
            obj = reader.cas_value(cid)
            assert obj.cid == cid and obj.codec == 1
        for key in tables:
            cid = bytes.fromhex(key.rsplit("/", 1)[1].split(".")[0])
            assert reader.function_table(cid).functions
            assert StoreReader(root).read_cas(cid).codec == CODEC_FUNCTION_TABLE
