"""Retention over the shipped ledger: expiry by ledger time (injected clock), disk pressure
removes shipped files first (segments, then values) and never an unshipped file."""

from __future__ import annotations

from pathlib import Path

from publisher_env import TOKEN, FakeEnv

from baml_studio.publisher import Publisher, PublishState, apply_retention
from baml_studio.publisher.state import Cursor
from baml_studio.store import StoreReader
from baml_studio.store.layout import Plane, parse_cas_file_name
from baml_studio.store.usage import scan_physical_usage

_META, _DATA = Plane.META, Plane.DATA


def _cas_files(root: Path) -> dict[bytes, Path]:
    found = {parse_cas_file_name(p.name): p for p in root.rglob("*.bamlvalue")}
    return {cid: path for cid, path in found.items() if cid is not None}


def _flushed(fake_env: FakeEnv, root: Path, now: list[float]) -> tuple[Publisher, dict[bytes, int]]:
    """A publisher on the clock ``now[0]`` that shipped everything; the shipped ledger."""
    publisher = Publisher(root, fake_env.url, TOKEN, clock=lambda: now[0])
    assert publisher.flush().complete
    return publisher, PublishState(root).shipped()


def test_values_expire_by_ledger_time_of_the_injected_clock(
    fake_env: FakeEnv, demo_store: Path
) -> None:
    now = [10_000.0]
    publisher, shipped = _flushed(fake_env, demo_store, now)
    assert shipped and set(shipped.values()) == {10_000}
    before = _cas_files(demo_store)
    assert set(shipped) <= set(before)
    retention = fake_env.gateway.config["shipped_value_retention_seconds"]
    now[0] += retention - 1
    report = publisher.retain()
    assert report is not None and report.expired_values == 0
    assert _cas_files(demo_store) == before
    now[0] += 1
    report = publisher.retain()
    assert report is not None and report.expired_values == len(shipped)
    left = _cas_files(demo_store)
    assert set(left) == set(before) - set(shipped)
    assert PublishState(demo_store).shipped() == {}


def test_expiry_counts_from_each_entrys_own_time(demo_store: Path) -> None:
    cids = sorted(_cas_files(demo_store))
    old, young, unshipped = cids[0], cids[1], cids[2:]
    state = PublishState(demo_store)
    state.mark_shipped([old], now=1_000)
    state.mark_shipped([young], now=1_500)
    report = apply_retention(demo_store, retention_seconds=600, now=1_700, state=state)
    assert report.expired_values == 1
    files = _cas_files(demo_store)
    assert old not in files and young in files and set(unshipped) <= set(files)
    assert PublishState(demo_store).shipped() == {young: 1_500}


def test_an_entry_whose_file_is_gone_is_dropped(demo_store: Path) -> None:
    cid, path = sorted(_cas_files(demo_store).items())[0]
    state = PublishState(demo_store)
    state.mark_shipped([cid], now=1_000)
    path.unlink()
    apply_retention(demo_store, retention_seconds=3600, now=1_001, state=state)
    assert state.shipped() == {}


def test_without_the_file_check_a_gone_file_s_entry_waits_for_its_expiry(
    demo_store: Path,
) -> None:
    (cid, path), (young, _) = sorted(_cas_files(demo_store).items())[:2]
    state = PublishState(demo_store)
    state.mark_shipped([cid], now=1_000)
    state.mark_shipped([young], now=2_000)
    path.unlink()
    kept = apply_retention(
        demo_store, retention_seconds=3600, now=1_001, state=state, check_files=False
    )
    assert kept.expired_values == 0 and state.shipped() == {cid: 1_000, young: 2_000}
    expired = apply_retention(
        demo_store, retention_seconds=3600, now=4_600, state=state, check_files=False
    )
    assert expired.expired_values == 1 and state.shipped() == {young: 2_000}


def test_a_publisher_checks_for_gone_files_on_its_first_pass_only(
    fake_env: FakeEnv, demo_store: Path
) -> None:
    publisher, shipped = _flushed(fake_env, demo_store, [10_000.0])
    files = _cas_files(demo_store)
    first, second = sorted(shipped)[:2]
    files[first].unlink()  # as a crash between a removal and its ledger update leaves it
    report = publisher.retain()
    assert report is not None and report.expired_values == 1
    files[second].unlink()
    report = publisher.retain()  # a stat per shipped value is not repeated every pass
    assert report is not None and report.expired_values == 0
    assert set(PublishState(demo_store).shipped()) == set(shipped) - {first}


def _ship_half(root: Path) -> tuple[PublishState, set[Path], set[Path], set[Path]]:
    """Mark half the values shipped and move every cursor to its first segment. Returns the
    state, shipped segments, shipped values and the unshipped files."""
    state, reader = PublishState(root), StoreReader(root)
    files = sorted(_cas_files(root).items())
    shipped_values = dict(files[: len(files) // 2])
    state.mark_shipped(list(shipped_values), now=1_000)
    shipped_segments: set[Path] = set()
    unshipped = {p for _, p in files[len(files) // 2 :]}
    for euid in reader.list_streams():
        meta, data = reader.meta_sequences(euid), reader.data_sequences(euid)
        state.write_cursor(euid, Cursor(meta=min(meta), data=min(data)))
        layout = state.layout
        shipped_segments |= {layout.segment_path(euid, plane, min(seqs))
                             for plane, seqs in ((_META, meta), (_DATA, data))}  # fmt: skip
        unshipped |= {layout.segment_path(euid, _META, s) for s in meta if s > min(meta)}
        unshipped |= {layout.segment_path(euid, _DATA, s) for s in data if s > min(data)}
    return state, shipped_segments, set(shipped_values.values()), unshipped


def test_pressure_removes_shipped_segments_first_then_values_never_unshipped(
    demo_store: Path,
) -> None:
    state, segments, values, unshipped = _ship_half(demo_store)
    assert segments and values and unshipped
    report = apply_retention(
        demo_store, retention_seconds=10**9, now=1_001, budget_bytes=0, state=state
    )
    removed = report.removed
    assert set(removed) == segments | values
    kinds = ["segment" if p in segments else "value" for p in removed]
    assert kinds == sorted(kinds, key=lambda k: k != "segment")
    assert all(p.exists() for p in unshipped)
    assert not any(p.exists() for p in removed)
    assert state.shipped() == {}


def test_slight_pressure_removes_one_shipped_segment_only(demo_store: Path) -> None:
    state, segments, values, unshipped = _ship_half(demo_store)
    budget = scan_physical_usage(state.layout) - 1
    report = apply_retention(
        demo_store, retention_seconds=10**9, now=1_001, budget_bytes=budget, state=state
    )
    assert report.pressure_removed == 1 and report.removed[0] in segments
    assert all(p.exists() for p in values | unshipped)
    assert len(state.shipped()) == len(values)
