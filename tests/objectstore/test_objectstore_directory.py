"""The directory bucket beyond the conformance suite: its on-disk layout, crash leftovers,
concurrency, I/O failures and the presigned-PUT handler as a pure function."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import threading
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from objectstore_harness import SECRET, MutableClock, md5, sha

from baml_studio.objectstore import (
    ChecksumMismatch,
    InvalidObjectKey,
    ObjectAlreadyExists,
    ObjectInfo,
    ObjectNotFound,
    ObjectStoreAccessDenied,
    ObjectStoreCorrupt,
    ObjectStoreUnavailable,
)
from baml_studio.objectstore import dirfs as dirfs_module
from baml_studio.objectstore.config import DirectoryBucketConfig
from baml_studio.objectstore.directory import DirectoryBucket
from json_strategies import HOSTILE_BYTES, UNPARSEABLE, shaped

DATA = b"directory bucket bytes"


def make_bucket(root: Path, name: str = "evidence-test", **kwargs: object) -> DirectoryBucket:
    config = DirectoryBucketConfig(root, name, "http://127.0.0.1:1", SECRET)
    return DirectoryBucket(config, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def bucket(tmp_path: Path) -> DirectoryBucket:
    return make_bucket(tmp_path / "buckets")


def test_layout_is_the_key_path_with_a_sidecar(bucket: DirectoryBucket) -> None:
    info = bucket.put_if_absent("evidence/v1/a/b.bin", DATA, sha(DATA))
    assert (bucket.path / "objects/evidence/v1/a/b.bin").read_bytes() == DATA
    sidecar = json.loads((bucket.path / "meta/evidence/v1/a/b.bin").read_text())
    assert sidecar == {
        "version_id": info.version_id,
        "size": len(DATA),
        "sha256": sha(DATA),
        "etag": md5(DATA),
    }
    assert list((bucket.path / "tmp").iterdir()) == []


def test_version_ids_are_unique_and_increasing(bucket: DirectoryBucket) -> None:
    ids = [bucket.put_if_absent(f"k/{i}", DATA, sha(DATA)).version_id or "" for i in range(20)]
    assert len(set(ids)) == 20
    assert ids == sorted(ids)


def test_an_object_and_objects_below_it_cannot_coexist(bucket: DirectoryBucket) -> None:
    bucket.put_if_absent("a/b", DATA, sha(DATA))
    with pytest.raises(InvalidObjectKey, match="nest under the existing object 'a/b'"):
        bucket.put_if_absent("a/b/c", DATA, sha(DATA))
    with pytest.raises(InvalidObjectKey, match="prefix of existing objects"):
        bucket.put_if_absent("a", DATA, sha(DATA))
    assert bucket.get("a/b") == DATA
    with pytest.raises(ObjectNotFound):
        bucket.head("a")


def test_delete_prunes_directories_so_the_prefix_can_be_a_key(bucket: DirectoryBucket) -> None:
    bucket.put_if_absent("a/b/c", DATA, sha(DATA))
    bucket.delete("a/b/c")
    assert list((bucket.path / "objects").iterdir()) == []
    assert list((bucket.path / "meta").iterdir()) == []
    bucket.put_if_absent("a", DATA, sha(DATA))
    assert bucket.get("a") == DATA


def test_concurrent_puts_of_one_key_have_one_winner(bucket: DirectoryBucket) -> None:
    bodies = [f"writer {i}".encode() * 1000 for i in range(8)]
    outcomes: list[object] = [None] * len(bodies)
    barrier = threading.Barrier(len(bodies))

    def write(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = bucket.put_if_absent("race", bodies[index], sha(bodies[index]))
        except ObjectAlreadyExists as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [i for i, outcome in enumerate(outcomes) if isinstance(outcome, ObjectInfo)]
    assert len(winners) == 1
    assert sum(isinstance(o, ObjectAlreadyExists) for o in outcomes) == len(bodies) - 1
    assert bucket.get("race") == bodies[winners[0]]
    assert list((bucket.path / "tmp").iterdir()) == []


def test_orphan_sidecars_from_a_crash_do_not_block_puts(bucket: DirectoryBucket) -> None:
    # a crash after the sidecar rename and before the data rename leaves only meta/<key>
    (bucket.path / "meta/x").mkdir(parents=True)
    (bucket.path / "meta/x/y").write_text("{}")
    (bucket.path / "meta/a").write_text("{}")
    with pytest.raises(ObjectNotFound):
        bucket.head("x/y")
    assert list(bucket.list()) == []
    bucket.put_if_absent("x/y", DATA, sha(DATA))
    assert bucket.head("x/y").sha256 == sha(DATA)
    bucket.put_if_absent("a/b", DATA, sha(DATA))  # orphan file where a directory must go
    assert [info.key for info in bucket.list()] == ["a/b", "x/y"]


def _record_durability(
    bucket: DirectoryBucket, monkeypatch: pytest.MonkeyPatch, key: str
) -> list[tuple[str, bool, bool, bool]]:
    """(``sync``/``link``, staged data present, sidecar in place, object in place) at every
    durability barrier and at the link, in order."""
    events: list[tuple[str, bool, bool, bool]] = []
    real_sync, real_link = dirfs_module.sync_filesystem, os.link
    meta, target = bucket.path / "meta" / key, bucket.path / "objects" / key

    def state(kind: str) -> tuple[str, bool, bool, bool]:
        staged = any(p.read_bytes() == DATA for p in (bucket.path / "tmp").iterdir())
        sidecar = meta.is_file() and json.loads(meta.read_bytes()).get("sha256") == sha(DATA)
        return kind, staged, sidecar, target.is_file()

    def sync(path: Path) -> None:
        events.append(state("sync"))  # what this barrier makes durable
        real_sync(path)

    def link(src: Path, dst: Path) -> None:
        real_link(src, dst)
        events.append(state("link"))

    monkeypatch.setattr(dirfs_module, "sync_filesystem", sync)
    monkeypatch.setattr(os, "link", link)
    return events


def _assert_durable_in_order(events: list[tuple[str, bool, bool, bool]]) -> None:
    """A barrier after the data and the sidecar are in place and before the link (the commit
    point); another after the link, before the put returns."""
    kinds = [event[0] for event in events]
    assert kinds.count("link") == 1
    link = kinds.index("link")
    assert ("sync", True, True, False) in events[:link]
    assert ("sync", True, True, True) in events[link + 1 :]


def test_a_put_syncs_what_the_link_depends_on_before_linking(
    bucket: DirectoryBucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    # complete-or-absent after a crash: the commit point (the link) is durable only after the
    # data and the sidecar are, and the put returns only once the link itself is durable
    events = _record_durability(bucket, monkeypatch, "a/b/c")
    bucket.put_if_absent("a/b/c", DATA, sha(DATA))
    _assert_durable_in_order(events)


def test_a_put_clearing_crash_debris_syncs_before_linking_too(
    bucket: DirectoryBucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    (bucket.path / "meta/a").write_text("{}")  # orphan sidecar where a directory must go
    events = _record_durability(bucket, monkeypatch, "a/b")
    bucket.put_if_absent("a/b", DATA, sha(DATA))  # the slow path, under the exclusive lock
    _assert_durable_in_order(events)


def test_a_file_without_sidecar_is_reported_corrupt(bucket: DirectoryBucket) -> None:
    (bucket.path / "objects/foreign").write_bytes(DATA)
    with pytest.raises(ObjectStoreCorrupt, match="no readable metadata sidecar"):
        bucket.head("foreign")
    bucket.put_if_absent("sized", DATA, sha(DATA))
    (bucket.path / "objects/sized").write_bytes(DATA + b"more")
    with pytest.raises(ObjectStoreCorrupt, match="changed outside"):
        bucket.head("sized")


@pytest.mark.parametrize(
    "sidecar",
    [
        *UNPARSEABLE,
        b'{"size": 1e400, "sha256": "x", "version_id": "v", "etag": "e"}',
        b'{"size": NaN, "sha256": "x", "version_id": "v", "etag": "e"}',
    ],
)
def test_a_sidecar_that_cannot_be_read_is_reported_corrupt(
    bucket: DirectoryBucket, sidecar: bytes
) -> None:
    bucket.put_if_absent("k", DATA, sha(DATA))
    (bucket.path / "meta/k").write_bytes(sidecar)
    with pytest.raises(ObjectStoreCorrupt, match="no readable metadata sidecar"):
        bucket.head("k")


SIDECAR = shaped(
    {
        "size": st.just(len(DATA)) | st.floats() | st.integers(),
        "sha256": st.just(sha(DATA)),
        "version_id": st.just("v1"),
        "etag": st.just(md5(DATA)),
    },
    extra=False,
)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(HOSTILE_BYTES | SIDECAR.map(lambda value: json.dumps(value).encode()))
def test_fuzz_sidecars_read_or_are_corrupt(bucket: DirectoryBucket, sidecar: bytes) -> None:
    if not (bucket.path / "meta/k").exists():
        bucket.put_if_absent("k", DATA, sha(DATA))
    (bucket.path / "meta/k").write_bytes(sidecar)
    with contextlib.suppress(ObjectStoreCorrupt):
        assert bucket.head("k").size == len(DATA)


def test_on_created_sees_each_new_object_once(tmp_path: Path) -> None:
    seen: list[ObjectInfo] = []
    store = make_bucket(tmp_path, on_created=seen.append)
    info = store.put_if_absent("k", DATA, sha(DATA))
    with pytest.raises(ObjectAlreadyExists):
        store.put_if_absent("k", DATA, sha(DATA))
    with pytest.raises(ChecksumMismatch):
        store.put_if_absent("other", DATA, sha(b"x"))
    presigned = store.presign_put("p", len(DATA), sha(DATA), 60)
    query = dict(parse_qsl(urlsplit(presigned.url).query))
    response = store.handle_presigned_put(
        "evidence-test", "p", query, dict(presigned.required_headers), DATA
    )
    assert response.status == 200
    assert [s.key for s in seen] == ["k", "p"]
    assert seen[0] == info


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (errno.ENOSPC, ObjectStoreUnavailable),
        (errno.EIO, ObjectStoreUnavailable),
        (errno.EACCES, ObjectStoreAccessDenied),
    ],
)
def test_os_errors_become_typed_errors(
    bucket: DirectoryBucket, monkeypatch: pytest.MonkeyPatch, code: int, error: type[Exception]
) -> None:
    def failing_stage(tmp_dir: Path, data: bytes) -> Path:
        raise OSError(code, "injected", str(tmp_dir / "x.tmp"))

    monkeypatch.setattr(dirfs_module, "stage", failing_stage)
    with pytest.raises(error) as caught:
        bucket.put_if_absent("k", DATA, sha(DATA))
    assert caught.value.transient is (error is ObjectStoreUnavailable)  # type: ignore[attr-defined]
    assert "x.tmp" in str(caught.value)
    assert isinstance(caught.value.__cause__, OSError)
    monkeypatch.undo()
    with pytest.raises(ObjectNotFound):
        bucket.head("k")


def test_a_failed_commit_leaves_no_staging_files(
    bucket: DirectoryBucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_sync(path: Path) -> None:
        raise OSError(errno.EIO, "injected sync failure", str(path))

    monkeypatch.setattr(dirfs_module, "sync_filesystem", failing_sync)
    with pytest.raises(ObjectStoreUnavailable):
        bucket.put_if_absent("k", DATA, sha(DATA))
    assert list((bucket.path / "tmp").iterdir()) == []
    monkeypatch.undo()
    with pytest.raises(ObjectNotFound):  # the barrier before the link failed: never linked
        bucket.head("k")


def test_presign_clock_is_the_buckets(tmp_path: Path) -> None:
    clock = MutableClock()
    store = make_bucket(tmp_path, clock=clock)
    clock.offset = -7200
    presigned = store.presign_put("k", 1, sha(b"x"), 3600)
    clock.offset = 0
    assert presigned.expires_at.timestamp() < clock()


def test_opening_sweeps_stale_staging_files_only(tmp_path: Path) -> None:
    store = make_bucket(tmp_path)
    stale = store.path / "tmp" / "old.tmp"
    fresh = store.path / "tmp" / "new.tmp"
    stale.write_bytes(b"left by a crash")
    fresh.write_bytes(b"a put in progress")
    os.utime(stale, (1, 1))
    make_bucket(tmp_path)
    assert not stale.exists()
    assert fresh.exists()
