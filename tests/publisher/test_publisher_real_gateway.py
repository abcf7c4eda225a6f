"""The publisher against the real gateway (embedded defaults)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from publisher_real_gateway import real_gateway

from baml_studio.publisher import Publisher, PublishState
from baml_studio.store import StoreReader


def test_flush_through_real_gateway(tmp_path: Path, demo_store: Path) -> None:
    with real_gateway(tmp_path / "dataplane") as (url, token, dataplane):
        report = Publisher(demo_store, url, token).flush()
        assert report.complete, report.problems
        kinds = Counter(k.rsplit(".", 2)[-2] for k in report.uploaded)
        assert set(kinds) == {"bamltable", "bamlvalue", "bamlpack", "bamldata", "bamlmeta"}
        for key in report.uploaded:
            assert dataplane.store.head(key).size > 0
        reader, state = StoreReader(demo_store), PublishState(demo_store)
        for euid in reader.list_streams():
            assert state.read_cursor(euid).meta == max(reader.meta_sequences(euid))
        again = Publisher(demo_store, url, token)
        # a fresh publisher with its state wiped re-ships
        for euid in reader.list_streams():
            state.cursor_path(euid).unlink()
        state.ledger_path.unlink()  # the shipped ledger
        second = again.flush()
        # a completed flush forgets its pack ids, so only the pack is new (duplicates are
        # harmless: the projector collapses values by CID); everything else answers stored
        assert second.complete and all(k.endswith(".bamlpack.zst") for k in second.uploaded)
        assert set(second.stored) == {k for k in report.uploaded if not k.endswith("pack.zst")}
