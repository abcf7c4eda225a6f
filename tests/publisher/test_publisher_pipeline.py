"""A flush ships while it collects: the first CAS batch is PUT while the collector still holds
the next one back, and the phase order holds for objects that arrive in batches."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from publisher_env import TOKEN, FakeEnv
from publisher_fake_gateway import DEFAULT_CONFIG, PREFIX

from baml_studio.publisher import GatewayClient, Outgoing, PublisherConfig, PublishState
from baml_studio.publisher.client import Authorized, PutOutcome
from baml_studio.publisher.collect import collect_segments
from baml_studio.publisher.collect_cas import collect_cas
from baml_studio.publisher.flush import run_flush


class _FirstPut:
    """The real client; ``first`` is set when the first PUT has been stored."""

    def __init__(self, client: GatewayClient) -> None:
        self._client = client
        self.first = threading.Event()
        self.first_key = ""

    def authorize(self, process_euid: str, flush_id: str, objects: Any) -> list[Authorized]:
        return self._client.authorize(process_euid, flush_id, objects)

    def put(self, url: str, headers: Mapping[str, str], body: bytes) -> PutOutcome:
        outcome = self._client.put(url, headers, body)
        if not self.first.is_set():
            self.first_key = url.split("?")[0]
            self.first.set()
        return outcome


def _family(key: str) -> str:
    return "data" if "/data/" in key else "meta" if "/meta/" in key else "first"


def test_the_first_batch_ships_while_the_rest_is_collected(
    fake_env: FakeEnv, demo_store: Path
) -> None:
    state = PublishState(demo_store)
    config = PublisherConfig.from_json(DEFAULT_CONFIG)
    plan = collect_segments(state, config, level=3, now=1.0, first_seen={}, block_seconds=60)
    client = GatewayClient(fake_env.url, TOKEN)
    port = _FirstPut(client)
    shipped_meanwhile: list[bool] = []

    def arriving() -> Iterator[list[Outgoing]]:
        batches = collect_cas(state, config, 3, plan)
        yield next(batches)
        # the collector holds the next batch until the first one is stored: a flush that
        # collected everything before shipping would never get here in time
        shipped_meanwhile.append(port.first.wait(20))
        yield from batches

    try:
        report = run_flush(plan, port, state, max_objects=100, arriving=arriving())
    finally:
        client.close()
    assert shipped_meanwhile == [True] and "/cas/" in port.first_key
    assert report.complete and report.objects == plan.objects > 3
    puts = fake_env.gateway.puts
    assert sorted(puts) == sorted(report.uploaded) and len(puts) == plan.objects
    families = [_family(k) for k in puts]
    last_first = max(i for i, f in enumerate(families) if f == "first")
    assert all(i > last_first for i, f in enumerate(families) if f != "first")
    last_data = max(i for i, f in enumerate(families) if f == "data")
    assert all(i > last_data for i, f in enumerate(families) if f == "meta")
    for batch in plan.streams:
        meta = [k for k in puts if k.startswith(f"{PREFIX}streams/{batch.euid.hex()}/meta/")]
        assert meta == sorted(meta) and len(meta) == len(batch.meta)
    assert {c for pack in plan.packs for c in pack.members} <= set(state.shipped())
