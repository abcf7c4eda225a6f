"""Version leases (``projector.version_leases``): the lease codec (fuzzed), holding and sharing
leases, the floor compaction reads, and compaction keeping the versions a live lease names,
locally and on S3 (ministack)."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import lance
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lance_fixtures import invoice

from baml_studio.projector.lance_store import (
    VALUES,
    PrivateStore,
    PrivateStoreError,
)
from baml_studio.projector.version_leases import (
    EXTEND_S,
    FORMAT,
    GRACE_S,
    LEASE_DIR,
    Lease,
    LeaseMalformed,
    LeaseUnavailable,
    VersionLeases,
    decode_lease,
)


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def lease_files(root: Path) -> list[Path]:
    return sorted((root / LEASE_DIR).glob("*.json"))


# --- the codec ------------------------------------------------------------------------------


def test_a_lease_round_trips_and_bad_bodies_are_typed_errors() -> None:
    lease = Lease({"calls_v1": 3, "projected_v1": 9}, 1_800_000_060.5)
    assert decode_lease(lease.encode()) == lease
    good = json.loads(lease.encode())
    bad: list[Any] = [
        b"", b"\xff\xfe", b"[]", b"null", b"{}", b"[" * 100_000,
        {**good, "format": "other/1"},
        {**good, "versions": {}},
        {**good, "versions": []},
        {**good, "versions": {"calls_v1": 0}},
        {**good, "versions": {"calls_v1": 1.5}},
        {**good, "versions": {"calls_v1": True}},
        {**good, "versions": {"": 2}},
        {**good, "versions": {f"d{n}": 1 for n in range(65)}},
        {**good, "expires_at": "soon"},
        {**good, "expires_at": None},
        {**good, "expires_at": True},
    ]  # fmt: skip
    for body in bad:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        with pytest.raises(LeaseMalformed):
            decode_lease(data)
    with pytest.raises(LeaseMalformed, match="finite"):
        decode_lease(lease.encode().replace(b"1800000060.5", b"1e999"))
    with pytest.raises(LeaseMalformed, match="bytes"):
        decode_lease(b" " * (64 * 1024 + 1))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_decode_lease_bytes(data: bytes) -> None:
    try:
        lease = decode_lease(data)
    except LeaseMalformed:
        return
    assert decode_lease(lease.encode()) == lease


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["format", "versions", "expires_at", "x"]), JSON),
    st.dictionaries(st.text(max_size=12), st.integers(-2, 2**40) | JSON, max_size=5),
    st.booleans(),
)
def test_fuzz_decode_lease_objects(body: dict[str, Any], versions: Any, shaped: bool) -> None:
    if shaped:
        body = {**body, "format": FORMAT, "versions": versions}
    try:
        lease = decode_lease(json.dumps(body).encode())
    except LeaseMalformed:
        return
    assert all(type(v) is int and v >= 1 for v in lease.versions.values())
    assert decode_lease(lease.encode()) == lease


# --- holding and the floor ------------------------------------------------------------------


def test_leases_are_shared_extended_and_expire(tmp_path: Path) -> None:
    clock = Clock()
    mine, theirs = (
        VersionLeases(str(tmp_path), clock=clock),
        VersionLeases(str(tmp_path), clock=clock),
    )
    assert mine.floor().versions == {}  # no lease directory yet

    mine.hold({"calls_v1": 4, "projected_v1": 7, "values_v1": 0}, 30)
    mine.hold({"projected_v1": 7, "calls_v1": 4}, 30)  # the same versions, within the lease
    assert mine.writes == 1 and len(lease_files(tmp_path)) == 1
    stored = decode_lease(lease_files(tmp_path)[0].read_bytes())
    assert stored.versions == {"calls_v1": 4, "projected_v1": 7}  # version 0: nothing to keep
    assert stored.expires_at == clock.now + 30 + EXTEND_S

    clock.now += 80  # inside the spare time: no rewrite
    mine.hold({"calls_v1": 4, "projected_v1": 7}, 5)
    assert mine.writes == 1
    mine.hold({"calls_v1": 4, "projected_v1": 7}, 600)  # a longer query extends it
    assert mine.writes == 2 and len(lease_files(tmp_path)) == 1
    theirs.hold({"calls_v1": 2, "projected_v1": 9}, 10)  # another holder, older calls_v1
    assert len(lease_files(tmp_path)) == 2

    floor = mine.floor()
    assert floor.versions == {"calls_v1": 2, "projected_v1": 7} and floor.live == 2

    clock.now += 10 + EXTEND_S + 1  # theirs expired, mine still live
    assert mine.floor().versions == {"calls_v1": 4, "projected_v1": 7}
    assert len(lease_files(tmp_path)) == 2  # expired, but within the grace period
    clock.now += GRACE_S
    floor = mine.floor()
    assert floor.expired_removed == 1 and len(lease_files(tmp_path)) == 1
    clock.now += 600 + EXTEND_S
    kept = mine.floor(remove_expired=False)
    assert kept.versions == {} and kept.live == 0 and len(lease_files(tmp_path)) == 1
    assert mine.floor().expired_removed == 1 and lease_files(tmp_path) == []


def test_a_malformed_lease_is_reported_and_protects_nothing(tmp_path: Path) -> None:
    leases = VersionLeases(str(tmp_path), clock=Clock())
    leases.hold({"calls_v1": 3}, 60)
    (tmp_path / LEASE_DIR / "junk.json").write_bytes(b"{not json")
    (tmp_path / LEASE_DIR / "notes.txt").write_bytes(b"ignored: not a lease name")
    floor = leases.floor()
    assert floor.versions == {"calls_v1": 3} and floor.live == 1
    assert [Path(p).name for p in floor.malformed] == ["junk.json"]
    assert (tmp_path / LEASE_DIR / "junk.json").exists()  # left for an operator


def test_an_unwritable_lease_is_a_transient_typed_error(tmp_path: Path) -> None:
    (tmp_path / LEASE_DIR).write_bytes(b"a file where the directory should be")
    leases = VersionLeases(str(tmp_path))
    with pytest.raises(LeaseUnavailable) as raised:
        leases.hold({"calls_v1": 1}, 10)
    assert raised.value.transient
    with pytest.raises(ValueError, match="local and s3"):
        VersionLeases("gs://bucket/x")


# --- compaction keeps leased versions -------------------------------------------------------


def four_versions(store: PrivateStore) -> list[int]:
    """Four ingests of ``values_v1``: its versions 1..4, with 10, 20, 30, 40 rows."""
    versions = []
    for start in range(0, 40, 10):
        if versions:  # further apart than the margin compaction keeps before a leased version
            time.sleep(0.1)
        store.ingest_values([invoice(n) for n in range(start, start + 10)])
        versions.append(store.version([VALUES])[VALUES])
    return versions


def rows_at(store: PrivateStore, version: int) -> int:
    ds = store.open_dataset(VALUES, version=version)
    assert ds is not None
    return ds.count_rows()


def test_compaction_keeps_the_versions_a_live_lease_names(tmp_path: Path) -> None:
    ahead = Clock(0.0)  # the store's clock runs this far ahead of the real one

    def now() -> datetime:
        return datetime.fromtimestamp(time.time() + ahead.now, UTC)

    store = PrivateStore(str(tmp_path), clock=now)
    versions = four_versions(store)
    assert [rows_at(store, v) for v in versions] == [10, 20, 30, 40]
    store.leases.hold({VALUES: versions[1]}, 3600)  # a query reading the second version

    # a retention of 0 would remove every version but the newest
    report = store.compact(timedelta(0), superseded_grace=timedelta(0))
    values = next(d for d in report.datasets if d.name == VALUES)
    assert values.kept_from_version == versions[1]
    assert rows_at(store, versions[1]) == 20  # the leased version still reads
    with pytest.raises(PrivateStoreError, match="no version"):
        store.open_dataset(VALUES, version=versions[0])  # older than the lease: removed
    assert report.leases_live == 1

    ahead.now = 3600 + EXTEND_S + 1  # the query is over and its lease expired
    report = store.compact(timedelta(0), superseded_grace=timedelta(0))
    assert next(d for d in report.datasets if d.name == VALUES).kept_from_version is None
    with pytest.raises(PrivateStoreError, match="no version"):
        store.open_dataset(VALUES, version=versions[1])
    newest = store.version([VALUES])[VALUES]
    assert rows_at(store, newest) == 40


def test_without_a_lease_a_version_stays_for_the_grace_after_it_is_superseded(
    tmp_path: Path,
) -> None:
    """A query reads the newest version, then writes its lease: a version superseded less
    than the grace ago stays, so a compaction between the two cannot remove it."""
    store = PrivateStore(str(tmp_path))
    versions = four_versions(store)
    grace = timedelta(seconds=0.15)  # versions[2] was superseded just now
    store.compact(timedelta(0), superseded_grace=grace)
    assert rows_at(store, versions[2]) == 30
    with pytest.raises(PrivateStoreError, match="no version"):
        store.open_dataset(VALUES, version=versions[0])
    store.compact(timedelta(0), superseded_grace=timedelta(0))
    with pytest.raises(PrivateStoreError, match="no version"):
        store.open_dataset(VALUES, version=versions[2])
    with pytest.raises(PrivateStoreError, match="negative"):
        store.compact(timedelta(0), superseded_grace=timedelta(seconds=-1))


def test_leases_and_compaction_on_s3(ministack_endpoint: str) -> None:
    from ministack_fixture import client, lance_options

    bucket = f"lease-{uuid.uuid4().hex[:20]}"
    s3 = client("s3", ministack_endpoint)
    s3.create_bucket(Bucket=bucket)
    options = lance_options(ministack_endpoint)
    root = f"s3://{bucket}/derived/v1/tenant/project/env"
    store = PrivateStore(root, storage_options=options)
    versions = four_versions(store)
    store.leases.hold({VALUES: versions[2]}, 3600)
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"derived/v1/tenant/project/env/{LEASE_DIR}/")
    keys = [item["Key"] for item in listed.get("Contents", [])]
    assert len(keys) == 1
    body = s3.get_object(Bucket=bucket, Key=keys[0])["Body"].read()
    assert decode_lease(body).versions == {VALUES: versions[2]}

    other = VersionLeases(root, storage_options=options)  # another process reads it
    assert other.floor().versions == {VALUES: versions[2]}
    store.compact(timedelta(0), superseded_grace=timedelta(0))
    assert rows_at(store, versions[2]) == 30
    with pytest.raises(PrivateStoreError, match="no version"):
        store.open_dataset(VALUES, version=versions[1])
    assert lance.dataset(store.uri(VALUES), storage_options=options).count_rows() == 40
