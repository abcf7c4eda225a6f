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

from baml_studio.projector import version_leases
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
    MAX_FILE_BYTES,
    MIN_SPARE_S,
    SKEW_S,
    Lease,
    LeaseMalformed,
    LeaseUnavailable,
    VersionLeases,
    dataset_versions,
    decode_leases,
    encode_leases,
    removable,
    version_stamps,
)


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def lease_files(root: Path) -> list[Path]:
    return sorted((root / LEASE_DIR).glob("*.json"))


# --- the codec ------------------------------------------------------------------------------


def test_leases_round_trip_and_bad_files_are_typed_errors() -> None:
    leases = [Lease({"calls_v1": 3, "projected_v1": 9}, 1_800_000_060.5), Lease({"a": 1}, 7)]
    assert decode_leases(encode_leases(leases)) == leases
    assert decode_leases(encode_leases([])) == []
    good = json.loads(encode_leases(leases[:1]))
    entry = good["leases"][0]

    def with_entry(**change: Any) -> dict[str, Any]:
        return {**good, "leases": [{**entry, **change}]}

    bad: list[Any] = [
        b"", b"\xff\xfe", b"[]", b"null", b"{}", b"[" * 100_000,
        {**good, "format": "other/1"},
        {**good, "leases": {}},
        {**good, "leases": [1]},
        {**good, "leases": [entry] * 4097},
        with_entry(versions={}),
        with_entry(versions=[]),
        with_entry(versions={"calls_v1": 0}),
        with_entry(versions={"calls_v1": 1.5}),
        with_entry(versions={"calls_v1": True}),
        with_entry(versions={"": 2}),
        with_entry(versions={f"d{n}": 1 for n in range(65)}),
        with_entry(expires_at="soon"),
        with_entry(expires_at=None),
        with_entry(expires_at=True),
    ]  # fmt: skip
    for body in bad:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        with pytest.raises(LeaseMalformed):
            decode_leases(data)
    with pytest.raises(LeaseMalformed, match="finite"):
        decode_leases(encode_leases(leases).replace(b"1800000060.5", b"1e999"))
    with pytest.raises(LeaseMalformed, match="bytes"):
        decode_leases(b" " * (MAX_FILE_BYTES + 1))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_decode_leases_bytes(data: bytes) -> None:
    try:
        leases = decode_leases(data)
    except LeaseMalformed:
        return
    assert decode_leases(encode_leases(leases)) == leases


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["format", "leases", "x"]), JSON),
    st.lists(
        st.dictionaries(
            st.sampled_from(["versions", "expires_at", "x"]),
            JSON | st.dictionaries(st.text(max_size=12), st.integers(-2, 2**40), max_size=5),
        ),
        max_size=3,
    ),
    st.booleans(),
)
def test_fuzz_decode_leases_objects(body: dict[str, Any], entries: Any, shaped: bool) -> None:
    if shaped:
        body = {**body, "format": FORMAT, "leases": entries}
    try:
        leases = decode_leases(json.dumps(body).encode())
    except LeaseMalformed:
        return
    assert all(type(v) is int and v >= 1 for lease in leases for v in lease.versions.values())
    assert decode_leases(encode_leases(leases)) == leases


# --- holding and the floor ------------------------------------------------------------------


