"""Objects over the gateway's ``max_object_bytes`` and authorize calls over
``max_objects_per_authorize`` are never sent; what is left out is reported, typed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from publisher_env import TOKEN, FakeEnv

from baml_studio.publisher import (
    GatewayClient,
    GatewayRejected,
    Publisher,
    PublishState,
    UploadFailed,
    collect_flush,
    run_flush,
)
from baml_studio.publisher.client import Authorized, PutOutcome
from baml_studio.publisher.collect import ProblemCode
from baml_studio.store import StoreReader


def _bucket_sizes(env: FakeEnv) -> dict[str, int]:
    return {info.key: info.size for info in env.gateway.bucket.list()}


def _plan_sizes(store: Path, env: FakeEnv) -> dict[str, list[int]]:
    """Compressed sizes per kind under the fake's default config (nothing is written)."""
    client = GatewayClient(env.url, TOKEN)
    config = client.get_config()
    client.close()
    plan = collect_flush(store, config, level=3, now=0, first_seen={}, block_seconds=60)
    PublishState(store).clear_journal()
    sizes: dict[str, list[int]] = {}
    every = [*plan.cas, *plan.packs, *(o for s in plan.streams for o in (*s.meta, *s.data))]
    for obj in every:
        sizes.setdefault(obj.kind.value, []).append(len(obj.body))
    return sizes


def test_large_values_are_reported_and_the_rest_ships(fake_env: FakeEnv, demo_store: Path) -> None:
    sizes = _plan_sizes(demo_store, fake_env)
    limit = sorted(sizes["value"])[-1] - 1
    segments = sizes["meta_segment"] + sizes["data_segment"]
    assert max(segments) <= limit < max(sizes["value_pack"])  # packs must split, values skip
    fake_env.gateway.config["max_object_bytes"] = limit
    publisher = Publisher(demo_store, fake_env.url, TOKEN)
    report = publisher.flush()
    oversize = [p for p in report.problems if p.code is ProblemCode.OVERSIZE]
    assert oversize and all(p.skipped and p.size_bytes and p.size_bytes > limit for p in oversize)
    assert report.complete  # skipped values do not hold anything back
    assert max(_bucket_sizes(fake_env).values()) <= limit
    packs = [k for k in fake_env.gateway.puts if k.endswith(".bamlpack.zst")]
    assert len(packs) > 1  # the one pack of the unlimited plan was split
    state, reader = PublishState(demo_store), StoreReader(demo_store)
    for euid in reader.list_streams():
        assert state.read_cursor(euid).data == max(reader.data_sequences(euid))
    left = {p.path.name for p in oversize}
    assert left and not any(name in key for key in fake_env.gateway.puts for name in left)
    again = publisher.flush()  # still local, still reported, never sent
    assert {p.path.name for p in again.problems if p.code is ProblemCode.OVERSIZE} == left
    assert not again.uploaded


def test_an_oversize_segment_blocks_its_plane_on_every_flush(
    fake_env: FakeEnv, demo_store: Path
) -> None:
    sizes = _plan_sizes(demo_store, fake_env)
    limit = max(sizes["data_segment"]) - 1
    fake_env.gateway.config["max_object_bytes"] = limit
    publisher = Publisher(demo_store, fake_env.url, TOKEN)
    for _ in range(2):
        report = publisher.flush()
        blocked = [p for p in report.problems if p.code is ProblemCode.OVERSIZE and not p.skipped]
        assert len(blocked) == 1 and blocked[0].path.name.endswith(".bamldata")
        assert not report.complete
        assert max(_bucket_sizes(fake_env).values()) <= limit
    sequence = int(blocked[0].path.name.split(".")[0])
    euid = next(
        e for e in StoreReader(demo_store).list_streams() if e.hex() in str(blocked[0].path)
    )
    assert PublishState(demo_store).read_cursor(euid).data < sequence
    assert blocked[0].path.exists()


def test_authorize_calls_never_exceed_max_objects(fake_env: FakeEnv, demo_store: Path) -> None:
    fake_env.gateway.config["max_objects_per_authorize"] = 2
    report = Publisher(demo_store, fake_env.url, TOKEN).flush()
    assert report.complete, report.problems
    calls = fake_env.gateway.authorize_calls
    assert len(calls) > 3 and all(1 <= len(c["objects"]) <= 2 for c in calls)


