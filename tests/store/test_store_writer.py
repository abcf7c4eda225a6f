"""StreamStore: open-scan, dense sequences per plane, reopen, in-process exclusivity."""

from __future__ import annotations

from pathlib import Path

import pytest
from store_helpers import FaultyFs, data_encoder, meta_bytes, meta_encoder

from baml_studio.format.errors import InvalidChecksum
from baml_studio.store import (
    Committed,
    CorruptHighWater,
    Lost,
    Plane,
    StoreClosed,
    StoreFailureReason,
    StoreLayout,
    StreamHighWater,
    StreamInUse,
    StreamStore,
)


def test_planes_have_independent_dense_sequences_from_one(root: Path, euid: bytes) -> None:
    with StreamStore.open(root, euid) as store:
        assert store.high_water == StreamHighWater(0, 0)
        results = [
            store.publish_meta(meta_encoder(euid)),
            store.publish_data(data_encoder(euid)),
            store.publish_data(data_encoder(euid)),
            store.publish_meta(meta_encoder(euid)),
            store.publish_data(data_encoder(euid)),
        ]
        assert results == [Committed(1), Committed(1), Committed(2), Committed(2), Committed(3)]
        assert store.high_water == StreamHighWater(meta=2, data=3)
    layout = StoreLayout(root)
    assert sorted(p.name for p in layout.plane_dir(euid, Plane.META).iterdir()) == [
        "00000000000000000001.bamlmeta",
        "00000000000000000002.bamlmeta",
    ]
    assert sorted(p.name for p in layout.plane_dir(euid, Plane.DATA).iterdir()) == [
        f"{n:020d}.bamldata" for n in (1, 2, 3)
    ]


def test_encode_receives_the_allocated_sequence(root: Path, euid: bytes) -> None:
    seen: list[int] = []

    def encode(sequence: int) -> bytes:
        seen.append(sequence)
        return meta_bytes(euid, sequence)

    with StreamStore.open(root, euid) as store:
        store.publish_meta(encode)
        store.publish_meta(encode)
    assert seen == [1, 2]


def test_reopen_resumes_from_high_water(root: Path, euid: bytes) -> None:
    with StreamStore.open(root, euid) as store:
        for _ in range(3):
            store.publish_meta(meta_encoder(euid))
        store.publish_data(data_encoder(euid))
    with StreamStore.open(root, euid) as store:
        assert store.high_water == StreamHighWater(meta=3, data=1)
        assert store.publish_meta(meta_encoder(euid)) == Committed(4)
        assert store.publish_data(data_encoder(euid)) == Committed(2)


def test_open_scan_ignores_ill_formed_names(root: Path, euid: bytes) -> None:
    with StreamStore.open(root, euid) as store:
        store.publish_meta(meta_encoder(euid))
    meta_dir = StoreLayout(root).plane_dir(euid, Plane.META)
    for name in (
        "0000000000000000009.bamlmeta",
        "000000000000000000009.bamlmeta",
        "0000000000000000000a.bamlmeta",
        "00000000000000000009.bamldata",
        "00000000000000000000.bamlmeta",
        "99999999999999999999.bamlmeta",
        "00000000000000000009.bamlmeta.pending",
    ):
        (meta_dir / name).write_bytes(b"junk")
    with StreamStore.open(root, euid) as store:
        assert store.high_water.meta == 1


def test_corrupt_highest_segment_fails_the_open(root: Path, euid: bytes) -> None:
    with StreamStore.open(root, euid) as store:
        store.publish_meta(meta_encoder(euid))
        store.publish_meta(meta_encoder(euid))
    highest = StoreLayout(root).segment_path(euid, Plane.META, 2)
    raw = bytearray(highest.read_bytes())
    raw[20] ^= 0xFF
    highest.write_bytes(bytes(raw))
    with pytest.raises(CorruptHighWater) as info:
        StreamStore.open(root, euid)
    assert info.value.path == highest
    assert isinstance(info.value.cause, InvalidChecksum)
    assert info.value.reason is StoreFailureReason.STORE_UNAVAILABLE
    # the failed open released everything: removing the bad file makes the stream openable
    highest.unlink()
    with StreamStore.open(root, euid) as store:
        assert store.high_water.meta == 1


