"""The publisher's answer to 413 from authorize against the real gateway over both adapter
families (directory bucket + SQLite queue, and S3 + SQS on ministack).

The gateway's limits are lowered after the publisher read its configuration (the transport
serves the old limits once), so the publisher meets the gateway's own 413s: ``too_many_objects``
makes it re-chunk at the named limit and ship everything; ``object_too_large`` makes it drop
that object from the request, ship the rest, and report the object (a value or pack stays local
and unmarked, a segment holds its plane back). The next flush re-reads the configuration and
plans within the limits: packs split, an object that can never fit is reported, never sent."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from publisher_checks import all_shipped, assert_everything_stored, fast_settings, files
from publisher_fault_transport import FaultTransport, client_class
from publisher_real_gateway import PREFIX, RealGateway, real_gateway_family

from baml_studio.gateway.config import PublisherLimits
from baml_studio.publisher import (
    GatewayRejected,
    Kind,
    Publisher,
    PublisherConfig,
    PublishState,
    collect_flush,
)
from baml_studio.publisher.collect import ProblemCode
from baml_studio.publisher.config import DEFAULT_ZSTD_LEVEL
from baml_studio.store import StoreReader
from baml_studio.store.layout import parse_cas_file_name

DEFAULTS = PublisherLimits()
PACKS_AND_META = (".bamlpack.zst", ".bamlmeta.zst")


def _plan_sizes(store: Path) -> dict[Kind, list[int]]:
    """Compressed sizes per kind of what a flush under the default limits would send."""
    config = PublisherConfig.from_json(DEFAULTS.as_publisher_config())
    plan = collect_flush(store, config, level=DEFAULT_ZSTD_LEVEL, now=0, first_seen={},
                         block_seconds=60)  # fmt: skip
    PublishState(store).clear_journal()
    sizes: dict[Kind, list[int]] = {kind: [] for kind in Kind}
    for obj in [*plan.cas, *plan.packs, *(o for s in plan.streams for o in (*s.meta, *s.data))]:
        sizes[obj.kind].append(len(obj.body))
    return sizes


@contextmanager
def _stale_limits(
    family: tuple[str, str | None],
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    **lowered: int,
) -> Iterator[tuple[RealGateway, FaultTransport]]:
    """The real gateway enforcing ``lowered``; the publisher's first config read still shows
    the default limits."""
    limits = PublisherLimits(**lowered)  # type: ignore[arg-type]
    with real_gateway_family(family[0], data_dir, family[1], limits=limits) as gateway:
        transport = FaultTransport()
        transport.stale_config = {name: getattr(DEFAULTS, name) for name in lowered}
        monkeypatch.setattr(
            "baml_studio.publisher.publisher.GatewayClient", client_class(transport)
        )
        yield gateway, transport


def _bucket_sizes(gateway: RealGateway) -> dict[str, int]:
    return {info.key: info.size for info in gateway.store.list(PREFIX)}


def _local_cids(root: Path) -> set[bytes]:
    found = {parse_cas_file_name(p.name) for p in root.rglob("*.bamlvalue")}
    return {cid for cid in found if cid is not None}


def test_too_many_objects_rechunks_at_the_gateways_limit_and_ships_everything(
    family: tuple[str, str | None],
    demo_store: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with _stale_limits(family, tmp_path / "dataplane", monkeypatch,
                       max_objects_per_authorize=3) as (gateway, transport):  # fmt: skip
        publisher = Publisher(demo_store, gateway.url, gateway.token,
                              settings=fast_settings(demo_store, gateway.url))  # fmt: skip
        report = publisher.flush()
        assert report.complete and not report.problems, report.problems
        first, *rest = transport.authorizations
        assert (first.status, first.code) == (413, "too_many_objects") and first.objects > 3
        assert report.too_large_answers == 1  # the limit it named is kept for the whole flush
        assert rest and all(c.status == 200 and 1 <= c.objects <= 3 for c in rest)
        assert sum(c.objects for c in rest) == report.objects  # each object authorized once
        assert all(n == 1 for n in transport.counts().values())
        assert_everything_stored(gateway, demo_store)
        events = gateway.drain_events(want=len([k for k in report.uploaded
                                                if k.endswith(PACKS_AND_META)]))  # fmt: skip
        assert sorted(e.key for e in events) == sorted(
            k for k in report.uploaded if k.endswith(PACKS_AND_META)
        )
        assert transport.config_reads == 1
        again = publisher.flush()  # the 413 made the publisher re-read its configuration
        assert transport.config_reads == 2 and publisher.config is not None
        assert publisher.config.max_objects_per_authorize == 3
        assert again.complete and again.uploaded == []


def test_an_object_over_the_gateways_limit_is_dropped_reported_and_the_rest_ships(
    family: tuple[str, str | None],
    demo_store: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sizes = _plan_sizes(demo_store)
    limit = max(sizes[Kind.VALUE]) - 1
    segments = sizes[Kind.META] + sizes[Kind.DATA]
    assert max(segments) <= limit < max(sizes[Kind.PACK])  # a pack and a value are over it
    over = sum(1 for kind in (Kind.VALUE, Kind.TABLE, Kind.PACK) for n in sizes[kind] if n > limit)
    local_before = files(demo_store)
    all_cids = _local_cids(demo_store)
    with _stale_limits(family, tmp_path / "dataplane", monkeypatch,
                       max_object_bytes=limit) as (gateway, transport):  # fmt: skip
        publisher = Publisher(demo_store, gateway.url, gateway.token,
                              settings=fast_settings(demo_store, gateway.url))  # fmt: skip
        with caplog.at_level(logging.WARNING, logger="baml_studio.publisher.publisher"):
            first = publisher.flush()
        rejected = [p for p in first.problems if p.code is ProblemCode.REJECTED]
        assert len(rejected) == over and first.too_large_answers >= over
        for problem in rejected:
            assert isinstance(problem.error, GatewayRejected)
            assert (problem.error.status, problem.error.code) == (413, "object_too_large")
            assert problem.skipped and problem.size_bytes is not None and problem.size_bytes > limit
        assert {c.code for c in transport.authorizations if c.status != 200} == {"object_too_large"}
        # the requests that met a 413 were re-sent without the oversize object: the rest shipped
        assert first.complete and all_shipped(demo_store)
        assert_everything_stored(gateway, demo_store)
        assert max(_bucket_sizes(gateway).values()) <= limit
        assert all(n == 1 for n in transport.counts().values())
        logged = [r.getMessage() for r in caplog.records if "not shipped" in r.getMessage()]
        assert len(logged) == len(rejected)  # reported, never silently
        unshipped = all_cids - set(PublishState(demo_store).shipped())
        assert unshipped  # the dropped value and the dropped pack's members: local, unmarked
        assert files(demo_store) == local_before
        # the next flush re-reads the configuration and plans within the limit
        calls = len(transport.authorizations)
        second = publisher.flush()
        assert transport.config_reads == 2
        assert all(c.status == 200 for c in transport.authorizations[calls:])
        assert second.too_large_answers == 0 and second.complete
        oversize = [p for p in second.problems if p.code is ProblemCode.OVERSIZE]
        assert oversize and all(p.skipped for p in oversize)
        # the dropped pack's values, in packs that fit; the oversize value is never sent
        assert len(second.uploaded) >= 2
        assert all(k.endswith(".bamlpack.zst") for k in second.uploaded)
        never = {parse_cas_file_name(p.path.name) for p in oversize}
        assert set(PublishState(demo_store).shipped()) == all_cids - never
        assert max(_bucket_sizes(gateway).values()) <= limit
        for problem in oversize:
            assert problem.path.exists()  # kept locally, reported on every flush
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="baml_studio.publisher.publisher"):
            third = publisher.flush()
        assert third.uploaded == [] and third.complete
        assert {p.path for p in third.problems} == {p.path for p in oversize}
        assert not caplog.records  # logged when it first appeared, not on every flush
        notified = sorted(k for k in first.uploaded + second.uploaded if k.endswith(PACKS_AND_META))
        events = gateway.drain_events(want=len(notified))
        assert sorted(e.key for e in events) == notified


def test_a_segment_over_the_gateways_limit_holds_its_plane_back_and_is_reported(
    family: tuple[str, str | None],
    demo_store: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sizes = _plan_sizes(demo_store)
    limit = max(sizes[Kind.DATA]) - 1
    with _stale_limits(family, tmp_path / "dataplane", monkeypatch,
                       max_object_bytes=limit) as (gateway, transport):  # fmt: skip
        publisher = Publisher(demo_store, gateway.url, gateway.token,
                              settings=fast_settings(demo_store, gateway.url))  # fmt: skip
        with caplog.at_level(logging.WARNING, logger="baml_studio.publisher.publisher"):
            first = publisher.flush()
        (blocked,) = [p for p in first.problems if not p.skipped]
        assert blocked.code is ProblemCode.REJECTED and blocked.path.name.endswith(".bamldata")
        assert isinstance(blocked.error, GatewayRejected) and blocked.error.status == 413
        assert not first.complete
        assert any(str(blocked.path) in r.getMessage() for r in caplog.records)
        reader, state = StoreReader(demo_store), PublishState(demo_store)
        sequence = int(blocked.path.name.split(".")[0])
        (euid,) = [e for e in reader.list_streams() if e.hex() in str(blocked.path)]
        cursor = state.read_cursor(euid)
        assert cursor.data == sequence - 1  # never passed; the stream's meta waits too
        assert cursor.meta < max(reader.meta_sequences(euid))
        held = f"{PREFIX}streams/{euid.hex()}/data/{sequence:020d}.bamldata.zst"
        assert held not in _bucket_sizes(gateway) and blocked.path.exists()
        for other in reader.list_streams():
            if other != euid:
                done = state.read_cursor(other)
                assert done.data == max(reader.data_sequences(other))
                assert done.meta == max(reader.meta_sequences(other))
        second = publisher.flush()  # the re-read limit: planned as oversize, never sent
        assert transport.config_reads == 2 and second.too_large_answers == 0
        holding = [p for p in second.problems if not p.skipped]
        (again,) = [p for p in holding if p.code is ProblemCode.OVERSIZE]
        assert again.path == blocked.path
        for problem in holding:  # and the stream's meta, reported as waiting for that data
            assert problem is again or problem.code is ProblemCode.WAITS_FOR_DATA
            assert euid.hex() in str(problem.path)
        # meta segments that need no held data may ship now; the data cursor stays put
        assert not second.complete and state.read_cursor(euid).data == sequence - 1
        assert state.read_cursor(euid).meta < max(reader.meta_sequences(euid))
        assert max(_bucket_sizes(gateway).values()) <= limit
