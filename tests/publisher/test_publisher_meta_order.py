"""A meta segment never ships before the data segments its executions may need."""

from __future__ import annotations

from pathlib import Path

from publisher_env import TOKEN, FakeEnv

from baml_studio.format.meta import decode_meta_segment
from baml_studio.profiler import Profiler, ProfilerConfig, baml_function
from baml_studio.publisher import GatewayClient, PublishState, collect_flush
from baml_studio.publisher.collect import ProblemCode
from baml_studio.store import StoreReader


@baml_function(name="MetaOrder", llm=True)
def work(n: int) -> int:
    return n + 1


def _store(root: Path) -> Path:
    """Six flushes: six data segments, twelve meta segments, one stream."""
    prof = Profiler(ProfilerConfig(store_root=root, publish_interval_s=None)).activate()
    for n in range(6):
        work(n)
        prof.flush()
    prof.close()
    return root


def test_meta_waits_while_a_data_segment_cannot_ship(fake_env: FakeEnv, tmp_path: Path) -> None:
    store = _store(tmp_path / ".baml" / "profiles-v1")
    reader = StoreReader(store)
    euid = reader.list_streams()[0]
    data = reader.data_sequences(euid)
    assert len(data) >= 2
    blocked = data[len(data) // 2]
    victim = store / "streams" / euid.hex() / "data" / f"{blocked:020d}.bamldata"
    raw = bytearray(victim.read_bytes())
    raw[-1] ^= 0xFF  # checksum no longer matches: the plane waits for it
    victim.write_bytes(bytes(raw))
    client = GatewayClient(fake_env.url, TOKEN)
    config = client.get_config()
    client.close()
    plan = collect_flush(store, config, level=3, now=0, first_seen={}, block_seconds=60)
    PublishState(store).clear_journal()
    batch = next(b for b in plan.streams if b.euid == euid)
    assert [o.sequence for o in batch.data] == [s for s in data if s < blocked]
    for obj in batch.meta:
        assert obj.source is not None
        header = decode_meta_segment(obj.source.read_bytes())
        assert header.data_high_water < blocked
    held = [p for p in plan.problems if p.code is ProblemCode.WAITS_FOR_DATA]
    shipped_meta = {o.sequence for o in batch.meta}
    all_meta = set(reader.meta_sequences(euid))
    assert held and shipped_meta and shipped_meta != all_meta
    first_held = min(all_meta - shipped_meta)
    path = store / "streams" / euid.hex() / "meta" / f"{first_held:020d}.bamlmeta"
    assert decode_meta_segment(path.read_bytes()).data_high_water >= blocked
