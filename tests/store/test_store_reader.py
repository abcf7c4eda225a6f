"""StoreReader: typed errors per file, and a scan that reports every corruption and goes on."""

from __future__ import annotations

import random
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_helpers import (
    data_bytes,
    data_encoder,
    meta_encoder,
    root_ended,
    root_started,
)

from baml_studio.format.errors import (
    EuidMismatch,
    InvalidChecksum,
    SegmentReadError,
    Truncated,
)
from baml_studio.format.ids import ThreadRef, value_cid
from baml_studio.format.records import EngineStarted, StreamStarted
from baml_studio.store import (
    CasPathMismatch,
    Committed,
    Plane,
    SequenceMismatch,
    StoreLayout,
    StoreNotFound,
    StoreReader,
    StreamStore,
)


def _populate(root: Path, euid: bytes, executions: int = 2) -> list[ThreadRef]:
    roots = [ThreadRef(euid, 1, n) for n in range(1, executions + 1)]
    header = (StreamStarted(1, 2, "0.17.0", "linux-x86_64"), EngineStarted(1, b"\x11" * 16))
    with StreamStore.open(root, euid) as store:
        store.publish_meta(meta_encoder(euid, (*header, *(root_started(r) for r in roots))))
        store.publish_data(data_encoder(euid, tuple(roots)))
        store.publish_data(data_encoder(euid, (roots[0],)))
        store.publish_meta(meta_encoder(euid, tuple(root_ended(r, 1) for r in roots)))
        store.publish_cas(1, b"value one")
        store.publish_cas(2, b"table")
    return roots


def test_reads_round_trip(root: Path, euid: bytes) -> None:
    roots = _populate(root, euid)
    reader = StoreReader(root)
    assert reader.list_streams() == [euid]
    assert reader.meta_sequences(euid) == [1, 2]
    assert reader.data_sequences(euid) == [1, 2]
    meta = reader.read_meta(euid, 1)
    assert meta.sequence == 1 and isinstance(meta.records[1], EngineStarted)
    assert [g.root for g in reader.read_data(euid, 1).groups] == roots
    assert [g.root for g in reader.read_data(euid, 1, roots=[roots[1]]).groups] == [roots[1]]
    obj = reader.read_cas(value_cid(1, b"value one"))
    assert (obj.codec, obj.body) == (1, b"value one")


def test_missing_things(root: Path, euid: bytes) -> None:
    reader = StoreReader(root)
    assert reader.list_streams() == []
    assert reader.meta_sequences(euid) == []
    assert reader.is_alive(euid) is False
    with pytest.raises(StoreNotFound):
        reader.read_meta(euid, 1)
    _populate(root, euid)
    with pytest.raises(StoreNotFound):
        reader.read_data(euid, 3)
    with pytest.raises(StoreNotFound):
        reader.read_cas(value_cid(1, b"absent"))


def test_listing_ignores_foreign_names(root: Path, euid: bytes) -> None:
    _populate(root, euid)
    streams = root / "streams"
    for name in ("not-a-stream", "AB" * 16, "ab" * 15):
        (streams / name).mkdir()
    (streams / ("cd" * 16)).write_text("a file, not a stream directory")
    (streams / euid.hex() / "meta" / "readme.txt").write_text("x")
    (streams / euid.hex() / "meta" / "00000000000000000003.bamlmeta.pending").write_text("x")
    reader = StoreReader(root)
    assert reader.list_streams() == [euid]
    assert reader.meta_sequences(euid) == [1, 2]
    assert reader.scan().corruptions == ()


def test_typed_errors_for_damaged_files(root: Path, euid: bytes) -> None:
    _populate(root, euid)
    layout = StoreLayout(root)
    reader = StoreReader(root)
    meta1 = layout.segment_path(euid, Plane.META, 1)
    raw = bytearray(meta1.read_bytes())
    raw[30] ^= 0x40
    meta1.write_bytes(bytes(raw))
    with pytest.raises(InvalidChecksum):
        reader.read_meta(euid, 1)
    data2 = layout.segment_path(euid, Plane.DATA, 2)
    data2.write_bytes(data2.read_bytes()[:20])
    with pytest.raises(Truncated):
        reader.read_data(euid, 2)
    cid = value_cid(1, b"value one")
    cas = layout.cas_path(cid)
    cas.write_bytes(cas.read_bytes()[:-1] + b"\x00")
    with pytest.raises(InvalidChecksum):
        reader.read_cas(cid)


def test_wrong_euid_directory_and_wrong_sequence_name(root: Path, euid: bytes) -> None:
    _populate(root, euid)
    other = uuid.uuid4().bytes
    layout = StoreLayout(root)
    for plane in Plane:
        layout.plane_dir(other, plane).mkdir(parents=True)
    shutil.copy(layout.segment_path(euid, Plane.DATA, 1), layout.segment_path(other, Plane.DATA, 1))
    shutil.copy(layout.segment_path(euid, Plane.META, 1), layout.segment_path(euid, Plane.META, 5))
    reader = StoreReader(root)
    with pytest.raises(EuidMismatch):
        reader.read_data(other, 1)
    with pytest.raises(SequenceMismatch):
        reader.read_meta(euid, 5)


