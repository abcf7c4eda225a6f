"""The publisher's must-show scenarios against the real gateway over both adapter families:
directory bucket + SQLite queue, and S3 + SQS on ministack (S3 notifying SQS through the two
rules the data plane installs at start)."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from publisher_real_gateway import FAMILIES, PREFIX, RealGateway, real_gateway_family

from baml_studio.publisher import Publisher, PublishState, decode_pack
from baml_studio.store import StoreReader
from baml_studio.workload import run_workload

_KEY = re.compile(
    re.escape(PREFIX)
    + r"(?:streams/(?P<euid>[0-9a-f]{32})/(?:(?P<plane>meta|data)/(?P<seq>\d{20})\.baml(?P=plane)"
    r"|values/(?P<flush>[0-7][0-9A-HJKMNP-TV-Z]{25})\.bamlpack)"
    r"|cas/(?P<cas>values|tables)/(?P<two>[0-9a-f]{2})/(?P<cid>[0-9a-f]{64})\.baml(?:value|table))"
    r"\.zst"
)
_RANK = {"table": 0, "value": 0, "pack": 0, "data": 1, "meta": 2}


def _kind(key: str) -> str:
    match = _KEY.fullmatch(key)
    assert match is not None, f"unexpected key {key}"
    if match["cas"] is not None:
        assert match["cid"].startswith(match["two"])
        return "value" if match["cas"] == "values" else "table"
    return match["plane"] or "pack"


def _notified(keys: list[str]) -> list[str]:
    return sorted(k for k in keys if _kind(k) in {"meta", "pack"})


@pytest.fixture(params=FAMILIES)
def gateway(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RealGateway]:
    """The real gateway over each adapter family in turn."""
    endpoint = request.getfixturevalue("ministack_endpoint") if request.param == "s3" else None
    with real_gateway_family(request.param, tmp_path / "dataplane", endpoint) as built:
        yield built


@pytest.fixture(scope="session")
def other_store_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second demo store of the same workload: other streams, the same large values."""
    root = tmp_path_factory.mktemp("other") / "profiles-v1"
    run_workload(root, executions=24, processes=2, seed=11)
    return root


def test_one_flush_lands_five_kinds_in_order_and_notifies_meta_and_packs(
    gateway: RealGateway, demo_store: Path
) -> None:
    report = Publisher(demo_store, gateway.url, gateway.token).flush()
    assert report.complete, report.problems
    kinds = [_kind(k) for k in report.uploaded]
    assert set(kinds) == {"table", "value", "pack", "data", "meta"}
    # tables, large values and packs first, then data segments, then meta segments
    assert [_RANK[k] for k in kinds] == sorted(_RANK[k] for k in kinds)
    assert report.stored == [] and len(set(report.uploaded)) == len(report.uploaded)
    reader, state = StoreReader(demo_store), PublishState(demo_store)
    for euid in reader.list_streams():
        for plane, sequences in (
            ("meta", reader.meta_sequences(euid)),
            ("data", reader.data_sequences(euid)),
        ):
            landed = [k for k in report.uploaded if f"/streams/{euid.hex()}/{plane}/" in k]
            stem = f"{PREFIX}streams/{euid.hex()}/{plane}/"
            assert landed == [f"{stem}{s:020d}.baml{plane}.zst" for s in sorted(sequences)]
        cursor = state.read_cursor(euid)
        assert (cursor.meta, cursor.data) == (
            max(reader.meta_sequences(euid)),
            max(reader.data_sequences(euid)),
        )
    for key in report.uploaded:
        assert gateway.store.head(key).size > 0
    packs = [k for k in report.uploaded if _kind(k) == "pack"]
    for key in packs:
        for entry in decode_pack(gateway.store.get(key)).entries:
            assert state.is_shipped(entry.cid)  # the local store released what shipped
    events = gateway.drain_events(want=len(_notified(report.uploaded)))
    assert sorted(e.key for e in events) == _notified(report.uploaded)
    for event in events:
        assert event.bucket == gateway.bucket
        assert event.size == gateway.store.head(event.key).size
    again = Publisher(demo_store, gateway.url, gateway.token).flush()
    assert again.uploaded == [] and again.objects == 0
    assert gateway.drain_events(want=0) == []


def test_retry_after_wiped_state_answers_stored_for_every_landed_object(
    gateway: RealGateway, demo_store: Path
) -> None:
    first = Publisher(demo_store, gateway.url, gateway.token).flush()
    assert first.complete, first.problems
    gateway.drain_events(want=len(_notified(first.uploaded)))
    reader = StoreReader(demo_store)
    shutil.rmtree(PublishState(demo_store).dir)  # cursors, journal and shipped ledger
    state = PublishState(demo_store)
    assert all(state.read_cursor(euid).meta == 0 for euid in reader.list_streams())
    second = Publisher(demo_store, gateway.url, gateway.token).flush()
    assert second.complete, second.problems
    first_packs = {k for k in first.uploaded if _kind(k) == "pack"}
    assert set(second.stored) == set(first.uploaded) - first_packs
    # a completed flush forgets its pack ids: packs are shipped again under a new flush id
    # (harmless, the projector collapses values by CID); nothing else is uploaded twice
    second_packs = set(second.uploaded)
    assert {_kind(k) for k in second_packs} == {"pack"}
    assert len(second_packs) == len(first_packs) and second_packs.isdisjoint(first_packs)
    flush_ids = {_KEY.fullmatch(k)["flush"] for k in second_packs}  # type: ignore[index]
    assert flush_ids.isdisjoint({_KEY.fullmatch(k)["flush"] for k in first_packs})  # type: ignore[index]
    # only the new packs notify; the meta segments answered stored and were not PUT again
    events = gateway.drain_events(want=len(second_packs))
    assert sorted(e.key for e in events) == sorted(second_packs)
    for euid in reader.list_streams():
        assert state.read_cursor(euid).meta == max(reader.meta_sequences(euid))


def test_large_value_shared_by_two_streams_is_stored_once(
    gateway: RealGateway, demo_store: Path, other_store_template: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other" / "profiles-v1"
    shutil.copytree(other_store_template, other)
    assert set(StoreReader(other).list_streams()).isdisjoint(StoreReader(demo_store).list_streams())
    first = Publisher(demo_store, gateway.url, gateway.token).flush()
    second = Publisher(other, gateway.url, gateway.token).flush()
    assert first.complete and second.complete, (first.problems, second.problems)
    large = [k for k in first.uploaded if _kind(k) == "value"]
    assert large and set(large) <= set(second.stored)
    assert not [k for k in second.uploaded if _kind(k) in {"value", "table"}]
    assert set(first.uploaded).isdisjoint(second.uploaded)
    for key in large:
        versions = list(gateway.store.list(key))
        assert [v.key for v in versions] == [key]
    events = gateway.drain_events(want=len(_notified(first.uploaded + second.uploaded)))
    assert sorted(e.key for e in events) == _notified(first.uploaded + second.uploaded)