def test_corrupt_lower_segment_does_not_fail_the_open(root: Path, euid: bytes) -> None:
    with StreamStore.open(root, euid) as store:
        store.publish_data(data_encoder(euid))
        store.publish_data(data_encoder(euid))
    StoreLayout(root).segment_path(euid, Plane.DATA, 1).write_bytes(b"garbage")
    with StreamStore.open(root, euid) as store:
        assert store.high_water.data == 2


def test_open_fsyncs_both_plane_directories(root: Path, euid: bytes) -> None:
    fs = FaultyFs()
    layout = StoreLayout(root)
    with StreamStore.open(root, euid, fs=fs):
        pass
    synced = fs.ops("fsync_dir")
    assert str(layout.plane_dir(euid, Plane.META)) in synced
    assert str(layout.plane_dir(euid, Plane.DATA)) in synced


def test_second_open_in_process_is_stream_in_use(root: Path, euid: bytes) -> None:
    with StreamStore.open(root, euid) as store:
        with pytest.raises(StreamInUse) as info:
            StreamStore.open(root, euid)
        assert info.value.reason is StoreFailureReason.STREAM_IN_USE
        # the same root through another spelling is the same stream
        with pytest.raises(StreamInUse):
            StreamStore.open(root.parent / ".." / ".baml" / "profiles-v1", euid)
        assert store.publish_meta(meta_encoder(euid)) == Committed(1)
    with StreamStore.open(root, euid) as again:
        assert again.high_water.meta == 1


def test_two_streams_share_one_root(root: Path) -> None:
    a, b = bytes(16), bytes([1]) * 16
    with StreamStore.open(root, a) as sa, StreamStore.open(root, b) as sb:
        assert sa.publish_meta(meta_encoder(a)) == Committed(1)
        assert sb.publish_meta(meta_encoder(b)) == Committed(1)


def test_closed_store_raises_and_close_is_idempotent(root: Path, euid: bytes) -> None:
    store = StreamStore.open(root, euid)
    store.close()
    store.close()
    assert store.closed
    with pytest.raises(StoreClosed):
        store.publish_meta(meta_encoder(euid))


def test_bad_euid_is_a_programming_error(root: Path) -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        StreamStore.open(root, b"short")


def test_existing_final_path_is_a_path_conflict_and_never_overwritten(
    root: Path, euid: bytes
) -> None:
    with StreamStore.open(root, euid) as store:
        intruder = StoreLayout(root).segment_path(euid, Plane.META, 1)
        intruder.write_bytes(b"someone else")
        assert store.publish_meta(meta_encoder(euid)) == Lost(StoreFailureReason.PATH_CONFLICT)
        assert intruder.read_bytes() == b"someone else"
        assert store.high_water.meta == 0
        assert not list((root / "tmp").glob("*.pending"))


def test_sequence_exhausted(root: Path, euid: bytes) -> None:
    last = (1 << 64) - 1
    layout = StoreLayout(root)
    with StreamStore.open(root, euid):
        pass
    layout.segment_path(euid, Plane.META, last).write_bytes(meta_bytes(euid, last))
    with StreamStore.open(root, euid) as store:
        assert store.high_water.meta == last
        assert store.publish_meta(meta_encoder(euid)) == Lost(StoreFailureReason.SEQUENCE_EXHAUSTED)
        assert store.publish_data(data_encoder(euid)) == Committed(1)


def test_store_writer_alias_and_layout_on_disk(root: Path, euid: bytes) -> None:
    from baml_studio.store import StoreWriter

    assert StoreWriter is StreamStore
    with StoreWriter.open(root, euid) as store:
        store.publish_meta(meta_encoder(euid))
    assert (root.parent / "profiles-v1.lock").is_file()
    assert (root / "publish.lock").is_file()
    assert (root / "usage.state").stat().st_size == 48
    assert (root / "tmp").is_dir()
    assert (root / "streams" / euid.hex() / "stream.lock").stat().st_size == 0
