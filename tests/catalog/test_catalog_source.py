"""LocalStoreSource: snapshots, the meta-only root listing, the fold cache, value reads."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest
from catalog_helpers import (
    ALL_RELATIONS,
    check_schemas,
    copy_store,
    flip_byte,
    ipc_bytes,
    plain,
    profile,
)
from catalog_program import alpha

from baml_studio.catalog import (
    META_ROOT_COLUMNS,
    CatalogError,
    FoldCache,
    LocalStoreSource,
    UnknownRelation,
    ValueUnavailable,
)
from baml_studio.format.errors import BamlStudioError
from baml_studio.format.ids import parse_value_cid_wire
from baml_studio.store import StoreLayout, StoreReader

DOMAIN = b"baml-query-generation-v1"


class DataFileOpened(AssertionError):
    pass


@pytest.fixture
def no_data_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if any data segment is read."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise DataFileOpened("a data segment was read")

    monkeypatch.setattr(StoreReader, "read_data", refuse)


def test_snapshot_generation_framing(mixed_store: Path) -> None:
    reader = StoreReader(mixed_store)
    (euid,) = reader.list_streams()
    meta_hw, data_hw = reader.meta_sequences(euid)[-1], reader.data_sequences(euid)[-1]
    expected = hashlib.sha256(
        DOMAIN + euid + meta_hw.to_bytes(8, "big") + data_hw.to_bytes(8, "big")
    ).hexdigest()
    snapshot = LocalStoreSource(mixed_store).snapshot()
    assert (snapshot.catalog_version, snapshot.generation) == ("v1", expected)
    assert snapshot.projected_through == data_hw


def test_an_empty_or_absent_store_answers_empty_tables(tmp_path: Path) -> None:
    source = LocalStoreSource(tmp_path / ".baml" / "profiles-v1")
    snapshot = source.snapshot()
    assert snapshot.generation == hashlib.sha256(DOMAIN).hexdigest()
    assert snapshot.projected_through == 0
    assert source.execution_ids() == []
    tables = source.tables(ALL_RELATIONS, None)
    check_schemas(tables)
    assert all(t.num_rows == 0 for t in tables.values())


def test_a_source_answers_as_of_its_snapshot(segmented_store: Path, tmp_path: Path) -> None:
    root = copy_store(segmented_store, tmp_path)
    old = LocalStoreSource(root)
    profile(root, lambda _: alpha("late"))  # a new process stream
    assert len(old.execution_ids()) == 4
    assert len(old.tables(["processes_v1"], None)["processes_v1"]) == 1
    new = old.refreshed()
    assert len(new.execution_ids()) == 5 and new.cache is old.cache
    assert new.snapshot().generation != old.snapshot().generation
    assert new.refreshed().snapshot() == new.snapshot()


def test_listing_and_counting_roots_opens_no_data_file(
    segmented_store: Path, no_data_files: None
) -> None:
    source = LocalStoreSource(segmented_store)
    assert len(source.execution_ids()) == 4
    roots = source.root_threads(columns=["parent_thread_id"])
    assert roots.num_rows == 4 and roots.column_names == ["parent_thread_id"]
    assert roots["parent_thread_id"].null_count == 4
    listing = source.root_threads(columns=META_ROOT_COLUMNS)
    assert listing.num_rows == 4
    assert source.root_threads(columns=[]).column_names == ["execution_id"]
    with pytest.raises(DataFileOpened):
        source.root_threads(columns=["execution_id", "total_calls"])


def test_the_meta_only_root_columns_equal_the_folded_ones(segmented_store: Path) -> None:
    source = LocalStoreSource(segmented_store)
    fast = source.root_threads(columns=META_ROOT_COLUMNS)
    threads = source.tables(["threads_v1"], None)["threads_v1"]
    folded = threads.filter(threads["parent_thread_id"].is_null()).select(fast.column_names)
    assert fast.equals(folded)
    everything = source.root_threads()
    assert everything.schema == threads.schema and everything.num_rows == 4
    some = source.root_threads([source.execution_ids()[1]], ["status", "execution_id"])
    assert plain(some) == [
        {"execution_id": source.execution_ids()[1], "status": "succeeded"}
    ]  # schema order, not the order asked
    with pytest.raises(CatalogError, match="no column"):
        source.root_threads(columns=["nope"])


def test_execution_filters_aliases_and_unknown_relations(segmented_store: Path) -> None:
    source = LocalStoreSource(segmented_store)
    first, second = source.execution_ids()[:2]
    tables = source.tables(["calls", "cct_population", "health_v1"], [second, "not-an-id"])
    assert set(tables) == {"calls_v1", "call_path_stats_v1", "health_v1"}
    assert set(tables["calls_v1"]["execution_id"].to_pylist()) == {second}
    assert set(tables["health_v1"]["execution_id"].to_pylist()) == {second}
    empty = source.tables(["errors_v1", "function_definitions_v1"], [])
    assert empty["errors_v1"].num_rows == 0
    assert empty["function_definitions_v1"].num_rows > 0  # execution-independent
    with pytest.raises(UnknownRelation, match="valid: threads_v1") as caught:
        source.tables(["nope"], None)
    assert isinstance(caught.value, BamlStudioError)
    assert first != second


def test_the_fold_cache_serves_repeated_questions(
    segmented_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = FoldCache()
    source = LocalStoreSource(segmented_store, cache=cache)
    first = source.tables(["calls_v1"], None)["calls_v1"]
    assert (cache.misses, cache.hits, len(cache)) == (4, 0, 4)
    monkeypatch.setattr(StoreReader, "read_data", None)  # any data read would now fail
    again = source.refreshed().tables(["calls_v1"], None)["calls_v1"]
    assert ipc_bytes(again) == ipc_bytes(first)
    assert cache.hits == 4


def test_the_fold_cache_is_bounded(segmented_store: Path) -> None:
    one = LocalStoreSource(segmented_store, cache=FoldCache(max_bytes=0))
    one.tables(["threads_v1"], None)
    assert len(one.cache) == 0 and one.cache.bytes == 0
    tables = LocalStoreSource(segmented_store).tables(["threads_v1"], None)
    assert tables["threads_v1"].num_rows == 4
    sized = FoldCache()
    LocalStoreSource(segmented_store, cache=sized).tables(["threads_v1"], None)
    budget = sized.bytes // 2
    small = FoldCache(max_bytes=budget)
    LocalStoreSource(segmented_store, cache=small).tables(["threads_v1"], None)
    assert 0 < len(small) < 4 and small.bytes <= budget
    with pytest.raises(ValueError, match="0 or more"):
        FoldCache(max_bytes=-1)


def test_parallel_and_serial_folds_are_byte_identical(mixed_store: Path) -> None:
    serial = LocalStoreSource(mixed_store, fold_workers=1).tables(ALL_RELATIONS, None)
    parallel = LocalStoreSource(mixed_store, fold_workers=4).tables(ALL_RELATIONS, None)
    for name in ALL_RELATIONS:
        assert ipc_bytes(serial[name]) == ipc_bytes(parallel[name]), name


def test_read_value_reasons(mixed_store: Path, tmp_path: Path) -> None:
    root = copy_store(mixed_store, tmp_path)
    source = LocalStoreSource(root)
    calls = plain(source.tables(["calls_v1"], None)["calls_v1"])
    cids = sorted({parse_value_cid_wire(c["args_cid"]) for c in calls})
    body = source.read_value(1, cids[0], 1 << 20)
    assert len(body) > 0

    def reason(codec: int, cid: bytes, max_bytes: int = 1 << 20) -> str:
        with pytest.raises(ValueUnavailable) as caught:
            source.read_value(codec, cid, max_bytes)
        return caught.value.reason

    assert reason(2, cids[0]) == "unsupported"
    assert reason(1, b"\x00" * 32) == "lost"
    assert reason(1, b"\x00" * 5) == "corrupt"
    assert reason(1, cids[0], len(body) - 1) == "truncated"
    assert source.read_value(1, cids[0], len(body)) == body
    layout = StoreLayout(root)
    flip_byte(layout.cas_path(cids[1]), offset=30)
    assert reason(1, cids[1]) == "corrupt"
    path = layout.cas_path(cids[2])
    path.unlink()
    path.mkdir()
    assert reason(1, cids[2]) == "store_unavailable"
    shutil.rmtree(path)
    assert reason(1, cids[2]) == "lost"
