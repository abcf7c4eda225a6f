"""The must-show cases of issue 8 over the real ingest path (directory bucket, SQLite queue,
chDB, local Lance): after an erasure nothing of the streams remains in the bucket, the facts or
Lance, queries no longer return them, surviving streams are whole; shared large values follow
the reference count; replay and a full rebuild bring nothing back."""

from __future__ import annotations

from pathlib import Path

from erasure_rig import (
    PREFIX,
    SCOPE,
    assert_gone,
    carrier,
    erasure_rig,
    euid_body,
    other_store,
    pack_cids,
)
from projector_fixtures import workload_store

from baml_studio.gateway.keys import cas_key

__all__ = ["other_store", "workload_store"]


def test_erasing_the_stream_that_carries_the_packs_keeps_the_others_values(
    tmp_path: Path, chdb_dsn: str, workload_store: Path
) -> None:
    with erasure_rig(tmp_path, chdb_dsn, [workload_store]) as rig:
        packs, other = carrier(rig, rig.streams)
        assert packs.executions and other.executions
        before_tables = rig.keys(f"{PREFIX}cas/tables/")
        cache = rig.coordinator.coordinator.cache
        rig.remote_rows("SELECT output FROM calls")  # fills the coordinator's value cache
        assert cache.stats.entries
        record = rig.erase(euid_body(packs))
        assert record.state == "succeeded", record.error
        assert cache.stats.entries == 0  # no erased value left on the coordinator's disk
        assert record.to_json()["streams_matched"] == 1
        assert record.to_json()["streams_deleted"] == 1
        assert_gone(rig, [packs])
        assert rig.keys(f"{PREFIX}cas/tables/") == before_tables  # the survivor's table stays
        for cid in other.values:  # the packs are gone; the survivor's values moved to cas/
            assert rig.keys(cas_key(SCOPE, "values", cid)), cid
        rig.rebuild_everything()  # the survivor projects whole from what is left
        assert_gone(rig, [packs])

        record = rig.erase(euid_body(other))
        assert record.state == "succeeded", record.error
        assert_gone(rig, [packs, other])
        assert rig.keys(PREFIX) == set()  # no stream left: no value, no table either
        assert rig.lance_cids() == (set(), set())


def test_erasing_a_stream_rewrites_the_packs_that_carry_its_values(
    tmp_path: Path, chdb_dsn: str, workload_store: Path
) -> None:
    with erasure_rig(tmp_path, chdb_dsn, [workload_store]) as rig:
        packs, other = carrier(rig, rig.streams)
        only_other = other.values - packs.values
        assert only_other & pack_cids(rig), "the carrier's packs hold the other's small values"
        record = rig.erase(euid_body(other))
        assert record.state == "succeeded", record.error
        assert_gone(rig, [other])
        assert not only_other & pack_cids(rig)
        assert packs.values - packs.large <= pack_cids(rig)  # the carrier's own values stay
        assert rig.replay_missing() == 0  # no pack misses a value in values_v1
        rig.rebuild_everything()
        assert_gone(rig, [other])


def test_a_shared_large_value_follows_the_reference_count_and_replay_restores_nothing(
    tmp_path: Path, chdb_dsn: str, workload_store: Path, other_store: Path
) -> None:
    with erasure_rig(tmp_path, chdb_dsn, [workload_store, other_store]) as rig:
        a = [s for s in rig.streams if s.store == rig.stores[0]]
        b = [s for s in rig.streams if s.store == rig.stores[1]]
        x, y = next((x, y) for x in a for y in b if x.large & y.large)
        shared = x.large & y.large
        assert shared

        assert rig.erase(euid_body(x)).state == "succeeded"
        assert_gone(rig, [x])
        for cid in shared:  # still readable: in the bucket, in values_v1, in y's rows
            assert rig.keys(cas_key(SCOPE, "values", cid))
        assert shared <= rig.lance_cids()[0]

        assert rig.erase(euid_body(y)).state == "succeeded"
        assert_gone(rig, [x, y])
        for cid in shared:  # now used only by erased streams: gone
            assert not rig.keys(cas_key(SCOPE, "values", cid))
        assert not shared & (rig.lance_cids()[0] | rig.lance_cids()[1])

        assert rig.replay_missing() == 0  # nothing is missing: nothing to replay
        assert_gone(rig, [x, y])
        rig.rebuild_everything()  # a new generation and Lance from nothing, from the bucket
        assert_gone(rig, [x, y])
