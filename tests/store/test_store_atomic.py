"""Complete-or-absent publication: injected failures at every durable step."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from store_helpers import FaultyFs, data_encoder, files_under, meta_encoder, pending_files

from baml_studio.store import (
    GATE_DISK,
    GATE_OPEN,
    Blocked,
    Committed,
    Indeterminate,
    Lost,
    Plane,
    PublicationKind,
    Published,
    StoreFailureReason,
    StoreLayout,
    StreamStore,
    scan_physical_usage,
)
from baml_studio.store.usage import read_usage_state

BEFORE_RENAME = ["create_new", "write_all", "fsync", "rename"]


def _is_final(path: Path) -> bool:
    return path.suffix in {".bamlmeta", ".bamldata", ".bamlvalue"}


@pytest.mark.parametrize("op", BEFORE_RENAME)
def test_failure_before_rename_loses_without_consuming_the_sequence(
    root: Path, euid: bytes, op: str
) -> None:
    fs = FaultyFs()
    with StreamStore.open(root, euid, fs=fs) as store:
        assert store.publish_meta(meta_encoder(euid)) == Committed(1)
        before = files_under(root)
        fs.fail(op, errno.EIO, when=lambda p: "usage" not in p.name)
        assert store.publish_meta(meta_encoder(euid)) == Lost(StoreFailureReason.STORE_UNAVAILABLE)
        assert files_under(root) == before  # no tmp file, no partial final, ledger unchanged
        assert store.high_water.meta == 1
        assert store.gate is GATE_OPEN
        assert store.publish_meta(meta_encoder(euid)) == Committed(2)


def test_enospc_on_write_is_disk_guard_and_latches_the_gate(root: Path, euid: bytes) -> None:
    fs = FaultyFs()
    with StreamStore.open(root, euid, fs=fs) as store:
        fs.fail("write_all", errno.ENOSPC)
        assert store.publish_data(data_encoder(euid)) == Lost(
            StoreFailureReason.DISK_GUARD_EXCEEDED
        )
        assert store.gate is GATE_DISK
        assert pending_files(root) == []
        assert store.high_water.data == 0


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (errno.EACCES, StoreFailureReason.PERMISSION_DENIED),
        (errno.EPERM, StoreFailureReason.PERMISSION_DENIED),
        (errno.EIO, StoreFailureReason.STORE_UNAVAILABLE),
        (errno.ENOSPC, StoreFailureReason.DISK_GUARD_EXCEEDED),
    ],
)
def test_errno_mapping(root: Path, euid: bytes, code: int, reason: StoreFailureReason) -> None:
    fs = FaultyFs()
    with StreamStore.open(root, euid, fs=fs) as store:
        fs.fail("create_new", code)
        assert store.publish_cas(1, b"value") == Lost(reason)


def test_dir_fsync_failure_after_rename_is_indeterminate_then_blocks(
    root: Path, euid: bytes
) -> None:
    fs = FaultyFs()
    layout = StoreLayout(root)
    meta_dir = layout.plane_dir(euid, Plane.META)
    with StreamStore.open(root, euid, fs=fs) as store:
        store.publish_meta(meta_encoder(euid))
        fs.fail("fsync_dir", errno.EIO, when=lambda p: p == meta_dir, times=2)
        result = store.publish_meta(meta_encoder(euid))
        assert isinstance(result, Indeterminate)
        assert result.sequence == 2
        assert result.token.kind is PublicationKind.META
        assert result.token.path == layout.segment_path(euid, Plane.META, 2)
        assert result.token.path.read_bytes() == meta_encoder(euid)(2)  # complete, not partial
        assert store.high_water.meta == 2  # the indeterminate file owns its number
        assert store.indeterminate == result.token

        before = files_under(root)
        blocked = Blocked(result.token)
        assert store.publish_meta(meta_encoder(euid)) == blocked
        assert store.publish_meta(meta_encoder(euid), terminal=True) == blocked
        assert store.publish_data(data_encoder(euid)) == blocked
        assert store.publish_cas(1, b"v") == blocked
        assert files_under(root) == before

        assert store.resolve_indeterminate() is False  # the second injected failure
        assert store.publish_data(data_encoder(euid)) == blocked
        assert store.resolve_indeterminate() is True
        assert store.indeterminate is None
        assert read_usage_state(layout) == scan_physical_usage(layout)
        assert store.publish_meta(meta_encoder(euid)) == Committed(3)
        assert store.publish_data(data_encoder(euid)) == Committed(1)


@pytest.mark.parametrize("step", ["create_new", "rename", "fsync_dir"])
def test_usage_ledger_failure_after_rename_is_indeterminate(
    root: Path, euid: bytes, step: str
) -> None:
    fs = FaultyFs()
    layout = StoreLayout(root)
    with StreamStore.open(root, euid, fs=fs) as store:
        store.publish_data(data_encoder(euid))
        ledger_path = layout.usage_state if step == "rename" else layout.root
        target = layout.usage_pending if step == "create_new" else ledger_path
        fs.fail(step, errno.EIO, when=lambda p: p == target)
        result = store.publish_data(data_encoder(euid))
        assert isinstance(result, Indeterminate)
        assert result.sequence == 2
        assert layout.segment_path(euid, Plane.DATA, 2).is_file()
        assert isinstance(store.publish_meta(meta_encoder(euid)), Blocked)
        assert store.resolve_indeterminate() is True
        assert read_usage_state(layout) == scan_physical_usage(layout)
        assert not layout.usage_pending.exists()
        assert store.publish_data(data_encoder(euid)) == Committed(3)


def test_cas_indeterminate_has_no_sequence(root: Path, euid: bytes) -> None:
    fs = FaultyFs()
    with StreamStore.open(root, euid, fs=fs) as store:
        fs.fail("fsync_dir", errno.EIO, when=lambda p: p.parent.name == "sha256")
        result = store.publish_cas(1, b"body")
        assert isinstance(result, Indeterminate)
        assert result.sequence is None
        assert result.token.kind is PublicationKind.CAS
        assert store.resolve_indeterminate()
        assert isinstance(store.publish_cas(1, b"other"), Published)


def test_close_retries_an_indeterminate_publication(root: Path, euid: bytes) -> None:
    fs = FaultyFs()
    layout = StoreLayout(root)
    store = StreamStore.open(root, euid, fs=fs)
    fs.fail("fsync_dir", errno.EIO, when=lambda p: p == layout.plane_dir(euid, Plane.META))
    assert isinstance(store.publish_meta(meta_encoder(euid)), Indeterminate)
    store.close()
    assert read_usage_state(layout) == scan_physical_usage(layout)
    with StreamStore.open(root, euid) as again:
        assert again.publish_meta(meta_encoder(euid)) == Committed(2)


def test_no_tmp_files_and_no_partial_finals_after_many_failures(root: Path, euid: bytes) -> None:
    fs = FaultyFs()
    expected: dict[Path, bytes] = {}
    layout = StoreLayout(root)
    with StreamStore.open(root, euid, fs=fs) as store:
        for attempt in range(40):
            op = BEFORE_RENAME[attempt % len(BEFORE_RENAME)]
            if attempt % 3:
                fs.fail(op, errno.EIO, when=lambda p: "usage" not in p.name)
            sequence = store.high_water.meta + 1
            result = store.publish_meta(meta_encoder(euid))
            if isinstance(result, Committed):
                expected[layout.segment_path(euid, Plane.META, sequence)] = meta_encoder(euid)(
                    sequence
                )
            fs.faults.clear()
    finals = {p: b for p, b in files_under(root).items() if _is_final(p)}
    assert finals == expected
    assert pending_files(root) == []
    assert sorted(expected) == [
        layout.segment_path(euid, Plane.META, n) for n in range(1, len(expected) + 1)
    ]


def test_a_publication_is_four_fsyncs_in_order(root: Path, euid: bytes) -> None:
    fs = FaultyFs()
    layout = StoreLayout(root)
    with StreamStore.open(root, euid, fs=fs) as store:
        store.publish_meta(meta_encoder(euid))
        fs.calls.clear()
        assert store.publish_meta(meta_encoder(euid)) == Committed(2)
    ops = [op for op, _ in fs.calls]
    assert ops == [
        "create_new", "write_all", "fsync", "rename", "fsync_dir",
        "create_new", "write_all", "fsync", "rename", "fsync_dir",
    ]  # fmt: skip
    paths = [Path(p) for _, p in fs.calls]
    assert paths[0].parent == layout.tmp_dir and paths[0].suffix == ".pending"
    assert paths[3] == layout.segment_path(euid, Plane.META, 2)
    assert paths[4] == layout.plane_dir(euid, Plane.META)
    assert paths[5] == layout.usage_pending
    assert paths[8] == layout.usage_state
    assert paths[9] == layout.root
