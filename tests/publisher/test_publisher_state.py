"""The shipped ledger (durability, torn lines, legacy markers, compaction) and the PUT order of a
concurrent flush."""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from publisher_env import TOKEN, FakeEnv
from publisher_fake_gateway import DEFAULT_CONFIG, PREFIX

from baml_studio.publisher import GatewayClient, PublisherConfig, PublishState, collect_flush
from baml_studio.publisher.client import Authorized, PutOutcome
from baml_studio.publisher.flush import run_flush
from baml_studio.publisher.state import (
    COMPACT_MIN_LINES,
    LedgerDamaged,
    StateCorrupt,
    marker_path,
)
from json_strategies import HOSTILE_BYTES, UNPARSEABLE

A, B, C = bytes([1]) * 32, bytes([2]) * 32, bytes([3]) * 32


def test_ledger_survives_a_new_state_and_appends_once(tmp_path: Path) -> None:
    state = PublishState(tmp_path)
    state.mark_shipped([A, B], now=100.7)
    state.mark_shipped([B, C], now=200)  # B keeps its first time
    assert state.ledger_path.read_text() == f"{A.hex()} 100\n{B.hex()} 100\n{C.hex()} 200\n"
    fresh = PublishState(tmp_path)
    assert fresh.shipped() == {A: 100, B: 100, C: 200}
    assert fresh.is_shipped(C) and not fresh.is_shipped(bytes(32))


def test_state_sees_another_instances_appends(tmp_path: Path) -> None:
    reader, writer = PublishState(tmp_path), PublishState(tmp_path)
    assert not reader.is_shipped(A)
    writer.mark_shipped([A], now=1)
    assert reader.is_shipped(A)


def test_truncated_last_line_is_ignored_with_a_typed_warning(tmp_path: Path) -> None:
    state = PublishState(tmp_path)
    state.mark_shipped([A], now=5)
    with open(state.ledger_path, "ab") as handle:
        handle.write(f"{B.hex()[:40]}".encode())  # a crash mid-append
    fresh = PublishState(tmp_path)
    with pytest.warns(LedgerDamaged, match="truncated last line"):
        assert fresh.shipped() == {A: 5}
    fresh.mark_shipped([C], now=6)  # the next write drops the torn line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert PublishState(tmp_path).shipped() == {A: 5, C: 6}
    assert state.ledger_path.read_bytes().endswith(b"\n")


def test_garbage_line_in_the_middle_counts_as_unshipped(tmp_path: Path) -> None:
    ledger = tmp_path / "publish" / "shipped.log"
    ledger.parent.mkdir(parents=True)
    ledger.write_bytes(f"{A.hex()} 1\nnot a line\n\x00\x01\n{C.hex()} x\n{B.hex()} 2\n".encode())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert PublishState(tmp_path).shipped() == {A: 1, B: 2}
    assert [w.category for w in caught] == [LedgerDamaged] * 3
    assert "line 2 does not parse" in str(caught[0].message)


def test_legacy_markers_are_folded_into_the_ledger(tmp_path: Path) -> None:
    state = PublishState(tmp_path)
    value = state.layout.cas_path(A)
    value.parent.mkdir(parents=True)
    value.write_bytes(b"v")
    marker = marker_path(value)
    marker.touch()
    os.utime(marker, (1234, 1234))
    assert state.is_shipped(A) and not state.is_shipped(B)
    assert state.shipped() == {A: 1234}
    assert not marker.exists() and value.exists()
    assert PublishState(tmp_path).shipped() == {A: 1234}


def test_forget_rewrites_and_growth_compacts(tmp_path: Path) -> None:
    state = PublishState(tmp_path)
    cids = [i.to_bytes(32, "big") for i in range(COMPACT_MIN_LINES + 10)]
    state.mark_shipped(cids, now=1)
    state.forget_shipped(cids[:-2])
    assert state.ledger_path.read_text().count("\n") == 2
    assert PublishState(tmp_path).shipped() == {cids[-2]: 1, cids[-1]: 1}


