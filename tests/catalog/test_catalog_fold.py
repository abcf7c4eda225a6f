"""The pure fold on hand-made inputs: every rule that a healthy profiler store never shows."""

from __future__ import annotations

from typing import Any

import pytest
from catalog_helpers import check_schemas, ipc_bytes, plain
from catalog_inputs import (
    ALL_ROLES,
    EUID,
    ROOT,
    ctx,
    executions,
    inputs,
    meta,
    process,
    tup,
)
from hypothesis import given, settings

from baml_studio.catalog import fold_execution
from baml_studio.catalog.fold_cct import U64_MAX, depths
from baml_studio.catalog.fold_meta import index_state, status
from baml_studio.catalog.handles import LOSS_NOT_CAPTURED, Unavailable, decode_handle
from baml_studio.format.ids import CallRef, ThreadRef, error_id_wire, runtime_id_wire
from baml_studio.format.records import (
    ROLE_ERROR,
    ROLE_INPUT,
    SELECT_LLM,
    SELECT_ROOT,
    CctContext,
    CctCounters,
    CctOverflow,
    CctTuple,
    EdgeKind,
    ErrorCapture,
    ErrorCaptureId,
    ErrorCaptureLossReason,
    ErrorKind,
    ErrorSource,
    FunctionEndStatus,
    NormalContext,
    OverflowContext,
    OverflowReason,
    RootStatus,
    RuntimeAnnotation,
    SpanEnd,
    SpanRuntimeId,
    SpanStart,
    TerminalErrorRef,
    ThrowSite,
    ValueLossReason,
    ValueLost,
    ValueOccurrence,
    ValueRole,
)


