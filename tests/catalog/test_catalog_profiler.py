"""Folding a store the real profiler wrote: every relation, row by row."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from catalog_helpers import ALL_RELATIONS, by_key, check_schemas, ipc_bytes, plain

from baml_studio.catalog import LocalStoreSource
from baml_studio.catalog.handles import Available, decode_handle
from baml_studio.catalog.schema import BY_NAME
from baml_studio.format.ids import CallRef, ThreadRef, error_id_wire, parse_value_cid_wire
from baml_studio.format.values import decode_value, to_json

Rows = dict[str, list[dict[str, Any]]]


@pytest.fixture(scope="module")
def source(mixed_store: Path) -> LocalStoreSource:
    return LocalStoreSource(mixed_store)


@pytest.fixture(scope="module")
def rows(source: LocalStoreSource) -> Rows:
    return {name: plain(table) for name, table in source.tables(ALL_RELATIONS, None).items()}


def roots(rows: Rows) -> dict[str, dict[str, Any]]:
    """Root thread rows by ``<entry function>:<status>``."""
    root_rows = [r for r in rows["threads_v1"] if r["parent_thread_id"] is None]
    return {f"{r['entry_fqn']}:{r['status']}": r for r in root_rows}


def of(rows: list[dict[str, Any]], execution_id: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["execution_id"] == execution_id]


def value(source: LocalStoreSource, cid_wire: str) -> Any:
    return to_json(decode_value(source.read_value(1, parse_value_cid_wire(cid_wire), 1 << 20)))


def test_every_table_has_its_schema_and_the_fold_is_byte_identical(
    source: LocalStoreSource, mixed_store: Path
) -> None:
    first = source.tables(ALL_RELATIONS, None)
    check_schemas(first)
    assert set(first) == set(BY_NAME)
    second = LocalStoreSource(mixed_store).tables(ALL_RELATIONS, None)
    for name in ALL_RELATIONS:
        assert ipc_bytes(first[name]) == ipc_bytes(second[name]), name


def test_root_rows_carry_the_execution(source: LocalStoreSource, rows: Rows) -> None:
    execs = roots(rows)
    assert sorted(execs) == [
        "cat.Cancelled:cancelled", "cat.Manual:succeeded", "cat.Process:failed",
        "cat.Process:succeeded", "cat.ScoreAll:succeeded",
    ]  # fmt: skip
    assert [r["execution_id"] for r in rows["threads_v1"] if r["parent_thread_id"] is None] == (
        source.execution_ids()
    )
    process_rows = [r for r in rows["threads_v1"] if r["entry_fqn"] == "cat.Process"]
    assert sorted(r["status"] for r in process_rows) == ["failed", "succeeded"]
    (proc,) = rows["processes_v1"]
    assert proc["os_pid"] == os.getpid() and proc["alive"] is False
    for root in rows["threads_v1"]:
        if root["parent_thread_id"] is not None:
            continue
        eid = root["execution_id"]
        meta = next(m for m in source.index.executions if m.execution_id == eid)
        assert meta.started is not None and meta.ended is not None
        calls = of(rows["calls_v1"], eid)
        paths = of(rows["call_path_stats_v1"], eid)
        root_call = next(c for c in calls if c["edge_kind"] == "root")
        assert root["thread_id"] == eid and root["kind"] == "root"
        assert root["index_state"] == "complete"
        assert root["process_id"] == proc["process_id"] and root["engine_id"] == 1
        assert root["runtime_id"] == root_call["runtime_ids"][0]
        assert root["duration_ns"] == root_call["duration_ns"]
        assert root["started_ns"] == meta.started.started_ns
        assert root["started_at"] == proc["zero_unix_ns"] + root["started_ns"]
        assert root["ended_at"] == proc["zero_unix_ns"] + root["ended_ns"]
        assert root["total_calls"] == sum(p["calls_started"] for p in paths)
        assert root["total_errors"] == sum(p["completed_error"] for p in paths)
        assert root["total_cancelled"] == sum(p["completed_cancelled"] for p in paths)
        assert root["calls_retained"] == len(calls)
        assert root["threads_total"] == len(of(rows["threads_v1"], eid))
        assert root["value_state"] == "complete"
        assert (root["data_first_seq"], root["data_last_seq"], root["data_file_count"]) == (
            meta.ended.data_first_seq,
            meta.ended.data_last_seq,
            meta.ended.data_segment_count,
        )
        assert root["entry_function_id"] == root_call["function_id"]


def test_nested_calls_fold_into_call_paths_and_calls(source: LocalStoreSource, rows: Rows) -> None:
    ok = next(
        r
        for r in rows["threads_v1"]
        if r["entry_fqn"] == "cat.Process" and r["status"] == "succeeded"
    )
    eid = ok["execution_id"]
    paths = by_key(of(rows["call_path_stats_v1"], eid), "fqn")
    assert set(paths) == {"cat.Process", "cat.Extract", "cat.normalize"}
    root, llm, helper = paths["cat.Process"], paths["cat.Extract"], paths["cat.normalize"]
    assert (root["depth"], llm["depth"], helper["depth"]) == (0, 1, 2)
    assert root["parent_call_path_id"] is None
    assert llm["parent_call_path_id"] == root["call_path_id"]
    assert helper["parent_call_path_id"] == llm["call_path_id"]
    assert [root["edge_kind"], llm["edge_kind"], helper["edge_kind"]] == ["root", "call", "call"]
    assert (llm["calls_started"], llm["calls_selected"], llm["completed_ok"]) == (2, 2, 2)
    assert (helper["calls_started"], helper["calls_selected"]) == (2, 0)
    for path in paths.values():
        assert path["self_ns"] == path["inclusive_ns"] - path["direct_child_ns"] - path["await_ns"]
        assert path["timing_complete"] and path["overflow_reason"] is None
        assert path["kind"] == "bytecode" and path["origin"] == "user"
    # the root was called from conftest.py, outside the program: it has no call site
    program = str(Path(__file__).with_name("catalog_program.py"))
    assert [p["call_site_file"] for p in (root, llm, helper)] == [None, program, program]
    assert root["call_site_line"] is None and llm["call_site_line"] is not None
    assert llm["call_site_start"] < llm["call_site_end"]
    assert root["direct_child_ns"] == llm["inclusive_ns"]
    thread = ThreadRef.parse_wire(eid)
    calls = of(rows["calls_v1"], eid)
    assert [c["call_id"] for c in calls] == [CallRef(thread, n).wire() for n in (1, 2, 4)]
    assert [c["fqn"] for c in calls] == ["cat.Process", "cat.Extract", "cat.Extract"]
    assert [c["parent_call_id"] for c in calls] == [None, calls[0]["call_id"], calls[0]["call_id"]]
    assert [c["selection_reasons"] for c in calls] == [["root"], ["llm"], ["llm"]]
    assert all(c["roles"] == ["input", "output", "error"] for c in calls)
    assert all(c["call_path_id"] == paths[c["fqn"]]["call_path_id"] for c in calls)
    assert [c["status"] for c in calls] == ["ok"] * 3
    for call in calls:
        assert (call["args_state"], call["output_state"], call["error_state"]) == (
            "available", "available", "not_applicable",
        )  # fmt: skip
        assert call["error"] is None and call["error_id"] is None
        assert call["ended_ns"] - call["started_ns"] >= 0
        handle = decode_handle(call["args"])
        assert isinstance(handle, Available) and handle.codec == 1
        assert "bamlv_1_" + handle.cid.hex() == call["args_cid"]
    assert value(source, calls[0]["args_cid"]) == {"documents": ["a", "b"], "strict": False}
    assert value(source, calls[1]["args_cid"]) == {"document": "a", "strict": False}
    assert value(source, calls[1]["output_cid"]) == {"id": "INV-1042", "total": 12.35}


def test_a_failure_links_calls_to_its_error_row_and_stack(
    source: LocalStoreSource, rows: Rows
) -> None:
    failed = next(r for r in rows["threads_v1"] if r["status"] == "failed")
    eid = failed["execution_id"]
    assert failed["end_status"] == "errored" and failed["total_errors"] == 2
    (error,) = of(rows["errors_v1"], eid)
    calls = of(rows["calls_v1"], eid)
    root, ok_llm, bad_llm = calls
    assert [c["status"] for c in calls] == ["errored", "ok", "errored"]
    assert error["error_id"] == error_id_wire(ThreadRef.parse_wire(eid), 1)
    assert error["throw_call_id"] == bad_llm["call_id"] and error["throw_thread_id"] == eid
    assert error["throw_fqn"] == "cat.Extract" and error["kind"] == "fresh"
    assert error["source"] == "bytecode"
    assert error["stack"] == ["cat.Process", "cat.Extract"] and error["stack_complete"]
    assert error["terminal_call_ids"] == [bad_llm["call_id"], root["call_id"]]
    assert error["throw_call_path_id"] == bad_llm["call_path_id"]
    assert error["throw_site_file"] == str(Path(__file__).with_name("catalog_program.py"))
    assert error["throw_site_line"] is not None and error["throw_site_line"] > 0
    thrown = value(source, error["value_cid"])
    assert thrown["message"] == "cannot read bad one" and thrown["invoice_id"] == "INV-9"
    assert thrown["type"].endswith("ExtractionError")
    for call in (root, bad_llm):
        assert call["error_id"] == error["error_id"] and call["error_state"] == "available"
        assert call["error_cid"] == error["value_cid"] and call["error"] == error["value"]
        assert call["output_state"] == "not_applicable" and call["output"] is None
    assert ok_llm["error_state"] == "not_applicable" and ok_llm["error_id"] is None
    execution_health = {
        r["metric"]: r["value"] for r in of(rows["health_v1"], eid) if r["plane"] == "execution"
    }
    assert execution_health["error_captures_committed"] == 1
    assert execution_health["terminal_error_links_committed"] == 2
    assert execution_health["cct_file_publish_failed"] == 0


def test_spawned_threads_and_manual_and_cancelled_executions(rows: Rows) -> None:
    execs = roots(rows)
    spawning = execs["cat.ScoreAll:succeeded"]
    threads = of(rows["threads_v1"], spawning["execution_id"])
    calls = of(rows["calls_v1"], spawning["execution_id"])
    root_call = next(c for c in calls if c["edge_kind"] == "root")
    assert len(threads) == 3 and spawning["threads_total"] == 3
    for thread in threads[1:]:
        assert thread["kind"] == "spawn"
        assert thread["parent_thread_id"] == spawning["execution_id"]
        assert thread["spawn_call_id"] == root_call["call_id"]
        assert thread["spawn_fqn"] == "cat.ScoreAll"
        assert thread["end_status"] == "completed" and thread["name"]
        assert thread["status"] is None and thread["total_calls"] is None
    llm = [c for c in of(rows["calls_v1"], spawning["execution_id"]) if c["fqn"] == "cat.Score"]
    assert sorted(c["thread_id"] for c in llm) == sorted(t["thread_id"] for t in threads[1:])
    assert all(c["edge_kind"] == "spawn" for c in llm)
    manual = of(rows["calls_v1"], execs["cat.Manual:succeeded"]["execution_id"])
    assert [c["selection_reasons"] for c in manual] == [["root"], ["manual"]]
    assert manual[1]["roles"] == ["input"]
    assert (manual[1]["args_state"], manual[1]["output_state"]) == ("available", "not_applicable")
    assert manual[1]["output"] is None and manual[1]["fqn"] == "cat.normalize"
    cancelled = execs["cat.Cancelled:cancelled"]
    assert cancelled["status"] == "cancelled" and cancelled["total_cancelled"] == 2
    assert of(rows["errors_v1"], cancelled["execution_id"]) == []


def test_health_rows_per_plane(rows: Rows) -> None:
    for root in roots(rows).values():
        health = of(rows["health_v1"], root["execution_id"])
        planes = [r["plane"] for r in health]
        assert planes == ["execution"] * 26 + ["cct"] * 3 + ["process", "data"]
        assert health[7]["metric"] == "cct_file_publish_failed"
        assert health[9]["metric"] == "evidence_file_publish_failed"
        assert [r["value"] for r in health[26:29]] == [0, 0, 0]
        assert health[-2]["value"] == root["data_file_count"]
        assert (health[-1]["metric"], health[-1]["value"], health[-1]["reason"]) == (
            "data_state", 1, "complete",
        )  # fmt: skip


def test_store_relations(source: LocalStoreSource, rows: Rows, mixed_store: Path) -> None:
    fqns = {r["fqn"] for r in rows["function_definitions_v1"]}
    assert {"cat.Process", "cat.Extract", "cat.normalize", "cat.ScoreAll"} <= fqns
    definition = by_key(rows["function_definitions_v1"], "fqn")["cat.Extract"]
    assert definition["source_file"] == str(Path(__file__).with_name("catalog_program.py"))
    assert definition["kind"] == "bytecode" and definition["origin"] == "user"
    assert definition["display_name"] == "Extract"
    programs = {r["program_id"] for r in rows["threads_v1"] if r["program_id"]}
    assert programs == {r["program_id"] for r in rows["function_definitions_v1"]}
    files = rows["store_files_v1"]
    on_disk = sorted(p for p in mixed_store.glob("streams/*/*/*.baml*"))
    assert sorted(mixed_store / f["path"] for f in files) == on_disk
    assert all(f["decode_ok"] and f["checksum_ok"] for f in files)
    assert all(f["payload_len"] == (mixed_store / f["path"]).stat().st_size for f in files)
    index = by_key(rows["value_index_v1"], "cid")
    assert len(index) == len(list(mixed_store.glob("cas/sha256/*/*.bamlvalue")))
    referenced = {c[k] for c in rows["calls_v1"] for k in ("args_cid", "output_cid") if c[k]}
    assert referenced <= set(index)
    assert {index[cid]["codec"] for cid in referenced} == {1}
    assert sum(r["codec"] == 2 for r in index.values()) == 1  # the function table
