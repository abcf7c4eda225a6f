"""The BAMLUSE1 ledger: format, typed decode errors (fuzzed), and agreement with a physical scan."""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from store_helpers import FaultyFs, data_encoder, meta_encoder

from baml_studio.format.errors import (
    EncodeError,
    InvalidChecksum,
    InvalidMagic,
    SegmentReadError,
    TrailingBytes,
    Truncated,
)
from baml_studio.store import (
    USAGE_STATE_BYTES,
    Committed,
    StoreLayout,
    StreamStore,
    UsageScanError,
    decode_usage_state,
    encode_usage_state,
    scan_physical_usage,
)
from baml_studio.store.usage import read_usage_state, write_usage_state

U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)


def test_layout_of_the_ledger() -> None:
    raw = encode_usage_state(0x0102030405060708)
    assert len(raw) == USAGE_STATE_BYTES == 48
    assert raw[:8] == b"BAMLUSE1"
    assert raw[8:16] == bytes.fromhex("0102030405060708")
    assert raw[16:] == hashlib.sha256(b"BAMLUSE1" + bytes.fromhex("0102030405060708")).digest()
    assert encode_usage_state(48).hex() == (
        "42414d4c55534531"
        "0000000000000030"
        + hashlib.sha256(bytes.fromhex("42414d4c555345310000000000000030")).hexdigest()
    )


def test_usage_must_fit_u64() -> None:
    with pytest.raises(EncodeError):
        encode_usage_state(1 << 64)
    with pytest.raises(EncodeError):
        encode_usage_state(-1)


@given(U64)
def test_round_trip(usage: int) -> None:
    assert decode_usage_state(encode_usage_state(usage)) == usage


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b"", Truncated),
        (encode_usage_state(5)[:47], Truncated),
        (encode_usage_state(5) + b"\x00", TrailingBytes),
        (b"BAMLUSE2" + encode_usage_state(5)[8:], InvalidMagic),
        (encode_usage_state(5)[:15] + b"\x06" + encode_usage_state(5)[16:], InvalidChecksum),
        (encode_usage_state(5)[:47] + b"\x00", InvalidChecksum),
    ],
)
def test_typed_decode_errors(raw: bytes, error: type[SegmentReadError]) -> None:
    with pytest.raises(error):
        decode_usage_state(raw)


@given(U64, st.integers(min_value=0, max_value=47), st.integers(min_value=1, max_value=255))
def test_every_single_byte_corruption_is_rejected(usage: int, index: int, mask: int) -> None:
    raw = bytearray(encode_usage_state(usage))
    raw[index] ^= mask
    expected = InvalidMagic if index < 8 else InvalidChecksum
    with pytest.raises(expected):
        decode_usage_state(bytes(raw))


@given(st.binary(max_size=100))
def test_fuzz_decode_raises_only_typed_errors(raw: bytes) -> None:
    try:
        usage = decode_usage_state(raw)
    except SegmentReadError:
        return
    assert encode_usage_state(usage) == raw


def test_physical_scan_counts_regular_files_except_the_three(tmp_path: Path) -> None:
    layout = StoreLayout(tmp_path / ".baml" / "profiles-v1")
    assert scan_physical_usage(layout) == 48  # a missing root is empty
    (layout.root / "tmp").mkdir(parents=True)
    (layout.root / "streams" / "x").mkdir(parents=True)
    layout.publish_lock.write_bytes(b"p" * 100)
    layout.usage_state.write_bytes(b"u" * 48)
    layout.usage_pending.write_bytes(b"u" * 48)
    (layout.root / "tmp" / "orphan.pending").write_bytes(b"o" * 7)
    (layout.root / "streams" / "x" / "stream.lock").write_bytes(b"")
    (layout.root / "streams" / "x" / "file").write_bytes(b"f" * 1000)
    (layout.root / "runs").mkdir()
    (layout.root / "runs" / "legacy").write_bytes(b"l" * 5)
    assert scan_physical_usage(layout) == 48 + 7 + 1000 + 5


@pytest.mark.parametrize("kind", ["symlink", "dangling symlink", "fifo", "socket"])
def test_physical_scan_rejects_non_regular_entries(tmp_path: Path, kind: str) -> None:
    layout = StoreLayout(tmp_path / ".baml" / "profiles-v1")
    (layout.root / "cas").mkdir(parents=True)
    bad = layout.root / "cas" / "bad"
    if kind == "symlink":
        os.symlink(tmp_path, bad)
    elif kind == "dangling symlink":
        os.symlink(tmp_path / "nowhere", bad)
    elif kind == "fifo":
        os.mkfifo(bad)
    else:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(bad))
    with pytest.raises(UsageScanError) as info:
        scan_physical_usage(layout)
    assert info.value.path == bad


def test_ledger_equals_physical_scan_after_publishes(root: Path, euid: bytes) -> None:
    layout = StoreLayout(root)
    with StreamStore.open(root, euid) as store:
        for n in range(5):
            store.publish_meta(meta_encoder(euid))
            store.publish_data(data_encoder(euid))
            store.publish_cas(1, bytes([n]) * (n * 100))
            store.publish_cas(1, bytes([n]) * (n * 100))  # reuse adds nothing
            assert read_usage_state(layout) == scan_physical_usage(layout)
    assert read_usage_state(layout) == scan_physical_usage(layout)


@pytest.mark.parametrize("ledger", [None, b"garbage", encode_usage_state(5)[:-1] + b"\x00"])
def test_missing_or_corrupt_ledger_is_rebuilt_from_a_scan(
    root: Path, euid: bytes, ledger: bytes | None
) -> None:
    layout = StoreLayout(root)
    with StreamStore.open(root, euid) as store:
        store.publish_meta(meta_encoder(euid))
        if ledger is None:
            layout.usage_state.unlink()
        else:
            layout.usage_state.write_bytes(ledger)
        assert store.publish_meta(meta_encoder(euid)) == Committed(2)
        assert read_usage_state(layout) == scan_physical_usage(layout)


def test_ledger_rewrite_survives_a_stale_pending_file(root: Path, euid: bytes) -> None:
    layout = StoreLayout(root)
    with StreamStore.open(root, euid):
        pass
    layout.usage_pending.write_bytes(b"left by a crash")
    write_usage_state(FaultyFs(), layout, 1234)
    assert read_usage_state(layout) == 1234
    assert not layout.usage_pending.exists()


def test_ledger_rewrite_order_is_pending_fsync_rename_rootsync(root: Path, euid: bytes) -> None:
    layout = StoreLayout(root)
    with StreamStore.open(root, euid):
        pass
    fs = FaultyFs()
    write_usage_state(fs, layout, 99)
    assert [op for op, _ in fs.calls] == ["create_new", "write_all", "fsync", "rename", "fsync_dir"]
    assert fs.calls[0][1] == str(layout.usage_pending)
    assert fs.calls[3][1] == str(layout.usage_state)
    assert fs.calls[4][1] == str(layout.root)