def stored(path: Path) -> dict[str, tuple[dict[str, int], float]]:
    """A holder's file as ``{sorted versions: (versions, expires_at)}``."""
    leases = decode_leases(path.read_bytes())
    return {json.dumps(lease.versions): (lease.versions, lease.expires_at) for lease in leases}


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
    (only,) = stored(lease_files(tmp_path)[0]).values()
    assert only == ({"calls_v1": 4, "projected_v1": 7}, clock.now + 30 + EXTEND_S)  # 0: none

    clock.now += 70  # inside the spare time, with MIN_SPARE_S to spare: no rewrite
    mine.hold({"calls_v1": 4, "projected_v1": 7}, 5)
    assert mine.writes == 1
    mine.hold({"calls_v1": 4, "projected_v1": 7}, 600)  # a longer query extends it
    mine.hold({"calls_v1": 5, "projected_v1": 8}, 10)  # newer versions: a second entry
    assert mine.writes == 3 and len(lease_files(tmp_path)) == 1  # one file per holder
    assert len(stored(lease_files(tmp_path)[0])) == 2
    theirs.hold({"calls_v1": 2, "projected_v1": 9}, 10)  # another holder, older calls_v1
    assert len(lease_files(tmp_path)) == 2

    floor = mine.floor()
    assert floor.versions == {"calls_v1": 2, "projected_v1": 7} and floor.live == 3

    clock.now += 10 + EXTEND_S + 1  # theirs expired, and mine's newer entry; the first lives
    skewed = mine.floor()  # expired less than SKEW_S ago: still counted (the clocks may differ)
    assert skewed.versions == {"calls_v1": 2, "projected_v1": 7} and skewed.live == 3
    assert mine.floor(now=clock.now + SKEW_S).versions == {"calls_v1": 4, "projected_v1": 7}
    mine.hold({"calls_v1": 6, "projected_v1": 9}, 10)  # a write drops the expired entry
    entries = [versions for versions, _ in stored(Path(mine.path)).values()]
    assert entries == [{"calls_v1": 4, "projected_v1": 7}, {"calls_v1": 6, "projected_v1": 9}]

    clock.now += SKEW_S + GRACE_S  # theirs stopped counting GRACE_S ago: deleted
    floor = mine.floor()
    assert floor.expired_removed == 1 and len(lease_files(tmp_path)) == 1
    assert floor.versions == {"calls_v1": 4, "projected_v1": 7}  # mine: expired < SKEW_S ago
    first = mine.path
    mine.hold({"calls_v1": 7}, 10)  # every entry of mine expired: a new file, never the old
    assert mine.path != first and len(lease_files(tmp_path)) == 2
    assert [v for v, _ in stored(Path(mine.path)).values()] == [{"calls_v1": 7}]

    clock.now += 10 + EXTEND_S + 1 + SKEW_S + GRACE_S
    kept = mine.floor(remove_expired=False)
    assert kept.versions == {} and kept.live == 0 and len(lease_files(tmp_path)) == 2
    assert mine.floor().expired_removed == 2 and lease_files(tmp_path) == []


def test_a_query_sharing_a_lease_gets_at_least_the_minimum_spare(tmp_path: Path) -> None:
    clock = Clock()
    leases = VersionLeases(str(tmp_path), clock=clock)
    leases.hold({"calls_v1": 1}, 100)  # expires at +160
    leases.hold({"calls_v1": 1}, 160 - MIN_SPARE_S)  # exactly the minimum spare: shared
    assert leases.writes == 1
    leases.hold({"calls_v1": 1}, 160 - MIN_SPARE_S + 1)  # less: extended
    assert leases.writes == 2
    ((_, expires),) = stored(Path(leases.path)).values()
    assert expires == clock.now + 160 - MIN_SPARE_S + 1 + EXTEND_S


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


def test_a_holder_keeps_a_bounded_number_of_live_leases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(version_leases, "MAX_LEASES", 2)
    clock = Clock()
    leases = VersionLeases(str(tmp_path), clock=clock)
    leases.hold({"calls_v1": 1}, 10)
    leases.hold({"calls_v1": 2}, 10)
    with pytest.raises(LeaseUnavailable, match="2 leases are live"):
        leases.hold({"calls_v1": 3}, 10)
    assert len(stored(Path(leases.path))) == 2  # the file is as before the refused query
    clock.now += 10 + EXTEND_S + 1  # both expired: the next write drops them
    leases.hold({"calls_v1": 3}, 10)
    assert [v for v, _ in stored(Path(leases.path)).values()] == [{"calls_v1": 3}]


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

    ahead.now = 3600 + EXTEND_S + SKEW_S + 1  # the query is over and its lease expired
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
    assert [lease.versions for lease in decode_leases(body)] == [{VALUES: versions[2]}]

    other = VersionLeases(root, storage_options=options)  # another process reads it
    assert other.floor().versions == {VALUES: versions[2]}
    store.compact(timedelta(0), superseded_grace=timedelta(0))
    assert rows_at(store, versions[2]) == 30
    with pytest.raises(PrivateStoreError, match="no version"):
        store.open_dataset(VALUES, version=versions[1])
    assert lance.dataset(store.uri(VALUES), storage_options=options).count_rows() == 40


