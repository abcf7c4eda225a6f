"""The object store conformance suite: every test runs against the directory bucket and S3
(ministack). Differences between the adapters are stated per test, never hidden."""

from __future__ import annotations

import pytest
from objectstore_harness import StoreHarness, md5, sha

from baml_studio.objectstore import (
    ChecksumMismatch,
    InvalidArgument,
    InvalidObjectKey,
    ObjectAlreadyExists,
    ObjectInfo,
    ObjectNotFound,
)

KEY = (
    "evidence/v1/t/p/e/streams/0123456789abcdef0123456789abcdef/meta/"
    "00000000000000000001.bamlmeta.zst"
)
DATA = b"the quick brown fox jumps over the lazy dog"


def test_put_then_head_and_get(harness: StoreHarness) -> None:
    store = harness.store
    put = store.put_if_absent(KEY, DATA, sha(DATA))
    assert (put.key, put.size, put.sha256, put.etag) == (KEY, len(DATA), sha(DATA), md5(DATA))
    assert put.version_id
    head = store.head(KEY)
    assert head == ObjectInfo(KEY, len(DATA), sha(DATA), put.version_id, md5(DATA))
    assert store.get(KEY) == DATA


def test_empty_object(harness: StoreHarness) -> None:
    harness.store.put_if_absent("empty/object", b"", sha(b""))
    assert harness.store.head("empty/object").size == 0
    assert harness.store.get("empty/object") == b""


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (None, None, DATA),
        (4, 9, DATA[4:9]),
        (4, None, DATA[4:]),
        (None, 3, DATA[:3]),
        (0, 1, DATA[:1]),
        (10, 10_000, DATA[10:]),
        (7, 7, b""),
        (len(DATA), None, b""),
        (len(DATA) + 5, len(DATA) + 9, b""),
    ],
)
def test_ranged_get_is_half_open_and_clamped(
    harness: StoreHarness, start: int | None, end: int | None, expected: bytes
) -> None:
    harness.store.put_if_absent(KEY, DATA, sha(DATA))
    assert harness.store.get(KEY, start, end) == expected


def test_invalid_range_is_rejected(harness: StoreHarness) -> None:
    harness.store.put_if_absent(KEY, DATA, sha(DATA))
    with pytest.raises(InvalidArgument):
        harness.store.get(KEY, 5, 4)
    with pytest.raises(InvalidArgument):
        harness.store.get(KEY, -1, 4)


def test_missing_key_is_not_found(harness: StoreHarness) -> None:
    with pytest.raises(ObjectNotFound) as caught:
        harness.store.head("no/such/key")
    assert caught.value.key == "no/such/key"
    with pytest.raises(ObjectNotFound):
        harness.store.get("no/such/key")
    with pytest.raises(ObjectNotFound):
        harness.store.get("no/such/key", 3, 3)


def test_list_by_prefix_is_sorted_by_key(harness: StoreHarness) -> None:
    keys = ["a/b/2", "a/b/1", "a/b-c", "a/bz", "a/b/0/deep", "b/other", "ab"]
    for index, key in enumerate(keys):
        body = f"body {index}".encode() * (index + 1)
        harness.store.put_if_absent(key, body, sha(body))
    listed = list(harness.store.list("a/b"))
    assert [info.key for info in listed] == ["a/b-c", "a/b/0/deep", "a/b/1", "a/b/2", "a/bz"]
    by_key = {info.key: info for info in listed}
    body = b"body 1" * 2
    assert (by_key["a/b/1"].size, by_key["a/b/1"].etag) == (len(body), md5(body))
    assert [info.key for info in harness.store.list("a/b/")] == ["a/b/0/deep", "a/b/1", "a/b/2"]
    assert [info.key for info in harness.store.list()] == sorted(keys)
    assert list(harness.store.list("zzz/")) == []