class _Refusing:
    """The real client, but 413 for authorize chunks holding ``kind`` and PUTs of ``put_key``."""

    def __init__(self, inner: GatewayClient, kind: str, put_key: str) -> None:
        self.inner, self.kind, self.put_key = inner, kind, put_key

    def authorize(
        self, process_euid: str, flush_id: str, objects: Sequence[Mapping[str, Any]]
    ) -> list[Authorized]:
        if any(o["kind"] == self.kind for o in objects):
            raise GatewayRejected("413 too_large", status=413, code="object_too_large")
        return self.inner.authorize(process_euid, flush_id, objects)

    def put(self, url: str, headers: Mapping[str, str], body: bytes) -> PutOutcome:
        if self.put_key in url:
            raise UploadFailed("PUT answered 413", key=self.put_key, status=413)
        return self.inner.put(url, headers, body)


def test_a_413_is_a_typed_problem_for_its_chunk(fake_env: FakeEnv, demo_store: Path) -> None:
    client = GatewayClient(fake_env.url, TOKEN)
    config = client.get_config()
    state = PublishState(demo_store)
    plan = collect_flush(demo_store, config, level=3, now=0, first_seen={}, block_seconds=60,
                         state=state)  # fmt: skip
    members = {cid for pack in plan.packs for cid in pack.members}
    assert members
    port = _Refusing(client, "value_pack", "/data/")
    report = run_flush(plan, port, state, max_objects=1)  # one object per chunk
    client.close()
    rejected = [p for p in report.problems if p.code is ProblemCode.REJECTED]
    (pack,) = [p for p in rejected if isinstance(p.error, GatewayRejected)]
    assert pack.skipped  # kept locally, the rest ships
    segments = [p for p in rejected if isinstance(p.error, UploadFailed)]
    assert len(segments) == len(plan.streams) and not any(p.skipped for p in segments)
    assert not report.complete
    puts = fake_env.gateway.puts
    assert not [k for k in puts if "/data/" in k or "/meta/" in k or k.endswith(".bamlpack.zst")]
    assert [k for k in puts if "/cas/tables/" in k] and [k for k in puts if "/cas/values/" in k]
    assert members.isdisjoint(state.shipped())
    assert not [p for p in report.problems if not p.skipped and p.code is not ProblemCode.REJECTED]
    for batch in plan.streams:
        assert state.read_cursor(batch.euid) == batch.cursor


class _Halving:
    """The real client, but a 413 without details for any authorize call over ``most``."""

    def __init__(self, inner: GatewayClient, most: int) -> None:
        self.inner, self.most = inner, most
        self.calls: list[tuple[int, bool]] = []
        """(objects, accepted) per authorize call."""

    def authorize(
        self, process_euid: str, flush_id: str, objects: Sequence[Mapping[str, Any]]
    ) -> list[Authorized]:
        accepted = len(objects) <= self.most
        self.calls.append((len(objects), accepted))
        if not accepted:
            raise GatewayRejected("413 request_too_large", status=413, code="request_too_large")
        return self.inner.authorize(process_euid, flush_id, objects)

    def put(self, url: str, headers: Mapping[str, str], body: bytes) -> PutOutcome:
        return self.inner.put(url, headers, body)


def test_a_413_without_details_halves_the_request_until_it_fits(
    fake_env: FakeEnv, demo_store: Path
) -> None:
    client = GatewayClient(fake_env.url, TOKEN)
    state = PublishState(demo_store)
    plan = collect_flush(demo_store, client.get_config(), level=3, now=0, first_seen={},
                         block_seconds=60, state=state)  # fmt: skip
    port = _Halving(client, most=3)
    report = run_flush(plan, port, state, max_objects=100)
    client.close()
    assert report.complete and not report.problems, report.problems
    refused = [n for n, ok in port.calls if not ok]
    assert refused and max(refused) > 3 and report.too_large_answers == len(refused)
    assert sum(n for n, ok in port.calls if ok) == plan.objects  # each object authorized once
    assert len(set(fake_env.gateway.puts)) == len(fake_env.gateway.puts) == plan.objects
