"""Damaged stores: missing or corrupt segments are reported per execution, never fatal.

The segmented store (conftest) holds Alpha (data 1), Beta (data 2 and 4, range 2..4), Delta
alone in data 3 (inside Beta's range) and Gamma (data 5), each with its RootStarted and
RootEnded in its own meta segment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from catalog_helpers import (
    ALL_RELATIONS,
    check_schemas,
    copy_store,
    data_rows,
    flip_byte,
    plain,
    segment,
)

from baml_studio.catalog import LocalStoreSource
from baml_studio.catalog.fold_inputs import ExecutionMeta
from baml_studio.store import Plane

COMPLETE = [("data_state", 1, "complete")]


def metas(root: Path) -> dict[str, ExecutionMeta]:
    """Executions by root function name (from the undamaged store's fold)."""
    source = LocalStoreSource(root)
    names = {
        r["execution_id"]: r["entry_fqn"]
        for r in plain(source.root_threads(columns=["execution_id", "entry_fqn"]))
    }
    return {names[m.execution_id]: m for m in source.index.executions}


@pytest.fixture(scope="module")
def layout(segmented_store: Path) -> dict[str, ExecutionMeta]:
    found = metas(segmented_store)
    assert sorted(found) == ["cat.Alpha", "cat.Beta", "cat.Delta", "cat.Gamma"]
    ranges = {
        name: (m.ended.data_first_seq, m.ended.data_last_seq, m.ended.data_segment_count)
        for name, m in found.items()
        if m.ended is not None
    }
    assert ranges == {
        "cat.Alpha": (1, 1, 1),
        "cat.Beta": (2, 4, 2),
        "cat.Delta": (3, 3, 1),
        "cat.Gamma": (5, 5, 1),
    }
    return found


def fold(root: Path) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    tables = LocalStoreSource(root).tables(ALL_RELATIONS, None)
    check_schemas(tables)
    roots = {
        r["execution_id"]: r for r in plain(tables["threads_v1"]) if r["parent_thread_id"] is None
    }
    return roots, plain(tables["health_v1"])


def test_the_undamaged_store_is_complete(segmented_store: Path, layout: dict[str, Any]) -> None:
    roots, health = fold(segmented_store)
    assert len(roots) == 4
    for meta in layout.values():
        assert roots[meta.execution_id]["index_state"] == "complete"
        assert data_rows(health, meta.execution_id) == COMPLETE


def test_a_missing_data_segment_spoils_exactly_the_ranges_covering_it(
    segmented_store: Path, layout: dict[str, ExecutionMeta], tmp_path: Path
) -> None:
    root = copy_store(segmented_store, tmp_path)
    euid = layout["cat.Delta"].root.euid
    segment(root, euid, Plane.DATA, 3).unlink()
    roots, health = fold(root)
    assert data_rows(health, layout["cat.Delta"].execution_id) == [
        ("data_state", 0, "incomplete"),
        ("data_issue", 1, "MissingDataSegment(3)"),
        ("data_issue", 1, "GroupCountMismatch { expected: 1, found: 0 }"),
    ]
    # Beta's range 2..4 covers 3 although its groups are in 2 and 4
    assert data_rows(health, layout["cat.Beta"].execution_id) == [
        ("data_state", 0, "incomplete"),
        ("data_issue", 1, "MissingDataSegment(3)"),
    ]
    for name in ("cat.Alpha", "cat.Gamma"):
        assert data_rows(health, layout[name].execution_id) == COMPLETE
    delta = roots[layout["cat.Delta"].execution_id]
    assert delta["status"] == "succeeded" and delta["index_state"] == "complete"
    assert delta["total_calls"] == 0 and delta["calls_retained"] == 0
    assert delta["threads_total"] == 1  # the synthetic root row
    assert delta["entry_fqn"] is None and delta["started_ns"] > 0


def test_losing_a_segment_holding_groups_loses_them_and_leaves_dependencies_dangling(
    segmented_store: Path, layout: dict[str, ExecutionMeta], tmp_path: Path
) -> None:
    root = copy_store(segmented_store, tmp_path)
    segment(root, layout["cat.Beta"].root.euid, Plane.DATA, 2).unlink()
    roots, health = fold(root)
    beta = layout["cat.Beta"].execution_id
    assert data_rows(health, beta) == [
        ("data_state", 0, "incomplete"),
        ("data_issue", 1, "MissingDataSegment(2)"),
        ("data_issue", 1, "GroupCountMismatch { expected: 2, found: 1 }"),
        ("data_issue", 1, "UnresolvedDependency"),
    ]
    assert roots[beta]["calls_retained"] == 1  # only the call that started after the gap
    for name in ("cat.Alpha", "cat.Delta", "cat.Gamma"):
        assert data_rows(health, layout[name].execution_id) == COMPLETE


def test_a_corrupt_data_segment(
    segmented_store: Path, layout: dict[str, ExecutionMeta], tmp_path: Path
) -> None:
    root = copy_store(segmented_store, tmp_path)
    flip_byte(segment(root, layout["cat.Gamma"].root.euid, Plane.DATA, 5))
    roots, health = fold(root)
    gamma = layout["cat.Gamma"].execution_id
    assert data_rows(health, gamma) == [
        ("data_state", 0, "incomplete"),
        ("data_issue", 1, "CorruptDataSegment(5)"),
        ("data_issue", 1, "GroupCountMismatch { expected: 1, found: 0 }"),
    ]
    assert roots[gamma]["status"] == "succeeded"
    for name in ("cat.Alpha", "cat.Beta", "cat.Delta"):
        assert data_rows(health, layout[name].execution_id) == COMPLETE
    files = plain(LocalStoreSource(root).tables(["store_files_v1"], None)["store_files_v1"])
    bad = [(f["plane"], f["sequence"]) for f in files if not f["decode_ok"]]
    assert bad == [("data", 5)]


def test_losing_the_last_meta_segment_loses_root_ended(
    segmented_store: Path, layout: dict[str, ExecutionMeta], tmp_path: Path
) -> None:
    root = copy_store(segmented_store, tmp_path)
    gamma = layout["cat.Gamma"]
    assert gamma.ended_seq == max(m.ended_seq for m in layout.values())
    segment(root, gamma.root.euid, Plane.META, gamma.ended_seq).unlink()
    roots, health = fold(root)
    row = roots[gamma.execution_id]
    assert (row["status"], row["index_state"]) == ("abandoned", "no_root_ended")
    assert (row["data_first_seq"], row["data_last_seq"], row["data_file_count"]) == (0, 0, 0)
    # without RootEnded the fold reads past RootStarted's data high water: its group is found
    assert row["calls_retained"] == 2 and row["entry_fqn"] == "cat.Gamma"
    assert data_rows(health, gamma.execution_id) == [
        ("data_state", 0, "incomplete"),
        ("data_issue", 1, "NoRootEnded"),
    ]
    assert not any(
        r["plane"] == "execution" for r in health if r["execution_id"] == row["execution_id"]
    )
    for name in ("cat.Alpha", "cat.Beta", "cat.Delta"):
        assert roots[layout[name].execution_id]["index_state"] == "complete"


def test_a_meta_gap_between_start_and_end_is_index_corrupt(
    segmented_store: Path, layout: dict[str, ExecutionMeta], tmp_path: Path
) -> None:
    root = copy_store(segmented_store, tmp_path)
    beta, delta = layout["cat.Beta"], layout["cat.Delta"]
    assert beta.started_seq < delta.started_seq < beta.ended_seq
    segment(root, beta.root.euid, Plane.META, delta.started_seq).unlink()
    roots, _ = fold(root)
    assert roots[beta.execution_id]["index_state"] == "index_corrupt"
    assert roots[beta.execution_id]["status"] == "succeeded"
    # Delta lost its RootStarted, and its RootEnded does not say it was lost
    assert roots[delta.execution_id]["index_state"] == "index_corrupt"
    assert roots[delta.execution_id]["runtime_id"] is None
    for name in ("cat.Alpha", "cat.Gamma"):
        assert roots[layout[name].execution_id]["index_state"] == "complete"


def test_a_corrupt_meta_segment_is_a_gap_and_other_executions_still_answer(
    segmented_store: Path, layout: dict[str, ExecutionMeta], tmp_path: Path
) -> None:
    root = copy_store(segmented_store, tmp_path)
    beta = layout["cat.Beta"]
    flip_byte(segment(root, beta.root.euid, Plane.META, beta.ended_seq))
    source = LocalStoreSource(root)
    (problem,) = source.index.problems
    assert problem.sequence == beta.ended_seq
    roots, health = fold(root)
    assert roots[beta.execution_id]["index_state"] == "index_corrupt"
    assert roots[beta.execution_id]["status"] == "abandoned"
    assert ("data_issue", 1, "NoRootEnded") in data_rows(health, beta.execution_id)
    for name in ("cat.Alpha", "cat.Gamma"):
        assert roots[layout[name].execution_id]["index_state"] == "complete"
        assert data_rows(health, layout[name].execution_id) == COMPLETE
