"""EvidenceReader over a bucket holding a real store: reads, typed errors, cache, fuzzing."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest
import zstandard
from projector_fixtures import (
    SCOPE,
    CountingStore,
    MemoryStore,
    meta_objects,
    put,
    segment_file,
    upload_store,
    workload_bucket,
    workload_store,
)

import baml_studio.projector.errors as errors_module
from baml_studio.format.errors import BamlStudioError, SegmentReadError, UnsupportedVersion
from baml_studio.gateway.keys import cas_key, segment_key
from baml_studio.objectstore.directory import DirectoryBucket
from baml_studio.objectstore.errors import (
    ObjectNotFound,
    ObjectStoreAccessDenied,
    ObjectStoreUnavailable,
)
from baml_studio.objectstore.port import ObjectStore
from baml_studio.projector.errors import (
    ControlPlaneRefused,
    ControlPlaneUnavailable,
    EvidenceCorrupt,
    EvidenceMissing,
    EvidenceOutOfScope,
    EvidenceUnavailable,
    InactiveGeneration,
    LanceCommitFailed,
    ProjectorError,
    ValuesPending,
)
from baml_studio.projector.evidence import EvidenceReader
from baml_studio.publisher.errors import PackFrameInvalid
from baml_studio.publisher.pack import compress
from baml_studio.store import Plane, StoreLayout, StoreReader
from baml_studio.store.errors import CasPathMismatch, SequenceMismatch

__all__ = ["workload_bucket", "workload_store"]


def cas_files(root: Path) -> dict[bytes, tuple[int, bytes]]:
    """CID → (codec, whole file) of every CAS object of the store."""
    out = {}
    for path in StoreLayout(root).cas_dir.glob("*/*.bamlvalue"):
        raw = path.read_bytes()
        out[bytes.fromhex(path.stem)] = (int.from_bytes(raw[10:12], "big"), raw)
    return out


def first_of(files: dict[bytes, tuple[int, bytes]], codec: int) -> bytes:
    return min(cid for cid, (c, _) in files.items() if c == codec)


def resealed(raw: bytes) -> bytes:
    """``raw`` with its trailing SHA-256 recomputed (a checksum-valid edit)."""
    body = raw[:-32]
    return body + hashlib.sha256(body).digest()


# --- the error tree ---------------------------------------------------------------------------


def test_error_tree_is_typed_and_drawn() -> None:
    expected = {
        EvidenceMissing: False,
        EvidenceCorrupt: False,
        EvidenceOutOfScope: False,
        EvidenceUnavailable: True,
        ValuesPending: True,
        ControlPlaneUnavailable: True,
        ControlPlaneRefused: False,
        InactiveGeneration: True,
        LanceCommitFailed: True,
    }
    assert issubclass(ProjectorError, BamlStudioError)
    assert ProjectorError.transient is False
    doc = errors_module.__doc__ or ""
    for cls, transient in expected.items():
        assert issubclass(cls, ProjectorError)
        assert cls.transient is transient, cls
        assert cls.__name__ in doc
    assert InactiveGeneration("x", active_generation="g2").active_generation == "g2"
    refused = ControlPlaneRefused("no", status=409, code="batch_conflict")
    assert (refused.status, refused.code) == (409, "batch_conflict")
    assert ControlPlaneUnavailable("down", status=503).status == 503


# --- reads -------------------------------------------------------------------------------------


def test_reads_every_kind_like_the_local_reader(
    workload_store: Path, workload_bucket: DirectoryBucket
) -> None:
    local = StoreReader(workload_store)
    reader = EvidenceReader(workload_bucket, SCOPE)
    streams = local.list_streams()
    assert {e for e, _ in meta_objects(workload_bucket)} == {e.hex() for e in streams}
    for euid in streams:
        for seq in local.meta_sequences(euid):
            assert reader.meta(euid.hex(), seq) == local.read_meta(euid, seq)
        for seq in local.data_sequences(euid):
            whole = local.read_data(euid, seq)
            assert reader.data(euid.hex(), seq) == whole
            some = [whole.groups[0].root]
            assert reader.data(euid.hex(), seq, roots=some).groups == whole.groups[:1]
    files = cas_files(workload_store)
    assert {codec for codec, _ in files.values()} == {1, 2}
    for cid, (codec, _) in files.items():
        obj = local.read_cas(cid)
        if codec == 2:
            table = reader.function_table(cid)
            assert table.functions and table == _decode_table(obj.body)
        else:
            assert reader.cas_value(cid) == obj
    key = cas_key(SCOPE, "values", first_of(files, 1).hex())
    assert reader.exists(key)
    assert not reader.exists(key.replace("/values/", "/tables/").replace("bamlvalue", "bamltable"))


def _decode_table(body: bytes) -> object:
    from baml_studio.format.function_table import decode_function_table

    return decode_function_table(body)


def test_missing_objects_are_evidence_missing() -> None:
    assert isinstance(MemoryStore(), ObjectStore)
    reader = EvidenceReader(MemoryStore(), SCOPE)
    euid = "ab" * 16
    cases = [
        (lambda: reader.meta(euid, 1), segment_key(SCOPE, euid, "meta", 1)),
        (lambda: reader.data(euid, 7), segment_key(SCOPE, euid, "data", 7)),
        (lambda: reader.function_table(b"\x01" * 32), cas_key(SCOPE, "tables", "01" * 32)),
        (lambda: reader.cas_value(b"\x02" * 32), cas_key(SCOPE, "values", "02" * 32)),
    ]
    for read, key in cases:
        with pytest.raises(EvidenceMissing) as info:
            read()
        assert info.value.key == key and key in str(info.value)
        assert isinstance(info.value.__cause__, ObjectNotFound)
        assert not info.value.transient


# --- corrupt objects ------------------------------------------------------------------------


@pytest.fixture
def damaged(workload_store: Path) -> tuple[MemoryStore, EvidenceReader]:
    bucket = MemoryStore()
    upload_store(workload_store, bucket)
    return bucket, EvidenceReader(bucket, SCOPE)


def corrupt_case(
    bucket: MemoryStore, reader: EvidenceReader, key: str, body: bytes, read: object
) -> EvidenceCorrupt:
    put(bucket, key, body)
    with pytest.raises(EvidenceCorrupt) as info:
        read()  # type: ignore[operator]
    assert info.value.key == key and key in str(info.value)
    assert not info.value.transient
    return info.value


def test_corrupt_segments_are_typed_with_their_cause(
    workload_store: Path, damaged: tuple[MemoryStore, EvidenceReader]
) -> None:
    bucket, reader = damaged
    local = StoreReader(workload_store)
    euid = local.list_streams()[0]
    other = local.list_streams()[1]
    e = euid.hex()
    meta2 = segment_file(workload_store, euid, Plane.META, 2).read_bytes()
    key1 = segment_key(SCOPE, e, "meta", 1)

    def read1() -> object:
        return EvidenceReader(bucket, SCOPE).meta(e, 1)

    exc = corrupt_case(bucket, reader, key1, b"not zstd at all", read1)
    assert isinstance(exc.__cause__, PackFrameInvalid)
    frame = compress(meta2)
    exc = corrupt_case(bucket, reader, key1, frame[:-5], read1)
    assert isinstance(exc.__cause__, PackFrameInvalid)
    exc = corrupt_case(bucket, reader, key1, frame + frame, read1)
    assert isinstance(exc.__cause__, PackFrameInvalid)
    streamed = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    unknown_size = streamed.compress(meta2) + streamed.flush()
    exc = corrupt_case(bucket, reader, key1, unknown_size, read1)
    assert isinstance(exc.__cause__, PackFrameInvalid)
    flipped = bytearray(meta2)
    flipped[50] ^= 0xFF
    exc = corrupt_case(bucket, reader, key1, compress(bytes(flipped)), read1)
    assert isinstance(exc.__cause__, SegmentReadError)
    exc = corrupt_case(bucket, reader, key1, compress(meta2), read1)  # meta 2 under meta 1
    assert isinstance(exc.__cause__, SequenceMismatch)
    version = bytearray(meta2)
    version[8:10] = (9).to_bytes(2, "big")
    exc = corrupt_case(bucket, reader, key1, compress(resealed(bytes(version))), read1)
    assert isinstance(exc.__cause__, UnsupportedVersion)
    foreign = segment_file(workload_store, other, Plane.DATA, 1).read_bytes()
    key_d = segment_key(SCOPE, e, "data", 1)
    exc = corrupt_case(
        bucket, reader, key_d, compress(foreign), lambda: reader.data(e, 1)
    )  # another stream's data under this stream
    assert isinstance(exc.__cause__, SegmentReadError)


def test_size_caps(workload_store: Path, workload_bucket: DirectoryBucket) -> None:
    euid = StoreReader(workload_store).list_streams()[0].hex()
    key = segment_key(SCOPE, euid, "data", 1)
    stored = len(workload_bucket.get(key))
    raw = len(segment_file(workload_store, bytes.fromhex(euid), Plane.DATA, 1).read_bytes())
    assert stored < raw
    with pytest.raises(EvidenceCorrupt, match="limit") as info:
        EvidenceReader(workload_bucket, SCOPE, max_object_bytes=stored - 1).data(euid, 1)
    assert info.value.__cause__ is None
    with pytest.raises(EvidenceCorrupt) as info:
        EvidenceReader(workload_bucket, SCOPE, max_object_bytes=raw - 1).data(euid, 1)
    assert isinstance(info.value.__cause__, PackFrameInvalid)
    assert EvidenceReader(workload_bucket, SCOPE, max_object_bytes=raw).data(euid, 1).groups
    with pytest.raises(ValueError):
        EvidenceReader(workload_bucket, SCOPE, max_object_bytes=0)


def test_corrupt_cas_objects(
    workload_store: Path, damaged: tuple[MemoryStore, EvidenceReader]
) -> None:
    bucket, reader = damaged
    files = cas_files(workload_store)
    table_cid, value_cid = first_of(files, 2), first_of(files, 1)
    other_value = max(cid for cid, (c, _) in files.items() if c == 1)
    table_key = cas_key(SCOPE, "tables", table_cid.hex())
    value_key = cas_key(SCOPE, "values", value_cid.hex())
    # a value under the table's key: wrong CID for the path
    exc = corrupt_case(
        bucket, reader, table_key, compress(files[value_cid][1]),
        lambda: reader.function_table(table_cid),
    )  # fmt: skip
    assert isinstance(exc.__cause__, CasPathMismatch)
    # a function table stored under the values family (right CID, wrong codec)
    wrong_family = cas_key(SCOPE, "values", table_cid.hex())
    exc = corrupt_case(
        bucket, reader, wrong_family, compress(files[table_cid][1]),
        lambda: reader.cas_value(table_cid),
    )  # fmt: skip
    assert "codec" in str(exc.__cause__)
    # another value's bytes: its CID is not the key's
    exc = corrupt_case(
        bucket, reader, value_key, compress(files[other_value][1]),
        lambda: reader.cas_value(value_cid),
    )  # fmt: skip
    assert isinstance(exc.__cause__, CasPathMismatch)
    body = bytearray(files[value_cid][1])
    body[90] ^= 0x01
    exc = corrupt_case(
        bucket, reader, value_key, compress(bytes(body)), lambda: reader.cas_value(value_cid)
    )
    assert isinstance(exc.__cause__, SegmentReadError)


# --- scope and transient failures ---------------------------------------------------------------


def test_keys_outside_the_scope(workload_bucket: DirectoryBucket) -> None:
    reader = EvidenceReader(workload_bucket, SCOPE)
    for bad in (
        lambda: reader.exists("evidence/v1/tn_other/prj_proj/env_proj/streams/x"),
        lambda: reader.exists("evidence/v1/tn_proj/prj_proj/env_projX/streams/x"),
        lambda: reader.meta("NOT-HEX", 1),
        lambda: reader.meta("ab" * 16, 0),
        lambda: reader.data("ab" * 15, 1),
        lambda: reader.function_table(b"short"),
        lambda: reader.cas_value(b""),
    ):
        with pytest.raises(EvidenceOutOfScope):
            bad()


def test_store_failures_are_transient(workload_bucket: DirectoryBucket) -> None:
    euid = meta_objects(workload_bucket)[0][0]
    for error in (
        ObjectStoreUnavailable("connection reset", key="k"),
        ObjectStoreAccessDenied("denied", key="k"),
    ):
        store = CountingStore(workload_bucket, fail=lambda key, e=error: e)
        reader = EvidenceReader(store, SCOPE)
        with pytest.raises(EvidenceUnavailable) as info:
            reader.meta(euid, 1)
        assert info.value.transient and info.value.__cause__ is error
        with pytest.raises(EvidenceUnavailable):
            reader.exists(segment_key(SCOPE, euid, "meta", 1))


def test_meta_and_tables_are_cached_data_is_not(
    workload_store: Path, workload_bucket: DirectoryBucket
) -> None:
    store = CountingStore(workload_bucket)
    reader = EvidenceReader(store, SCOPE)
    euid = meta_objects(workload_bucket)[0][0]
    first = reader.meta(euid, 1)
    assert reader.meta(euid, 1) is first
    table_cid = first_of(cas_files(workload_store), 2)
    assert reader.function_table(table_cid) is reader.function_table(table_cid)
    reader.data(euid, 1)
    reader.data(euid, 1)
    assert store.gets[segment_key(SCOPE, euid, "meta", 1)] == 1
    assert store.gets[cas_key(SCOPE, "tables", table_cid.hex())] == 1
    assert store.gets[segment_key(SCOPE, euid, "data", 1)] == 2
    # a failure is not cached: the object is read again
    with pytest.raises(EvidenceMissing):
        reader.meta(euid, 99)
    with pytest.raises(EvidenceMissing):
        reader.meta(euid, 99)
    assert store.gets[segment_key(SCOPE, euid, "meta", 99)] == 2


# --- fuzzing ------------------------------------------------------------------------------------


def _mutate(rng: random.Random, raw: bytes) -> bytes:
    data = bytearray(raw)
    action = rng.randrange(4)
    if action == 0 and data:
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif action == 1:
        del data[rng.randrange(len(data) + 1) :]
    elif action == 2:
        at = rng.randrange(len(data) + 1)
        data[at:at] = rng.randbytes(rng.randint(1, 16))
    else:
        at = rng.randrange(len(data) + 1)
        del data[at : at + rng.randint(1, 16)]
    return bytes(data)


def test_fuzzed_objects_give_only_typed_errors(workload_store: Path) -> None:
    """Mutated store files (re-framed, and re-sealed so the decoders see past the checksum)
    and mutated zstd frames: every read either decodes or raises EvidenceCorrupt."""
    bucket = MemoryStore()
    local = StoreReader(workload_store)
    euid = local.list_streams()[0]
    e = euid.hex()
    files = cas_files(workload_store)
    table_cid, value_cid = first_of(files, 2), first_of(files, 1)
    targets = [
        (
            segment_key(SCOPE, e, "meta", 2),
            segment_file(workload_store, euid, Plane.META, 2).read_bytes(),
            lambda r: r.meta(e, 2),
        ),
        (
            segment_key(SCOPE, e, "data", 1),
            segment_file(workload_store, euid, Plane.DATA, 1).read_bytes(),
            lambda r: r.data(e, 1, roots=None),
        ),
        (cas_key(SCOPE, "tables", table_cid.hex()), files[table_cid][1],
         lambda r: r.function_table(table_cid)),
        (cas_key(SCOPE, "values", value_cid.hex()), files[value_cid][1],
         lambda r: r.cas_value(value_cid)),
    ]  # fmt: skip
    rng = random.Random(20240601)
    outcomes = {"ok": 0, "corrupt": 0}
    for i in range(400):
        key, raw, read = targets[i % len(targets)]
        mode = rng.randrange(3)
        if mode == 0:
            body = compress(_mutate(rng, raw))
        elif mode == 1:
            body = compress(resealed(_mutate(rng, raw)) if len(raw) > 32 else raw)
        else:
            body = _mutate(rng, compress(raw))
        put(bucket, key, body)
        try:
            read(EvidenceReader(bucket, SCOPE))
        except EvidenceCorrupt as exc:
            assert exc.key == key
            assert isinstance(exc.__cause__, SegmentReadError | PackFrameInvalid | None)
            outcomes["corrupt"] += 1
        else:
            outcomes["ok"] += 1
    assert outcomes["corrupt"] > 300
