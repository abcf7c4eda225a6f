"""Running the workload through the real profiler: the store holds exactly what the report says."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pytest
from workload_store_view import StoreView, load

from baml_studio.format.records import RootStatus
from baml_studio.profiler import Profiler, ProfilerConfig, active
from baml_studio.workload import (
    LARGE_VALUE_BYTES,
    WorkloadError,
    WorkloadRun,
    execute_workload,
    plan_workload,
)

STATUS = {
    RootStatus.SUCCEEDED: "succeeded",
    RootStatus.FAILED: "failed",
    RootStatus.CANCELLED: "cancelled",
}


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[WorkloadRun, StoreView]:
    root = tmp_path_factory.mktemp("workload") / "project" / ".baml" / "profiles-v1"
    run = execute_workload(root, executions=50, processes=2, seed=4, publish_interval_s=0.05)
    return run, load(root, large_bytes=LARGE_VALUE_BYTES)


def test_the_run_returns_the_planned_report(two_process_run: tuple[WorkloadRun, StoreView]):
    run, _ = two_process_run
    assert run.report == plan_workload(50, processes=2, seed=4)
    assert [p.executions for p in run.processes] == [25, 25]
    assert len({p.pid for p in run.processes}) == 2
    stats = run.stats
    for loss in ("internal_errors", "events_dropped", "roots_dropped", "meta_batch_lost",
                 "root_ended_lost", "data_segments_lost", "cas_lost"):  # fmt: skip
        assert stats[loss] == 0, loss


def test_every_file_is_intact(two_process_run: tuple[WorkloadRun, StoreView]) -> None:
    _, view = two_process_run
    assert view.scan.corruptions == ()
    assert len(view.scan.streams) == 2
    assert not any(stream.alive for stream in view.scan.streams)
    assert all(not s.meta_gaps and not s.data_gaps for s in view.scan.streams)
    assert view.scan.cas_objects > 0


def test_exactly_the_planned_executions_each_started_and_ended(
    two_process_run: tuple[WorkloadRun, StoreView],
) -> None:
    run, view = two_process_run
    assert len(view.scan.executions) == 50
    assert all(e.started is not None and e.ended is not None for e in view.scan.executions)
    by_request = view.by_request_id()
    records = {r.request_id: r for r in run.report.executions}
    assert by_request.keys() == records.keys()
    streams_of_process: dict[int, set[bytes]] = defaultdict(set)
    for request_id, record in records.items():
        execution = by_request[request_id]
        assert STATUS[execution.status] == record.status, request_id
        assert execution.root_input is not None
        assert execution.root_input["request_id"] == request_id
        streams_of_process[record.process].add(execution.root.euid)
    assert all(len(euids) == 1 for euids in streams_of_process.values())
    assert len(set().union(*streams_of_process.values())) == 2


def test_statuses_and_errors_match_the_report(
    two_process_run: tuple[WorkloadRun, StoreView],
) -> None:
    run, view = two_process_run
    counted = Counter(STATUS[e.status] for e in view.executions.values())
    assert counted == run.report.executions_by_status
    assert counted["failed"] >= 1 and counted["cancelled"] >= 1
    by_request = view.by_request_id()
    for record in run.report.executions:
        error = by_request[record.request_id].root_error
        if record.status == "failed":
            assert error is not None, record.request_id
            assert error["type"] == record.error_type
            assert error["message"] == record.error_message
        else:
            assert error is None, record.request_id


def test_call_totals_per_function_match_the_report(
    two_process_run: tuple[WorkloadRun, StoreView],
) -> None:
    run, view = two_process_run
    assert view.calls_by_function() == run.report.calls_by_function
    by_request = view.by_request_id()
    for record in run.report.executions:
        assert dict(by_request[record.request_id].calls) == dict(record.calls)


def test_large_values_are_cas_objects(two_process_run: tuple[WorkloadRun, StoreView]) -> None:
    run, view = two_process_run
    assert run.report.large_values >= 1
    large = [size for size in view.value_sizes if size > LARGE_VALUE_BYTES]
    assert len(large) >= run.report.large_values
    assert view.large_cas_files, "no CAS object over 32 KiB"


def test_arguments_in_the_report_are_the_captured_ones(
    two_process_run: tuple[WorkloadRun, StoreView],
) -> None:
    run, view = two_process_run
    by_request = view.by_request_id()
    for record in run.report.executions:
        captured = by_request[record.request_id].root_input
        assert captured is not None
        if record.root_function == "ProcessInvoice":
            assert record.arguments["invoice_id"] in captured["document"]
            assert captured["customer_id"] == record.arguments["customer_id"]
        elif record.root_function == "TriageTicket":
            assert captured["ticket"]["ticket_id"] == record.arguments["ticket_id"]
            assert captured["ticket"]["priority"] == record.arguments["priority"].upper()
        else:
            assert len(captured["documents"]) == record.arguments["documents"]


def test_single_process_runs_in_process_and_restores_no_profiler(tmp_path: Path) -> None:
    root = tmp_path / ".baml" / "profiles-v1"
    run = execute_workload(root, executions=12, seed=8, publish_interval_s=0.05)
    assert active() is None
    view = load(root, large_bytes=LARGE_VALUE_BYTES)
    assert len(view.scan.executions) == 12
    assert view.calls_by_function() == run.report.calls_by_function


def test_refuses_to_replace_an_active_profiler(tmp_path: Path) -> None:
    profiler = Profiler(ProfilerConfig(store_root=tmp_path / "other" / "profiles-v1"))
    profiler.activate()
    try:
        with pytest.raises(WorkloadError, match="already active"):
            execute_workload(tmp_path / "profiles-v1", executions=1)
    finally:
        profiler.close()
