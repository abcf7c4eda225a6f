"""Disk budget and the latched admission gate."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from store_helpers import FaultyFs, data_encoder, files_under, meta_bytes, meta_encoder

from baml_studio.store import (
    GATE_DISK,
    GATE_OPEN,
    GATE_UNAVAILABLE,
    USAGE_STATE_BYTES,
    Committed,
    DiskBudget,
    Lost,
    Published,
    StoreFailureReason,
    StoreLayout,
    StreamStore,
    scan_physical_usage,
)
from baml_studio.store.publish import admits

DISK = Lost(StoreFailureReason.DISK_GUARD_EXCEEDED)


def test_admits_is_the_spec_inequality() -> None:
    budget = DiskBudget(max_project_bytes=1000, minimum_free_bytes=100)
    assert admits(budget, usage=900, size=52, free=10_000)  # 900 + 52 + 48 == 1000
    assert not admits(budget, usage=900, size=53, free=10_000)
    assert admits(budget, usage=0, size=52, free=200)  # 200 - 100 == 100
    assert not admits(budget, usage=0, size=53, free=200)
    assert not admits(budget, usage=0, size=0, free=10)


def test_budget_values_are_validated() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        DiskBudget(max_project_bytes=-1)


def test_project_limit_rejection_latches_the_gate(root: Path, euid: bytes) -> None:
    size = len(meta_bytes(euid, 1))
    budget = DiskBudget(max_project_bytes=USAGE_STATE_BYTES + size + USAGE_STATE_BYTES)
    fs = FaultyFs()
    with StreamStore.open(root, euid, budget, fs=fs) as store:
        assert store.gate is GATE_OPEN
        assert store.publish_meta(meta_encoder(euid)) == Committed(1)  # exactly at the limit
        assert store.publish_meta(meta_encoder(euid)) == DISK
        assert store.gate is GATE_DISK
        before, calls = files_under(root), len(fs.calls)
        assert store.publish_data(data_encoder(euid)) == DISK
        assert store.publish_cas(1, b"x") == DISK
        assert store.publish_meta(meta_encoder(euid)) == DISK
        assert files_under(root) == before
        assert fs.calls[calls:] == []  # not even the ledger was read
        assert store.high_water.meta == 1


def test_minimum_free_rejection_uses_injected_free_space(root: Path, euid: bytes) -> None:
    fs = FaultyFs(free=10_000)
    budget = DiskBudget(max_project_bytes=1 << 40, minimum_free_bytes=9_000)
    with StreamStore.open(root, euid, budget, fs=fs) as store:
        assert store.publish_meta(meta_encoder(euid)) == Committed(1)
        fs.free = 9_100
        assert store.publish_meta(meta_encoder(euid)) == DISK
        fs.free = 1 << 40
        assert store.publish_meta(meta_encoder(euid)) == DISK  # latched; never reopens


def test_terminal_meta_gets_one_attempt_past_a_latched_gate(root: Path, euid: bytes) -> None:
    fs = FaultyFs(free=10_000)
    budget = DiskBudget(max_project_bytes=1 << 40, minimum_free_bytes=9_000)
    with StreamStore.open(root, euid, budget, fs=fs) as store:
        fs.free = 0
        assert store.publish_data(data_encoder(euid)) == DISK
        assert store.gate is GATE_DISK
        fs.free = 1 << 40
        assert store.publish_meta(meta_encoder(euid)) == DISK
        assert store.publish_meta(meta_encoder(euid), terminal=True) == Committed(1)
        assert store.gate is GATE_DISK
        assert store.publish_meta(meta_encoder(euid), terminal=True) == DISK


def test_terminal_attempt_still_checks_the_budget(root: Path, euid: bytes) -> None:
    fs = FaultyFs(free=0)
    with StreamStore.open(root, euid, DiskBudget(1 << 40, 1), fs=fs) as store:
        assert store.publish_meta(meta_encoder(euid)) == DISK
        assert store.publish_meta(meta_encoder(euid), terminal=True) == DISK
        assert store.high_water.meta == 0


def test_terminal_on_an_open_gate_does_not_use_up_the_bypass(root: Path, euid: bytes) -> None:
    fs = FaultyFs(free=1 << 40)
    with StreamStore.open(root, euid, DiskBudget(1 << 40, 1000), fs=fs) as store:
        assert store.publish_meta(meta_encoder(euid), terminal=True) == Committed(1)
        fs.free = 0
        assert store.publish_data(data_encoder(euid)) == DISK
        fs.free = 1 << 40
        assert store.publish_meta(meta_encoder(euid), terminal=True) == Committed(2)


def test_gate_reopens_only_for_a_new_writer(root: Path, euid: bytes) -> None:
    fs = FaultyFs(free=0)
    with StreamStore.open(root, euid, DiskBudget(1 << 40, 1), fs=fs) as store:
        assert store.publish_meta(meta_encoder(euid)) == DISK
    with StreamStore.open(root, euid, DiskBudget(1 << 40, 1)) as store:
        assert store.gate is GATE_OPEN
        assert store.publish_meta(meta_encoder(euid)) == Committed(1)


def test_budget_counts_usage_from_other_streams(root: Path) -> None:
    a, b = bytes(16), bytes([7]) * 16
    with StreamStore.open(root, a) as store:
        for _ in range(3):
            store.publish_meta(meta_encoder(a))
    usage = scan_physical_usage(StoreLayout(root))
    size = len(meta_bytes(b, 1))
    with StreamStore.open(root, b, DiskBudget(usage + size + USAGE_STATE_BYTES - 1)) as store:
        assert store.publish_meta(meta_encoder(b)) == DISK


def test_unscannable_store_latches_unavailable(root: Path, euid: bytes) -> None:
    with StreamStore.open(root, euid) as store:
        layout = StoreLayout(root)
        layout.usage_state.unlink(missing_ok=True)
        os.symlink("/", root / "escape")
        assert store.publish_cas(1, b"x") == Lost(StoreFailureReason.STORE_UNAVAILABLE)
        assert store.gate is GATE_UNAVAILABLE
        (root / "escape").unlink()
        assert store.publish_cas(1, b"x") == Lost(StoreFailureReason.STORE_UNAVAILABLE)


def test_no_budget_means_no_free_space_probe(root: Path, euid: bytes) -> None:
    fs = FaultyFs()
    with StreamStore.open(root, euid, fs=fs) as store:
        assert isinstance(store.publish_cas(1, b"x"), Published)
    assert fs.ops("free_bytes") == []