def test_create_only_keeps_the_first_object(harness: StoreHarness) -> None:
    first = harness.store.put_if_absent(KEY, DATA, sha(DATA))
    other = b"a different body"
    with pytest.raises(ObjectAlreadyExists) as caught:
        harness.store.put_if_absent(KEY, other, sha(other))
    assert caught.value.key == KEY
    with pytest.raises(ObjectAlreadyExists):
        harness.store.put_if_absent(KEY, DATA, sha(DATA))
    assert harness.store.get(KEY) == DATA
    assert harness.store.head(KEY) == first
    assert len(harness.leftovers(KEY)) in (1, 2)  # S3: one version; directory: data + sidecar


def test_bad_checksum_stores_nothing(harness: StoreHarness) -> None:
    with pytest.raises(ChecksumMismatch) as caught:
        harness.store.put_if_absent(KEY, DATA, sha(b"something else"))
    assert caught.value.key == KEY
    assert caught.value.actual == sha(DATA)
    with pytest.raises(ObjectNotFound):
        harness.store.head(KEY)
    assert list(harness.store.list()) == []
    assert harness.leftovers(KEY) == []


@pytest.mark.parametrize("checksum", ["", "ABC", sha(DATA).upper(), sha(DATA)[:-1], "g" * 64])
def test_malformed_checksum_is_invalid_argument(harness: StoreHarness, checksum: str) -> None:
    with pytest.raises(InvalidArgument):
        harness.store.put_if_absent(KEY, DATA, checksum)
    with pytest.raises(InvalidArgument):
        harness.store.presign_put(KEY, len(DATA), checksum, 60)


@pytest.mark.parametrize(
    "key", ["", "/leading", "trailing/", "a//b", "a/./b", "a/../b", "..", "nul\x00", "x" * 1025]
)
def test_invalid_keys_are_refused_by_every_operation(harness: StoreHarness, key: str) -> None:
    store = harness.store
    with pytest.raises(InvalidObjectKey):
        store.put_if_absent(key, DATA, sha(DATA))
    with pytest.raises(InvalidObjectKey):
        store.head(key)
    with pytest.raises(InvalidObjectKey):
        store.get(key)
    with pytest.raises(InvalidObjectKey):
        store.delete(key)
    with pytest.raises(InvalidObjectKey):
        store.presign_put(key, 1, sha(DATA), 60)


def test_unusual_characters_in_keys_round_trip(harness: StoreHarness) -> None:
    key = "odd/spaces and+plus/ünïcödé/%41?#&=.bin"
    harness.store.put_if_absent(key, DATA, sha(DATA))
    assert harness.store.get(key) == DATA
    assert [info.key for info in harness.store.list("odd/")] == [key]


def test_delete_removes_every_version(harness: StoreHarness) -> None:
    store = harness.store
    store.put_if_absent(KEY, DATA, sha(DATA))
    store.delete(KEY, all_versions=False)  # S3: a delete marker over the kept version
    with pytest.raises(ObjectNotFound):
        store.head(KEY)
    if harness.kind == "s3":
        assert len(harness.leftovers(KEY)) == 2  # the old version and the delete marker
    store.delete(KEY)
    assert harness.leftovers(KEY) == []
    assert list(store.list()) == []


def test_delete_then_put_again(harness: StoreHarness) -> None:
    first = harness.store.put_if_absent(KEY, DATA, sha(DATA))
    harness.store.delete(KEY)
    with pytest.raises(ObjectNotFound):
        harness.store.get(KEY)
    other = b"second life"
    second = harness.store.put_if_absent(KEY, other, sha(other))
    assert second.version_id != first.version_id
    assert harness.store.get(KEY) == other


def test_delete_leaves_neighbours(harness: StoreHarness) -> None:
    for key in ("s/a", "s/a2", "s/ab"):
        harness.store.put_if_absent(key, DATA, sha(DATA))
    harness.store.delete("s/a")
    assert [info.key for info in harness.store.list("s/")] == ["s/a2", "s/ab"]
    assert harness.leftovers("s/a2") != []


def test_delete_missing_key_is_a_no_op(harness: StoreHarness) -> None:
    harness.store.delete("never/written")
    harness.store.delete("never/written", all_versions=False)
    assert list(harness.store.list()) == []