def test_removable_decides_by_version_number() -> None:
    stamps = {1: 100.0, 2: 200.0, 3: 300.0, 4: 400.0, 5: 500.0}
    # the retention alone: everything before the cut, never the newest
    assert removable(stamps, before=1e9, leased=None, settled=1e9) == [1, 2, 3, 4]
    assert removable(stamps, before=250.0, leased=None, settled=1e9) == [1, 2]
    # a leased version keeps itself and every later one, even once it is gone itself
    assert removable(stamps, before=1e9, leased=3, settled=1e9) == [1, 2]
    assert removable({1: 100.0, 4: 400.0, 5: 500.0}, before=1e9, leased=3, settled=1e9) == [1]
    # the superseded grace: the version newest at ``settled`` and the later ones stay
    assert removable(stamps, before=1e9, leased=None, settled=350.0) == [1, 2]
    assert removable(stamps, before=1e9, leased=None, settled=50.0) == []
    assert removable(stamps, before=1e9, leased=2, settled=350.0) == [1]
    assert removable({}, before=1e9, leased=1, settled=1e9) == []


def test_a_slow_cleanup_cannot_take_the_leased_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The versions to remove are named: a delay before Lance applies them (a busy process)
    cannot move a time cut-off past the leased version."""
    store = PrivateStore(str(tmp_path))
    versions = four_versions(store)
    store.leases.hold({VALUES: versions[1]}, 3600)
    real = lance.LanceDataset.cleanup_old_versions

    def slow(ds: Any, *args: Any, **kwargs: Any) -> Any:
        time.sleep(0.3)
        return real(ds, *args, **kwargs)

    monkeypatch.setattr(lance.LanceDataset, "cleanup_old_versions", slow)
    store.compact(timedelta(0), superseded_grace=timedelta(0))
    assert rows_at(store, versions[1]) == 20
    with pytest.raises(PrivateStoreError, match="no version"):
        store.open_dataset(VALUES, version=versions[0])


def test_commit_times_are_exact_in_the_hour_daylight_saving_repeats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lance's public ``versions()`` gives naive local datetimes made with a ``timedelta``
    added, which drops the ``fold``: a commit in the repeated hour at the end of daylight
    saving time reads an hour older. The stamps come from the native nanoseconds instead."""
    import time

    import lance
    import pyarrow as pa
    from lance.dataset import _convert_version_timestamp

    ds = lance.write_dataset(pa.table({"a": [1]}), str(tmp_path / "d"))
    lance.write_dataset(pa.table({"a": [2]}), str(tmp_path / "d"), mode="append")
    ds = lance.dataset(str(tmp_path / "d"))
    exact = version_stamps(dataset_versions(ds))
    public = version_stamps(ds.versions())
    assert sorted(exact) == sorted(public) == [1, 2]
    assert all(abs(exact[v] - public[v]) < 1.0 for v in exact)  # this host: no repeated hour

    # 2026-11-01 01:30 EST, the second 01:30 in New York that night (06:30 UTC)
    nanos = 1_793_514_600 * 10**9
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        naive = _convert_version_timestamp({"version": 7, "timestamp": nanos})
        assert version_stamps([naive]) == {7: nanos / 1e9 - 3600}  # what the public list gives
        assert version_stamps([{"version": 7, "timestamp": nanos}]) == {7: nanos / 1e9}
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_dataset_versions_falls_back_to_the_public_list() -> None:
    from datetime import datetime

    class Public:
        def versions(self) -> list[dict[str, object]]:
            return [{"version": 3, "timestamp": datetime.fromtimestamp(1_000.5)}]

    assert version_stamps(dataset_versions(Public())) == {3: 1_000.5}
    assert version_stamps([{"version": 4, "timestamp": None}, {"version": 5}]) == {}
