"""Folding a multi-process workload store and checking it against the workload's report."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from catalog_helpers import ALL_RELATIONS, check_schemas, copy_store, data_rows, plain, segment

from baml_studio.catalog import LocalStoreSource
from baml_studio.format.ids import parse_value_cid_wire
from baml_studio.format.values import decode_value, to_json
from baml_studio.store import Plane
from baml_studio.workload import WorkloadReport, run_workload

EXECUTIONS, SEED = 60, 11
THROWER = {
    "baml_studio.workload.program.ExtractionError": "ExtractInvoice",
    "baml_studio.workload.program.LineItemValidationError": "validate_line_item",
    "baml_studio.workload.program.ProviderUnavailableError": "DraftReply",
    "baml_studio.workload.program.UnsupportedLanguageError": "ClassifyTicket",
}
Rows = dict[str, list[dict[str, Any]]]


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, WorkloadReport]:
    root = tmp_path_factory.mktemp("workload2") / ".baml" / "profiles-v1"
    report = run_workload(root, EXECUTIONS, processes=2, seed=SEED, publish_interval_s=0.05)
    return root, report


@pytest.fixture(scope="module")
def rows(workload: tuple[Path, WorkloadReport]) -> Rows:
    tables = LocalStoreSource(workload[0]).tables(ALL_RELATIONS, None)
    check_schemas(tables)
    return {name: plain(table) for name, table in tables.items()}


def value(source: LocalStoreSource, cid_wire: str) -> Any:
    return to_json(decode_value(source.read_value(1, parse_value_cid_wire(cid_wire), 1 << 24)))


def by_request(source: LocalStoreSource, rows: Rows) -> dict[str, dict[str, Any]]:
    """Root call rows by the request_id argument of the root call."""
    out = {}
    for call in rows["calls_v1"]:
        if call["edge_kind"] == "root":
            request_id = value(source, call["args_cid"])["request_id"]
            assert request_id not in out
            out[request_id] = call
    return out


def test_every_execution_is_listed_once_with_its_status(
    workload: tuple[Path, WorkloadReport], rows: Rows
) -> None:
    root, report = workload
    source = LocalStoreSource(root)
    ids = source.execution_ids()
    assert len(ids) == len(set(ids)) == EXECUTIONS
    roots = {r["execution_id"]: r for r in rows["threads_v1"] if r["parent_thread_id"] is None}
    assert sorted(roots) == ids
    assert len({r["process_id"] for r in roots.values()}) == 2
    calls = by_request(source, rows)
    assert sorted(calls) == sorted(e.request_id for e in report.executions)
    for record in report.executions:
        thread = roots[calls[record.request_id]["execution_id"]]
        assert thread["status"] == record.status, record.request_id
        assert thread["entry_fqn"] == record.root_function
        assert (thread["index_state"], thread["value_state"]) == ("complete", "complete")
    assert Counter(r["status"] for r in roots.values()) == report.executions_by_status
    assert all(data_rows(rows["health_v1"], eid) == [("data_state", 1, "complete")] for eid in ids)


def test_call_counts_per_function_match_the_report(
    workload: tuple[Path, WorkloadReport], rows: Rows
) -> None:
    root, report = workload
    calls = by_request(LocalStoreSource(root), rows)
    for record in report.executions:
        execution_id = calls[record.request_id]["execution_id"]
        counted: Counter[str] = Counter()
        for path in rows["call_path_stats_v1"]:
            if path["execution_id"] == execution_id:
                counted[path["fqn"]] += path["calls_started"]
        assert dict(counted) == dict(record.calls), record.request_id


def test_failed_executions_carry_the_reported_error(
    workload: tuple[Path, WorkloadReport], rows: Rows
) -> None:
    root, report = workload
    source = LocalStoreSource(root)
    calls = by_request(source, rows)
    errors = {e["error_id"]: e for e in rows["errors_v1"]}
    failed = [r for r in report.executions if r.status == "failed"]
    assert failed
    for record in report.executions:
        call = calls[record.request_id]
        if record.status != "failed":
            assert call["error_id"] is None and call["error_state"] == "not_applicable"
            continue
        assert call["status"] == "errored" and call["error_state"] == "available"
        error = errors[call["error_id"]]
        thrown = value(source, error["value_cid"])
        assert thrown["type"] == record.error_type
        assert thrown["message"] == record.error_message
        assert error["throw_fqn"] == THROWER[str(record.error_type)]
        assert error["stack"] == [record.root_function, error["throw_fqn"]]
        assert error["stack_complete"] and call["call_id"] in error["terminal_call_ids"]


def test_a_missing_data_segment_spoils_only_the_executions_it_held(
    workload: tuple[Path, WorkloadReport], rows: Rows, tmp_path: Path
) -> None:
    root = copy_store(workload[0], tmp_path)
    source = LocalStoreSource(root)
    victim = source.index.executions[0]
    assert victim.ended is not None
    seq = victim.ended.data_first_seq
    segment(root, victim.root.euid, Plane.DATA, seq).unlink()
    health = plain(LocalStoreSource(root).tables(["health_v1"], None)["health_v1"])
    for meta in source.index.executions:
        assert meta.ended is not None
        covered = (
            meta.root.euid == victim.root.euid
            and meta.ended.data_first_seq <= seq <= meta.ended.data_last_seq
        )
        state = data_rows(health, meta.execution_id)
        if covered:
            assert state[0] == ("data_state", 0, "incomplete")
            assert ("data_issue", 1, f"MissingDataSegment({seq})") in state
        else:
            assert state == [("data_state", 1, "complete")]


def _stable(rows: Rows) -> dict[str, Counter[tuple[Any, ...]]]:
    """Multisets of rows without ids, timings, thread names, and the health rows that depend
    on segment packing (``process``) or on measured times (``cct``: self-time underflow)."""
    out: dict[str, Counter[tuple[Any, ...]]] = {}
    picks = {
        "threads_v1": ("kind", "status", "index_state", "entry_fqn", "spawn_fqn", "end_status",
                       "total_calls", "total_errors", "total_cancelled", "calls_retained",
                       "threads_total", "value_state"),
        "call_path_stats_v1": ("fqn", "depth", "edge_kind", "calls_started", "calls_selected",
                               "completed_ok", "completed_error", "completed_cancelled"),
        "calls_v1": ("fqn", "edge_kind", "status", "selection_reasons", "roles", "args_state",
                     "output_state", "error_state", "args_cid", "output_cid"),
        "errors_v1": ("throw_fqn", "kind", "source", "value_state", "value_cid", "stack",
                      "stack_complete"),
        "health_v1": ("metric", "plane", "value", "edge_kind", "reason"),
    }  # fmt: skip
    for name, columns in picks.items():
        out[name] = Counter(
            tuple(tuple(v) if isinstance(v, list) else v for v in (r[c] for c in columns))
            for r in rows[name]
            if r.get("plane") not in ("process", "cct")
        )
    return out


def test_one_or_two_processes_give_the_same_rows_modulo_ids(rows: Rows, tmp_path: Path) -> None:
    root = tmp_path / ".baml" / "profiles-v1"
    run_workload(root, EXECUTIONS, processes=1, seed=SEED, publish_interval_s=0.05)
    single = {n: plain(t) for n, t in LocalStoreSource(root).tables(ALL_RELATIONS, None).items()}
    assert _stable(single) == _stable(rows)