def rows(folded: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return plain(folded[name])


@pytest.mark.parametrize(
    ("kwargs", "gaps", "expected"),
    [
        ({}, (), "complete"),
        ({"started_seq": 2, "ended_seq": 5}, (3,), "index_corrupt"),
        ({"started_seq": 2, "ended_seq": 5}, (1, 5, 6), "complete"),
        ({"started_seq": 2, "ended_seq": None}, (7,), "index_corrupt"),
        ({"started_seq": 2, "ended_seq": None}, (1,), "no_root_ended"),
        ({"started_seq": None, "flags": 0}, (), "index_corrupt"),
        ({"started_seq": None, "flags": 1}, (), "root_started_lost"),
        ({"started_seq": 1, "flags": 1}, (), "root_started_lost"),
        ({"started_seq": 1, "ended_seq": 9, "flags": 1}, (4,), "index_corrupt"),
    ],
)
def test_index_state_rules_in_order(
    kwargs: dict[str, Any], gaps: tuple[int, ...], expected: str
) -> None:
    assert index_state(meta(**kwargs), process(gaps=gaps)) == expected


def test_status() -> None:
    assert status(meta(status=RootStatus.PANICKED), process(alive=True)) == "panicked"
    assert status(meta(ended_seq=None), process(alive=True)) == "running"
    assert status(meta(ended_seq=None), process(alive=False)) == "abandoned"
    assert status(meta(status=RootStatus.ABANDONED), process(alive=True)) == "abandoned"


def test_call_paths_depth_saturation_underflow_and_overflow() -> None:
    root = ctx(tup(1, edge=EdgeKind.ROOT), invocations_started=1, inclusive_ns=U64_MAX + 5)
    child = ctx(tup(2, root.key), invocations_started=3, inclusive_ns=10, await_ns=20)
    leaf = ctx(tup(3, child.key), inclusive_ns=7, direct_call_child_inclusive_ns=2, await_ns=1)
    orphan = ctx(tup(2, b"\x99" * 32))
    bare = CctContext(b"\x42" * 32, None, CctCounters(invocations_started=2))
    overflow = CctOverflow(
        OverflowReason.INVALID_PARENT_CONTEXT, EdgeKind.SPAWN, CctCounters(invocations_started=4)
    )
    folded = fold_execution(inputs((), [root, child, leaf, orphan, bare], overflows=[overflow]))
    paths = {r["call_path_id"]: r for r in rows(folded, "call_path_stats_v1")}
    assert list(paths) == sorted(paths)
    r, c, lf = paths[root.key.hex()], paths[child.key.hex()], paths[leaf.key.hex()]
    assert (r["depth"], c["depth"], lf["depth"], paths[orphan.key.hex()]["depth"]) == (0, 1, 2, 1)
    assert (r["inclusive_ns"], r["timing_complete"]) == (U64_MAX, False)  # saturated
    assert (c["self_ns"], c["timing_complete"]) == (0, False)  # underflow, clamped
    assert (lf["self_ns"], lf["timing_complete"]) == (4, True)
    assert (lf["fqn"], lf["call_site_file"], lf["call_site_line"]) == ("app.Leaf", "app.baml", 3)
    assert c["definition_key"] == "function:app.Child" and c["kind"] == "bytecode"
    b = paths[bare.key.hex()]
    assert (b["function_id"], b["fqn"], b["edge_kind"], b["depth"]) == (0, None, "call", 0)
    o = paths["overflow:invalid_parent_call_path:spawn"]
    assert (o["overflow_reason"], o["depth"], o["self_ns"], o["timing_complete"]) == (
        "invalid_parent_call_path", 0, 0, False,
    )  # fmt: skip
    (thread,) = rows(folded, "threads_v1")
    assert thread["total_calls"] == 1 + 3 + 2 + 4
    health = [(h["metric"], h["plane"], h["value"], h["edge_kind"], h["reason"])
              for h in rows(folded, "health_v1") if h["plane"] in ("cct", "overflow")]  # fmt: skip
    assert health == [
        ("counter_saturated", "cct", 0, None, None),
        ("await_counter_saturated", "cct", 0, None, None),
        ("self_time_underflow", "cct", 1, None, None),
        ("calls_started", "overflow", 4, "spawn", "invalid_parent_call_path"),
    ]


def test_depth_walk_stops_on_cycles() -> None:
    a, b = b"\x01" * 32, b"\x02" * 32
    cycle = {
        a: CctContext(a, CctTuple(b"\0" * 16, b, 1, None, EdgeKind.CALL), CctCounters()),
        b: CctContext(b, CctTuple(b"\0" * 16, a, 2, None, EdgeKind.CALL), CctCounters()),
    }
    found = depths(cycle)
    assert set(found) == {a, b} and all(0 <= d <= 2 for d in found.values())


def test_values_runtime_ids_and_terminal_links() -> None:
    root_ctx = ctx(tup(1, edge=EdgeKind.ROOT))
    key = NormalContext(root_ctx.key)
    root, lost_link, disk_link = CallRef(ROOT, 1), CallRef(ROOT, 2), CallRef(ROOT, 3)
    facts = [
        SpanStart(root, None, ROOT, key, 1, None, EdgeKind.ROOT, 5, SELECT_ROOT, ALL_ROLES,
                  RuntimeAnnotation(0, b"\x01" * 16)),
        SpanRuntimeId(root, 2, b"\x03" * 16),
        SpanRuntimeId(root, 1, b"\x02" * 16),
        SpanRuntimeId(root, 0, b"\x04" * 16),
        ValueOccurrence(root, key, ValueRole.INPUT, ValueLost(ValueLossReason.VALUE_TOO_LARGE)),
        SpanStart(lost_link, root, ROOT, key, 2, None, EdgeKind.CALL, 6, SELECT_LLM, ALL_ROLES),
        SpanEnd(lost_link, 9, FunctionEndStatus.ERRORED, 3),
        TerminalErrorRef(lost_link, ErrorCaptureLossReason.MISSING_STRUCTURAL_JOIN),
        SpanStart(disk_link, root, ROOT, key, 2, None, EdgeKind.CALL, 7, SELECT_LLM, ROLE_ERROR),
        TerminalErrorRef(disk_link, ErrorCaptureLossReason.DISK_GUARD_EXCEEDED),
    ]  # fmt: skip
    folded = fold_execution(inputs(facts, [root_ctx]))
    calls = rows(folded, "calls_v1")
    first, second, third = calls
    assert first["runtime_ids"] == [runtime_id_wire(bytes([n]) * 16) for n in (4, 2, 3)]
    assert (first["args_state"], first["args_cid"]) == ("lost:value_too_large", None)
    assert decode_handle(first["args"]) == Unavailable(ValueLossReason.VALUE_TOO_LARGE)
    assert first["output_state"] == "not_captured"  # still running: may yet arrive
    assert decode_handle(first["output"]) == Unavailable(LOSS_NOT_CAPTURED)
    assert (first["error_state"], first["error"]) == ("not_applicable", None)
    assert (first["status"], first["ended_ns"], first["duration_ns"]) == (None, None, None)
    assert first["started_at"] == 1_700_000_000_000_000_000 + 5
    assert second["output_state"] == "not_applicable"  # errored: no output to capture
    assert (second["error_state"], second["error_lost_reason"]) == (
        "not_captured", "MissingStructuralJoin",
    )  # fmt: skip
    assert (second["status"], second["duration_ns"]) == ("errored", 3)
    assert (third["error_state"], third["error_lost_reason"]) == (
        "lost:disk_guard_exceeded", "DiskGuardExceeded",
    )  # fmt: skip
    assert third["roles"] == ["error"] and third["args_state"] == "not_applicable"
    (thread,) = rows(folded, "threads_v1")
    assert thread["value_state"] == "partial"
    assert (thread["entry_function_id"], thread["entry_fqn"]) == (1, "app.Root")
    assert thread["duration_ns"] == 800  # no root SpanEnd: RootEnded - RootStarted


def test_error_stacks() -> None:
    root_ctx = ctx(tup(1, edge=EdgeKind.ROOT))
    unknown = ctx(tup(99, root_ctx.key))
    leaf = ctx(tup(3, unknown.key))
    orphan = ctx(tup(2, b"\x77" * 32))
    call = CallRef(ROOT, 1)
    span = SpanStart(call, None, ROOT, NormalContext(root_ctx.key), 1, None, EdgeKind.ROOT, 1,
                     SELECT_ROOT, ALL_ROLES)  # fmt: skip

    def capture(n: int, context: NormalContext | OverflowContext) -> ErrorCapture:
        return ErrorCapture(ErrorCaptureId(ROOT, n), call, context, 3, ThrowSite(7, 4, 1, 2),
                            ErrorKind.RETHROW, ErrorSource.NATIVE_CALL,
                            ValueLost(ValueLossReason.CAS_WRITE_FAILED))  # fmt: skip

    facts = [
        span,
        capture(1, NormalContext(leaf.key)),
        capture(2, NormalContext(orphan.key)),
        capture(10, OverflowContext(OverflowReason.CONTEXT_MEMORY_UNAVAILABLE_AFTER_DRAIN,
                                    EdgeKind.CALL)),
        TerminalErrorRef(call, ErrorCaptureId(ROOT, 1)),
        SpanEnd(call, 5, FunctionEndStatus.ERRORED, 4),
    ]  # fmt: skip
    folded = fold_execution(inputs(facts, [root_ctx, unknown, leaf, orphan]))
    errors = rows(folded, "errors_v1")
    assert [e["error_id"] for e in errors] == [error_id_wire(ROOT, n) for n in (1, 2, 10)]
    full, partial, overflowed = errors
    assert (full["stack"], full["stack_complete"]) == (
        ["app.Root", "function#99", "app.Leaf"], True,
    )  # fmt: skip
    assert (partial["stack"], partial["stack_complete"]) == (["app.Child"], False)
    assert (overflowed["stack"], overflowed["stack_complete"]) == (["app.Leaf"], False)
    assert overflowed["throw_call_path_id"] is None
    assert (full["kind"], full["source"], full["value_state"]) == (
        "rethrow", "native_call", "lost:cas_write_failed",
    )  # fmt: skip
    assert (full["throw_site_file"], full["throw_site_line"], full["throw_site_start"],
            full["throw_site_end"]) == ("app.baml", 4, 1, 2)  # fmt: skip
    assert full["terminal_call_ids"] == [call.wire()] and partial["terminal_call_ids"] == []
    (only,) = rows(folded, "calls_v1")
    assert only["error_id"] == full["error_id"]
    assert only["error_state"] == "lost:cas_write_failed" and only["error_cid"] is None


def test_synthetic_root_row_and_missing_stream_header() -> None:
    folded = fold_execution(inputs(the_process=process(started=False), table=None))
    (root,) = rows(folded, "threads_v1")
    assert (root["thread_id"], root["kind"], root["threads_total"]) == (ROOT.wire(), "root", 1)
    assert (root["started_ns"], root["started_at"], root["ended_at"]) == (100, None, None)
    assert (root["name"], root["entry_fqn"], root["value_state"]) == (None, None, "none")
    assert (root["process_id"], root["runtime_id"]) == (EUID.hex(), runtime_id_wire(b"\x0b" * 16))


def test_dangling_dependencies_are_reported() -> None:
    root_ctx = ctx(tup(1, edge=EdgeKind.ROOT))
    call = CallRef(ROOT, 1)
    facts = [
        SpanEnd(call, 5, FunctionEndStatus.OK, 4),  # before its SpanStart
        SpanStart(call, None, ROOT, NormalContext(root_ctx.key), 1, None, EdgeKind.ROOT, 1,
                  SELECT_ROOT, ROLE_INPUT),
    ]  # fmt: skip
    folded = fold_execution(inputs(facts, [root_ctx]))
    data = [(h["metric"], h["value"], h["reason"]) for h in rows(folded, "health_v1")
            if h["plane"] == "data"]  # fmt: skip
    assert data == [("data_state", 0, "incomplete"), ("data_issue", 1, "UnresolvedDependency")]
    undefined = [SpanStart(call, None, ROOT, NormalContext(b"\x05" * 32), 1, None, EdgeKind.ROOT,
                           1, SELECT_ROOT, 0)]  # fmt: skip
    folded = fold_execution(inputs(undefined, []))
    assert ("data_issue", 1, "UnresolvedDependency") in [
        (h["metric"], h["value"], h["reason"]) for h in rows(folded, "health_v1")
    ]


@settings(max_examples=60, deadline=None)
@given(executions())
def test_any_execution_folds_deterministically_into_its_schemas(execution: Any) -> None:
    folded = fold_execution(execution)
    check_schemas(folded)
    again = fold_execution(execution)
    assert all(ipc_bytes(folded[n]) == ipc_bytes(again[n]) for n in folded)
    threads = rows(folded, "threads_v1")
    assert sum(t["parent_thread_id"] is None for t in threads) == 1
    assert threads[0]["thread_id"] == threads[0]["execution_id"] == ROOT.wire()
    assert threads[0]["threads_total"] == len(threads)
    spans = {
        f.call for _, g in execution.data.groups for f in g.evidence if isinstance(f, SpanStart)
    }
    assert len(rows(folded, "calls_v1")) == len(spans) == threads[0]["calls_retained"]
    data = [h for h in rows(folded, "health_v1") if h["plane"] == "data"]
    assert data[0]["value"] == (len(data) == 1)
    assert (execution.meta.ended is None) <= any(h["reason"] == "NoRootEnded" for h in data)
    assert all(ThreadRef.parse_wire(t["thread_id"]).euid == EUID for t in threads)
