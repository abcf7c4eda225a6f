"""One flush end to end against the fake gateway over a DirectoryBucket."""

from __future__ import annotations

from pathlib import Path

from publisher_env import TOKEN, FakeEnv
from publisher_fake_gateway import PREFIX

from baml_studio.format.cas import CODEC_FUNCTION_TABLE, decode_cas_object
from baml_studio.publisher import Publisher, PublishState, decode_pack
from baml_studio.publisher.pack import decompress_frame
from baml_studio.store import StoreReader


def _families(keys: list[str]) -> list[str]:
    out = []
    for key in keys:
        rest = key.removeprefix(PREFIX)
        if rest.startswith("cas/tables/"):
            out.append("table")
        elif rest.startswith("cas/values/"):
            out.append("value")
        elif "/values/" in rest:
            out.append("pack")
        elif "/data/" in rest:
            out.append("data")
        else:
            out.append("meta")
    return out


def test_one_flush_ships_all_five_kinds_in_order(fake_env: FakeEnv, demo_store: Path) -> None:
    publisher = Publisher(demo_store, fake_env.url, TOKEN)
    report = publisher.flush()
    assert report.complete, report.problems
    puts = fake_env.gateway.puts
    families = _families(puts)
    assert set(families) == {"table", "value", "pack", "data", "meta"}
    rank = {"table": 0, "value": 0, "pack": 0, "data": 1, "meta": 2}
    assert [rank[f] for f in families] == sorted(rank[f] for f in families)
    assert sorted(puts) == sorted(report.uploaded)  # concurrent PUTs finish in any order
    reader = StoreReader(demo_store)
    state = PublishState(demo_store)
    for euid in reader.list_streams():
        data = [k for k in puts if f"/streams/{euid.hex()}/data/" in k]
        meta = [k for k in puts if f"/streams/{euid.hex()}/meta/" in k]
        assert data == sorted(data) and meta == sorted(meta)
        assert len(meta) == len(reader.meta_sequences(euid))
        cursor = state.read_cursor(euid)
        assert cursor.meta == max(reader.meta_sequences(euid))
        assert cursor.data == max(reader.data_sequences(euid))
    bucket = fake_env.gateway.bucket
    for key in puts:
        body = decompress_frame(bucket.get(key))
        if "/cas/tables/" in key:
            assert decode_cas_object(body).codec == CODEC_FUNCTION_TABLE
    packs = [k for k in puts if k.endswith(".bamlpack.zst")]
    shipped_in_packs = {e.cid for k in packs for e in decode_pack(bucket.get(k)).entries}
    layout = state.layout
    for cid in shipped_in_packs:
        assert state.is_shipped(cid) and layout.cas_path(cid).exists()
    # a second flush ships nothing new
    again = publisher.flush()
    assert again.uploaded == [] and again.objects == 0
    assert fake_env.gateway.puts == puts