def test_cas_object_under_the_wrong_name(root: Path, euid: bytes) -> None:
    _populate(root, euid)
    layout = StoreLayout(root)
    wrong = value_cid(1, b"elsewhere")
    layout.cas_path(wrong).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(layout.cas_path(value_cid(1, b"value one")), layout.cas_path(wrong))
    with pytest.raises(CasPathMismatch):
        StoreReader(root).read_cas(wrong)
    check = StoreReader(root).check_cas()
    assert check.objects == 2
    assert [c.path for c in check.corruptions] == [layout.cas_path(wrong)]


def test_scan_summarises_streams_and_executions(root: Path, euid: bytes) -> None:
    roots = _populate(root, euid, executions=3)
    scan = StoreReader(root).scan()
    assert scan.corruptions == ()
    assert scan.cas_objects == 2
    (stream,) = scan.streams
    assert (stream.euid, stream.alive) == (euid, False)
    assert (stream.meta_high_water, stream.data_high_water) == (2, 2)
    assert stream.meta_gaps == stream.data_gaps == ()
    assert [e.root for e in scan.executions] == roots
    first = scan.executions[0]
    assert first.started is not None and first.ended is not None
    assert first.engine == EngineStarted(1, b"\x11" * 16)
    assert first.data_sequences == (1, 2)
    assert scan.executions[1].data_sequences == (1,)


def test_scan_reports_gaps(root: Path, euid: bytes) -> None:
    with StreamStore.open(root, euid) as store:
        for _ in range(6):
            store.publish_data(data_encoder(euid))
    layout = StoreLayout(root)
    for n in (1, 3, 4):
        layout.segment_path(euid, Plane.DATA, n).unlink()
    (stream,) = StoreReader(root).scan().streams
    assert stream.data_high_water == 6
    assert stream.data_gaps == ((1, 1), (3, 4))


def test_scan_continues_past_every_kind_of_damage(root: Path, euid: bytes) -> None:
    _populate(root, euid)
    layout = StoreLayout(root)
    other = uuid.uuid4().bytes
    layout.plane_dir(other, Plane.DATA).mkdir(parents=True)
    misplaced = layout.segment_path(other, Plane.DATA, 1)
    misplaced.write_bytes(data_bytes(euid, 1))
    flipped = layout.segment_path(euid, Plane.META, 2)
    raw = bytearray(flipped.read_bytes())
    raw[-1] ^= 1
    flipped.write_bytes(bytes(raw))
    truncated = layout.segment_path(euid, Plane.DATA, 1)
    truncated.write_bytes(truncated.read_bytes()[:-40])
    directory = layout.segment_path(euid, Plane.DATA, 9)
    directory.mkdir()
    scan = StoreReader(root).scan()
    errors = {c.path: type(c.error) for c in scan.corruptions}
    assert set(errors) == {misplaced, flipped, truncated, directory}
    assert errors[misplaced] is EuidMismatch
    assert errors[flipped] is InvalidChecksum
    assert issubclass(errors[truncated], SegmentReadError)
    # the good files were still decoded
    assert scan.cas_objects == 2
    assert all(e.started is not None for e in scan.executions)


def _publish_random(root: Path, rng: random.Random) -> list[Path]:
    euids = [rng.randbytes(16) for _ in range(rng.randint(1, 3))]
    for euid in euids:
        with StreamStore.open(root, euid) as store:
            for _ in range(rng.randint(1, 4)):
                assert isinstance(store.publish_meta(meta_encoder(euid)), Committed)
                assert isinstance(store.publish_data(data_encoder(euid)), Committed)
                store.publish_cas(rng.choice([1, 2]), rng.randbytes(rng.randint(0, 64)))
    finals = [p for p in root.rglob("*") if p.suffix in {".bamlmeta", ".bamldata", ".bamlvalue"}]
    return sorted(finals)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_fuzz_scan_reports_exactly_the_corrupted_files(seed: int) -> None:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / ".baml" / "profiles-v1"
        finals = _publish_random(root, rng)
        victims = set(rng.sample(finals, rng.randint(0, len(finals))))
        for path in victims:
            raw = bytearray(path.read_bytes())
            if rng.random() < 0.2:
                raw = raw[: rng.randrange(len(raw))]
            else:
                for index in rng.sample(range(len(raw)), rng.randint(1, min(4, len(raw)))):
                    raw[index] ^= rng.randint(1, 255)
            path.write_bytes(bytes(raw))
        scan = StoreReader(root).scan()
        assert scan.corrupt_paths == victims
        assert all(isinstance(c.error, SegmentReadError) for c in scan.corruptions)
        cas_total = sum(1 for p in finals if p.suffix == ".bamlvalue")
        assert scan.cas_objects == cas_total - sum(1 for p in victims if p.suffix == ".bamlvalue")
        healthy = [p for p in finals if p not in victims and p.suffix != ".bamlvalue"]
        reader = StoreReader(root)
        for path in healthy:
            euid = bytes.fromhex(path.parent.parent.name)
            sequence = int(path.stem)
            if path.suffix == ".bamlmeta":
                assert reader.read_meta(euid, sequence).sequence == sequence
            else:
                assert reader.read_data(euid, sequence).sequence == sequence
