"""The workload plan: deterministic, seed-sensitive, split exactly across processes, and
honoured by the program itself (run here without a profiler)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import pytest

from baml_studio.profiler import active
from baml_studio.workload import (
    DECK_SIZE,
    InvalidWorkload,
    Variant,
    WorkloadReport,
    plan_workload,
    share,
)
from baml_studio.workload import runner as workload_runner
from baml_studio.workload.data import make_job


def test_same_seed_gives_the_same_report() -> None:
    first = plan_workload(120, processes=3, seed=7)
    second = plan_workload(120, processes=3, seed=7)
    assert first == second
    assert first.to_json_text() == second.to_json_text()


def test_different_seed_gives_a_different_report() -> None:
    a = plan_workload(60, seed=1)
    b = plan_workload(60, seed=2)
    assert [r.arguments for r in a.executions] != [r.arguments for r in b.executions]
    assert [r.variant for r in a.executions] != [r.variant for r in b.executions]


def test_executions_do_not_depend_on_the_process_count() -> None:
    one = plan_workload(100, processes=1, seed=3)
    four = plan_workload(100, processes=4, seed=3)

    def strip(report: WorkloadReport) -> list[tuple[object, ...]]:
        return [
            (r.ordinal, r.request_id, r.arguments, r.calls, r.status) for r in report.executions
        ]

    assert strip(one) == strip(four)
    assert Counter(r.process for r in four.executions) == {0: 25, 1: 25, 2: 25, 3: 25}


@pytest.mark.parametrize(("executions", "processes"), [(0, 1), (1, 3), (50, 2), (101, 4)])
def test_shares_cover_every_ordinal_once(executions: int, processes: int) -> None:
    ordinals = [o for i in range(processes) for o in share(executions, processes, i)]
    assert ordinals == list(range(executions))
    report = plan_workload(executions, processes)
    assert len(report.executions) == executions
    assert [r.ordinal for r in report.executions] == ordinals


def test_every_full_block_has_the_same_mix() -> None:
    report = plan_workload(2 * DECK_SIZE, seed=11)
    for block in (report.executions[:DECK_SIZE], report.executions[DECK_SIZE:]):
        statuses = Counter(r.status for r in block)
        assert statuses == {"succeeded": 46, "failed": 3, "cancelled": 1}
        variants = Counter(r.variant for r in block)
        assert variants[Variant.DIGEST_LONG_DOCUMENT.value] == 3
        assert sum(r.large_values for r in block) >= 3
    failed = [r for r in report.executions if r.status == "failed"]
    assert {r.error_type.rsplit(".", 1)[-1] for r in failed if r.error_type} == {
        "ExtractionError",
        "LineItemValidationError",
        "ProviderUnavailableError",
    }
    assert all(r.error_message for r in failed)


def test_report_json_has_records_and_totals() -> None:
    report = plan_workload(60, processes=2, seed=5)
    data = json.loads(report.to_json_text())
    assert data == report.to_json()
    assert data["processes"] == 2 and data["seed"] == 5
    assert len(data["executions"]) == 60 and data["totals"]["executions"] == 60
    totals = data["totals"]
    assert sum(totals["by_status"].values()) == 60
    assert totals["calls_by_function"] == report.calls_by_function
    roots = totals["calls_by_function"]
    assert sum(totals["by_root"].values()) == 60
    assert roots["ProcessInvoice"] + roots["TriageTicket"] + roots["DailyDigest"] == 60
    invoice = next(r for r in data["executions"] if r["root_function"] == "ProcessInvoice")
    assert invoice["arguments"]["invoice_id"].startswith("INV-")
    assert isinstance(invoice["arguments"]["customer_age"], int)
    assert invoice["arguments"]["customer_name"]


def test_jobs_are_pure_functions_of_seed_and_ordinal() -> None:
    assert make_job(9, 42) == make_job(9, 42)
    assert make_job(9, 42) != make_job(9, 43)


@pytest.mark.parametrize(
    ("executions", "processes", "concurrency"),
    [(-1, 1, 1), (10, 0, 1), (10, 1, 0)],
)
def test_bad_arguments_are_typed_errors(executions: int, processes: int, concurrency: int) -> None:
    with pytest.raises(InvalidWorkload, match="must be"):
        workload_runner.execute_workload(
            Path("unused"), executions, processes, concurrency=concurrency
        )


def test_the_program_ends_every_execution_as_planned_without_a_profiler() -> None:
    assert active() is None
    mismatches = asyncio.run(workload_runner._drive(13, range(3 * DECK_SIZE), concurrency=6))
    assert mismatches == []
