"""Group-committed CAS publication: same outcomes as one-by-one, shared durability barriers."""

from __future__ import annotations

import errno
from pathlib import Path

from store_helpers import FaultyFs, pending_files

from baml_studio.format.cas import decode_cas_object, encode_cas_object
from baml_studio.format.ids import value_cid
from baml_studio.store import (
    AdmissionGate,
    Blocked,
    Conflict,
    DiskBudget,
    Indeterminate,
    Lost,
    Published,
    Reused,
    StoreFailureReason,
    StoreLayout,
    StreamStore,
    scan_physical_usage,
)
from baml_studio.store.usage import read_usage_state


def _bodies(n: int, size: int = 100) -> list[tuple[int, bytes]]:
    return [(1, bytes([i % 256]) * size + i.to_bytes(4, "big")) for i in range(n)]


def test_batch_publishes_every_object_with_two_barriers(root: Path, euid: bytes) -> None:
    fs = FaultyFs()
    items = _bodies(20)
    with StreamStore.open(root, euid, fs=fs) as store:
        fs.calls.clear()
        results = store.publish_cas_batch(items)
    assert results == [Published(value_cid(c, b)) for c, b in items]
    assert len(fs.ops("sync_filesystem")) == 2
    assert fs.ops("fsync") == [""]  # no per-object fsync: only the ledger's pending file
    layout = StoreLayout(root)
    for codec, body in items:
        obj = decode_cas_object(layout.cas_path(value_cid(codec, body)).read_bytes())
        assert (obj.codec, obj.body) == (codec, body)
    assert read_usage_state(layout) == scan_physical_usage(layout)
    assert pending_files(root) == []


def test_batch_reuses_existing_dedupes_repeats_and_reports_conflicts(
    root: Path, euid: bytes
) -> None:
    first, second, third = _bodies(3)
    layout = StoreLayout(root)
    with StreamStore.open(root, euid) as store:
        assert store.publish_cas(*first) == Published(value_cid(*first))
        store.publish_cas(*third)
        bad = layout.cas_path(value_cid(*third))
        bad.write_bytes(bad.read_bytes()[:-1] + b"\0")
        results = store.publish_cas_batch([first, second, second, third])
    assert results == [
        Reused(value_cid(*first)),
        Published(value_cid(*second)),
        Published(value_cid(*second)),
        Conflict(value_cid(*third)),
    ]


def test_budget_exhausted_mid_batch_latches_and_loses_the_rest(root: Path, euid: bytes) -> None:
    items = _bodies(10, size=1000)
    with StreamStore.open(root, euid, DiskBudget(max_project_bytes=4500)) as store:
        results = store.publish_cas_batch(items)
        assert store.gate == AdmissionGate.DISK
        published = [r for r in results if isinstance(r, Published)]
        assert 0 < len(published) < len(items)
        lost = results[len(published) :]
        assert lost == [Lost(StoreFailureReason.DISK_GUARD_EXCEEDED)] * len(lost)
        assert store.publish_cas_batch(_bodies(1)) == [Lost(StoreFailureReason.DISK_GUARD_EXCEEDED)]
    layout = StoreLayout(root)
    assert read_usage_state(layout) == scan_physical_usage(layout) <= 4500


def test_enospc_on_one_write_loses_it_and_latches(root: Path, euid: bytes) -> None:
    fs = FaultyFs()
    items = _bodies(5)
    with StreamStore.open(root, euid, fs=fs) as store:
        fs.fail("write_all", errno.ENOSPC)
        results = store.publish_cas_batch(items)
        assert store.gate == AdmissionGate.DISK
    assert results == [Lost(StoreFailureReason.DISK_GUARD_EXCEEDED)] * 5
    assert pending_files(root) == []
    assert not list((root / "cas").rglob("*.bamlvalue"))


def test_failed_first_barrier_renames_nothing(root: Path, euid: bytes) -> None:
    fs = FaultyFs()
    with StreamStore.open(root, euid, fs=fs) as store:
        fs.fail("sync_filesystem", errno.EIO)
        results = store.publish_cas_batch(_bodies(4))
        assert all(r == Lost(StoreFailureReason.STORE_UNAVAILABLE) for r in results)
        assert store.publish_cas_batch(_bodies(1))[0] == Published(value_cid(*_bodies(1)[0]))
    assert pending_files(root) == []


def test_failed_second_barrier_is_indeterminate_until_resolved(root: Path, euid: bytes) -> None:
    fs = FaultyFs()
    items = _bodies(3)
    with StreamStore.open(root, euid, fs=fs) as store:
        fs.faults.clear()
        fs.fail("sync_filesystem", errno.EIO, times=1)
        fs.faults["sync_filesystem"].when = lambda _p: len(fs.ops("sync_filesystem")) == 2
        results = store.publish_cas_batch(items)
        assert all(isinstance(r, Indeterminate) for r in results)
        assert isinstance(store.publish_cas(1, b"later"), Blocked)
        assert store.resolve_indeterminate()
        assert store.publish_cas(1, b"later") == Published(value_cid(1, b"later"))
    layout = StoreLayout(root)
    assert read_usage_state(layout) == scan_physical_usage(layout)


def test_an_object_written_by_another_writer_before_the_rename_is_never_replaced(
    root: Path, euid: bytes
) -> None:
    """The final-path recheck and the rename are one step: another process's object that
    appears after the recheck would have been silently replaced by a recheck-then-rename."""
    fs = FaultyFs()
    same, other = _bodies(2)
    layout = StoreLayout(root)
    theirs = {
        layout.cas_path(value_cid(*same)): encode_cas_object(*same, value_cid(*same)),
        layout.cas_path(value_cid(*other)): b"their different bytes",
    }

    def race(_src: Path, dst: Path) -> None:
        if dst in theirs:
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(theirs[dst])

    with StreamStore.open(root, euid, fs=fs) as store:
        fs.before_rename = race
        results = store.publish_cas_batch([same, other])
    assert results == [Reused(value_cid(*same)), Conflict(value_cid(*other))]
    for path, data in theirs.items():
        assert path.read_bytes() == data
    assert pending_files(root) == []