class _RecordingPort:
    """Wraps the real client: records PUT order and makes the first two phase-1 PUTs meet at a
    barrier, which only passes when two PUTs really run at the same time."""

    def __init__(self, client: GatewayClient) -> None:
        self._client = client
        self._barrier = threading.Barrier(2, timeout=20)
        self._met = 0
        self._lock = threading.Lock()
        self.order: list[str] = []

    def authorize(self, process_euid: str, flush_id: str, objects: Any) -> list[Authorized]:
        return self._client.authorize(process_euid, flush_id, objects)

    def put(self, url: str, headers: Mapping[str, str], body: bytes) -> PutOutcome:
        with self._lock:
            meet = self._met < 2 and "/cas/" in url
            self._met += meet
        if meet:
            self._barrier.wait()
        outcome = self._client.put(url, headers, body)
        with self._lock:
            self.order.append(url.split("?")[0])
        return outcome


def _family(key: str) -> str:
    if "/data/" in key:
        return "data"
    if "/meta/" in key:
        return "meta"
    return "first"


def test_concurrent_flush_keeps_the_phase_order(fake_env: FakeEnv, demo_store: Path) -> None:
    state = PublishState(demo_store)
    config = PublisherConfig.from_json(DEFAULT_CONFIG)
    plan = collect_flush(
        demo_store, config, level=3, now=1.0, first_seen={}, block_seconds=60, state=state
    )
    client = GatewayClient(fake_env.url, TOKEN)
    port = _RecordingPort(client)
    try:
        report = run_flush(plan, port, state, max_objects=100, workers=8, clock=lambda: 50.0)
    finally:
        client.close()
    assert report.complete
    puts = fake_env.gateway.puts  # the server's order of stored objects
    assert sorted(puts) == sorted(report.uploaded) and len(port.order) == len(puts)
    families = [_family(k) for k in puts]
    assert {"first", "data", "meta"} <= set(families)
    last_first = max(i for i, f in enumerate(families) if f == "first")
    assert all(i > last_first for i, f in enumerate(families) if f != "first")
    last_data = max(i for i, f in enumerate(families) if f == "data")
    assert all(i > last_data for i, f in enumerate(families) if f == "meta")
    for batch in plan.streams:
        stream = f"{PREFIX}streams/{batch.euid.hex()}/"
        data = [k for k in puts if k.startswith(stream + "data/")]
        meta = [k for k in puts if k.startswith(stream + "meta/")]
        assert data == sorted(data) and len(data) == len(batch.data)
        assert meta == sorted(meta) and len(meta) == len(batch.meta)
        assert max(puts.index(k) for k in data) < min(puts.index(k) for k in meta)
    assert set(state.shipped().values()) == {50}


@pytest.mark.parametrize("body", UNPARSEABLE)
def test_a_cursor_or_journal_that_cannot_be_parsed_is_state_corrupt(
    tmp_path: Path, body: bytes
) -> None:
    state = PublishState(tmp_path)
    state.dir.mkdir(parents=True)
    state.cursor_path(A).write_bytes(body)
    state.journal_path.write_bytes(body)
    with pytest.raises(StateCorrupt, match="is not JSON"):
        state.read_cursor(A)
    with pytest.raises(StateCorrupt, match="is not JSON"):
        state.read_journal()


@settings(max_examples=100, deadline=None)
@given(HOSTILE_BYTES)
def test_fuzz_cursor_and_journal_files_read_or_are_state_corrupt(body: bytes) -> None:
    with tempfile.TemporaryDirectory() as root:
        state = PublishState(Path(root))
        state.dir.mkdir(parents=True)
        state.cursor_path(A).write_bytes(body)
        state.journal_path.write_bytes(body)
        for read in (lambda: state.read_cursor(A), state.read_journal):
            with contextlib.suppress(StateCorrupt):
                read()
