"""Cross-process behaviour through real subprocesses, coordinated by pipes (no sleeps)."""

from __future__ import annotations

from pathlib import Path

import pytest
from store_helpers import hold_stream, meta_encoder

from baml_studio.store import (
    Committed,
    StoreInUse,
    StoreLayout,
    StoreReader,
    StreamInUse,
    StreamStore,
    clean_profiles_v1,
    scan_physical_usage,
)
from baml_studio.store.usage import read_usage_state


def test_stream_in_use_across_processes(root: Path, euid: bytes) -> None:
    with hold_stream(root, euid) as holder:
        assert holder.status == "ready"
        with pytest.raises(StreamInUse):
            StreamStore.open(root, euid)
    with StreamStore.open(root, euid) as store:
        assert store.publish_meta(meta_encoder(euid)) == Committed(1)


def test_subprocess_sees_a_stream_open_here_as_in_use(root: Path, euid: bytes) -> None:
    with StreamStore.open(root, euid), hold_stream(root, euid) as holder:
        assert holder.status == "in-use"
        assert holder.process.wait(timeout=60) == 3


def test_liveness_follows_the_holding_process(root: Path, euid: bytes) -> None:
    reader = StoreReader(root)
    assert reader.is_alive(euid) is False  # no stream.lock at all
    with hold_stream(root, euid, publish=2) as holder:
        assert holder.status == "ready"
        assert reader.is_alive(euid) is True
        assert reader.scan().streams[0].alive is True
        assert holder.release() == 0
    assert reader.is_alive(euid) is False
    assert reader.meta_sequences(euid) == [1, 2]


def test_liveness_short_circuits_for_streams_open_in_this_process(root: Path, euid: bytes) -> None:
    reader = StoreReader(root)
    with StreamStore.open(root, euid):
        assert reader.is_alive(euid) is True
    assert reader.is_alive(euid) is False


def test_clean_refuses_while_another_process_has_a_stream_open(root: Path, euid: bytes) -> None:
    with hold_stream(root, euid, publish=1) as holder:
        assert holder.status == "ready"
        with pytest.raises(StoreInUse):
            clean_profiles_v1(root)
        assert root.is_dir()
    assert clean_profiles_v1(root) is True
    assert not root.exists()


def test_processes_share_one_ledger(root: Path) -> None:
    ours = bytes([9]) * 16
    with StreamStore.open(root, ours) as store:
        store.publish_meta(meta_encoder(ours))
        with hold_stream(root, bytes([1]) * 16, publish=3) as a:
            assert a.status == "ready"
            with hold_stream(root, bytes([2]) * 16, publish=3) as b:
                assert b.status == "ready"
        store.publish_meta(meta_encoder(ours))
    layout = StoreLayout(root)
    assert read_usage_state(layout) == scan_physical_usage(layout)


def test_a_killed_holder_leaves_the_stream_dead_and_reopenable(root: Path, euid: bytes) -> None:
    with hold_stream(root, euid, publish=1) as holder:
        assert holder.status == "ready"
        holder.process.kill()
        holder.process.wait(timeout=60)
        assert StoreReader(root).is_alive(euid) is False
        with StreamStore.open(root, euid) as store:
            assert store.publish_meta(meta_encoder(euid)) == Committed(2)
