"""The query jobs file with a damaged row (edited by hand, or written by a buggy version): the
row fails only what reads it, with the store's typed error; the file still opens (the restart
rule leaves the row out), and the other jobs are read, failed on restart and expired."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baml_studio.coordinator.jobs_store import JobRecord, JobStore, JobStoreError
from baml_studio.gateway.config import Scope
from sqlite_damage import SQLITE_VALUES, damage_row

SCOPE = Scope("t", "p", "e")
NOW = 1_800_000_000.0
COLUMNS = (
    "tenant", "state", "phase", "fraction", "rows_so_far", "snapshot", "error", "created_at",
    "updated_at", "expires_at",
)  # fmt: skip


def job(job_id: str, state: str = "queued", expires_at: float = NOW + 3600) -> JobRecord:
    snapshot = {"snapshotId": "snap_1", "generation": "gen_1"}
    return JobRecord(
        job_id, SCOPE, "{}", None, state, "planning", 0.0, 0, snapshot, None, None,  # type: ignore[arg-type]
        NOW, NOW, expires_at,
    )  # fmt: skip


def damage(path: Path, job_id: str, column: str, value: object) -> None:
    damage_row(path, "query_jobs", ("job_id", job_id), column, value)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(column=st.sampled_from(COLUMNS), value=SQLITE_VALUES)
def test_fuzz_a_damaged_row_fails_only_what_reads_it(
    tmp_path_factory: pytest.TempPathFactory, column: str, value: object
) -> None:
    path = tmp_path_factory.mktemp("jobs") / "jobs.sqlite"
    store = JobStore(path, clock=lambda: NOW)
    for record in (job("job_damaged"), job("job_queued"), job("job_old", "succeeded", NOW - 1)):
        store.insert(record)
    store.close()
    damage(path, "job_damaged", column, value)
    reopened = JobStore(path, clock=lambda: NOW)  # the restart rule reads every queued job
    try:
        assert "job_queued" in {r.job_id for r in reopened.recovered}
        try:
            record = reopened.get("job_damaged")
        except JobStoreError as exc:
            assert "'job_damaged' cannot be read" in str(exc)
            assert exc.status == 500
        else:
            assert record is not None
            record.to_json()
        queued = reopened.get("job_queued")
        assert queued is not None and queued.state == "failed"
        assert "job_old" in {r.job_id for r in reopened.expired(NOW)}
    finally:
        reopened.close()


def test_a_damaged_queued_job_used_to_stop_the_store_opening(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite"
    store = JobStore(path, clock=lambda: NOW)
    store.insert(job("job_damaged"))
    store.insert(job("job_queued"))
    store.close()
    damage(path, "job_damaged", "snapshot", "{not json")
    reopened = JobStore(path, clock=lambda: NOW)
    try:
        assert [r.job_id for r in reopened.recovered] == ["job_queued"]
        with pytest.raises(JobStoreError, match=r"'job_damaged' cannot be read.*JSONDecodeError"):
            reopened.get("job_damaged")
    finally:
        reopened.close()
