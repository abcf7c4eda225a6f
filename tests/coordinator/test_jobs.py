"""JobManager: the life of a background query job over a fake run and a directory bucket."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_jobs_fakes import (
    BASE,
    SNAPSHOT,
    FakeRun,
    Rig,
    bucket,
    check_schema,
    job_rig,
    query,
    user,
    wait_for,
)

from baml_studio.apierrors import (
    BadRequest,
    Conflict,
    DependencyUnavailable,
    NotFound,
    TooManyRequests,
)
from baml_studio.coordinator.jobs_store import JobStore
from baml_studio.objectstore.errors import ObjectNotFound, ObjectStoreUnavailable

JOB_ID = re.compile(r"job_[0-9A-HJKMNP-TV-Z]{26}")
RFC3339_Z = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    with job_rig(tmp_path) as built:
        yield built


def state_of(rig: Rig, job_id: str, identity: Any = None) -> str:
    return str(rig.manager.get(job_id, identity or user())["state"])


def wait_state(rig: Rig, job_id: str, state: str) -> dict[str, Any]:
    return wait_for(
        lambda: (job := rig.manager.get(job_id, user(), base_url=BASE))["state"] == state and job
    )


def held_and_queued(rig: Rig, hold_at: int) -> tuple[FakeRun, FakeRun, str, str]:
    """On a one-worker rig: a job whose run holds at row ``hold_at``, then a second job queued
    behind it; their runs and their job ids."""
    held, waiting = FakeRun(hold_at=hold_at), FakeRun()
    rig.start.queued += [held, waiting]
    first, _ = rig.manager.create(query(), user(), "prod")
    held.holding.wait(10)
    second, _ = rig.manager.create(query("SELECT 2"), user(), "prod")
    return held, waiting, first["job_id"], second["job_id"]


def result_key(job_id: str) -> str:
    return f"tmp/query-results/t1/p1/prod/{job_id}.ndjson"


def test_create_runs_to_success_and_stores_the_lines(rig: Rig) -> None:
    run = FakeRun(rows=5, hold_at=2)
    rig.start.queued.append(run)
    job, created = rig.manager.create(query(), user(), "prod", base_url=BASE)
    assert created and job["state"] == "queued"
    assert JOB_ID.fullmatch(job["job_id"]) and job["snapshot"] == SNAPSHOT
    assert job["progress"] == {"phase": "planning", "fraction": 0.0} and job["rows_so_far"] == 0
    assert "result_url" not in job and "error" not in job
    check_schema("QueryJob", job)
    run.holding.wait(10)
    running = rig.manager.get(job["job_id"], user(), base_url=BASE)
    assert running["state"] == "running" and running["rows_so_far"] == 2
    assert running["progress"] == {"phase": "private", "fraction": 0.4}
    check_schema("QueryJob", running)
    run.release()
    done = wait_state(rig, job["job_id"], "succeeded")
    check_schema("QueryJob", done)
    assert done["result_url"] == f"{BASE}/v1/query-jobs/{job['job_id']}/result"
    assert done["rows_so_far"] == 5 and done["progress"] == {"phase": "writing", "fraction": 1.0}
    for stamp in ("created_at", "updated_at", "expires_at"):
        assert RFC3339_Z.fullmatch(done[stamp])
    body = b"".join(rig.manager.result(job["job_id"], user()))
    assert body == run.result_bytes() and body.count(b"\n") == 6
    assert rig.objects.get(result_key(job["job_id"])) == body


def test_the_start_receives_a_normalised_background_request(rig: Rig) -> None:
    rig.manager.create(query(mode="interactive"), user(), "prod")
    request, identity = rig.start.calls[0]
    assert request.mode == "background" and request.environment_id == "prod"
    assert identity == user()


def test_progress_is_persisted_while_running(tmp_path: Path) -> None:
    with job_rig(tmp_path, progress_every_rows=2, progress_interval_s=3600) as rig:
        run = FakeRun(rows=10, hold_at=4)
        rig.start.queued.append(run)
        job, _ = rig.manager.create(query(), user(), "prod")
        run.holding.wait(10)
        stored = wait_for(lambda: (r := rig.store.get(job["job_id"])) and r.rows_so_far == 4 and r)
        assert stored.state == "running" and stored.phase == "private" and stored.fraction == 0.4


def test_a_refused_start_stores_no_job(rig: Rig) -> None:
    rig.start.refuse = BadRequest("syntax error near FROM", code="invalid_sql")
    with pytest.raises(BadRequest) as refused:
        rig.manager.create(query(), user(), "prod", "key-1")
    assert refused.value.code == "invalid_sql"
    assert rig.store.expired(float("inf")) == []


def test_idempotency_key_returns_the_same_job(rig: Rig) -> None:
    first, created = rig.manager.create(query(), user(), "prod", "key-1")
    again, created_again = rig.manager.create(query(environment_id="prod"), user(), "prod", "key-1")
    assert created and not created_again
    assert again["job_id"] == first["job_id"] and len(rig.start.calls) == 1


def test_idempotency_key_with_another_request_conflicts(rig: Rig) -> None:
    first, _ = rig.manager.create(query(), user(), "prod", "key-1")
    with pytest.raises(Conflict) as conflict:
        rig.manager.create(query("SELECT 2"), user(), "prod", "key-1")
    assert conflict.value.code == "idempotency_key_reused" and conflict.value.status == 409
    assert conflict.value.details == {"job_id": first["job_id"]}


def test_idempotency_key_is_per_scope(rig: Rig) -> None:
    both = user(environments=("prod", "dev"))
    prod, _ = rig.manager.create(query(), both, "prod", "key-1")
    dev, created = rig.manager.create(query(), both, "dev", "key-1")
    other, created_other = rig.manager.create(query(), user(tenant="t2"), "prod", "key-1")
    assert created and created_other
    assert len({prod["job_id"], dev["job_id"], other["job_id"]}) == 3


def test_cancel_a_queued_job_it_never_starts(tmp_path: Path) -> None:
    with job_rig(tmp_path, workers=1) as rig:
        blocker, waiting, first, second = held_and_queued(rig, hold_at=0)
        assert state_of(rig, second) == "queued"
        cancelled = rig.manager.cancel(second, user())
        assert cancelled["state"] == "cancelled" and waiting.cancelled.is_set()
        blocker.release()
        wait_state(rig, first, "succeeded")
        rig.manager.close()
        assert not waiting.started.is_set()
        assert state_of(rig, second) == "cancelled"


def test_a_queued_jobs_snapshot_stays_leased_while_it_waits(tmp_path: Path) -> None:
    """The reaper renews the lease of every queued run; a running one renews its own when it
    starts (``Run.lines``), a cancelled one is no longer kept, and a failed renewal is counted
    and retried without stopping the reaper."""
    with job_rig(tmp_path, workers=1, keep_interval_s=0.01) as rig:
        blocker, waiting, first, second = held_and_queued(rig, hold_at=0)
        running_kept = blocker.kept  # running: the reaper keeps it no more
        wait_for(lambda: waiting.kept >= 3)
        assert blocker.kept == running_kept
        waiting.keep_error = DependencyUnavailable("the lease store is down")
        wait_for(lambda: rig.manager.keep_failures >= 2)
        waiting.keep_error = None
        kept = waiting.kept
        wait_for(lambda: waiting.kept > kept)
        rig.manager.cancel(second, user())
        after_cancel = waiting.kept
        assert rig.manager.keep_waiting() == 0
        assert waiting.kept == after_cancel
        blocker.release()
        wait_state(rig, first, "succeeded")


def test_cancel_a_running_job(rig: Rig) -> None:
    run = FakeRun(rows=5, hold_at=2)
    rig.start.queued.append(run)
    job, _ = rig.manager.create(query(), user(), "prod")
    run.holding.wait(10)
    cancelled = rig.manager.cancel(job["job_id"], user(), base_url=BASE)
    assert cancelled["state"] == "cancelled" and cancelled["rows_so_far"] == 2
    assert "error" not in cancelled and "result_url" not in cancelled
    check_schema("QueryJob", cancelled)
    outcome = wait_for(run.outcome)
    assert outcome["resultState"] == "cancelled"
    rig.manager.close()
    assert state_of(rig, job["job_id"]) == "cancelled"
    assert list(rig.objects.list("tmp/")) == []
    with pytest.raises(Conflict):
        rig.manager.result(job["job_id"], user())


def test_cancel_a_final_job_returns_it_unchanged(rig: Rig) -> None:
    job, _ = rig.manager.create(query(), user(), "prod")
    done = wait_state(rig, job["job_id"], "succeeded")
    rig.clock.now += 5
    assert rig.manager.cancel(job["job_id"], user(), base_url=BASE) == done
    assert rig.manager.cancel(job["job_id"], user(), base_url=BASE) == done


def test_result_before_success_is_409(rig: Rig) -> None:
    run = FakeRun(hold_at=0)
    rig.start.queued.append(run)
    job, _ = rig.manager.create(query(), user(), "prod")
    with pytest.raises(Conflict) as early:
        rig.manager.result(job["job_id"], user())
    assert early.value.code == "job_not_succeeded" and early.value.status == 409


@pytest.mark.parametrize(
    ("result_state", "error", "expected"),
    [
        (
            "failed",
            {"code": "resident_query_failed", "message": "ClickHouse said no", "retryable": True},
            {"code": "resident_query_failed", "message": "ClickHouse said no", "retryable": True},
        ),
        (
            "budget_exhausted",
            {
                "code": "budget_exhausted",
                "message": "max_wall_ms reached",
                "retryable": False,
                "remedy": "raise budget.max_wall_ms",
            },
            {
                "code": "budget_exhausted",
                "message": "max_wall_ms reached",
                "retryable": False,
                "remedy": "raise budget.max_wall_ms",
            },
        ),
        (
            "budget_exhausted",
            None,
            {"code": "budget_exhausted", "message": "the query ended budget_exhausted"},
        ),
    ],
)
def test_a_failed_run_fails_the_job(
    rig: Rig, result_state: str, error: dict[str, Any] | None, expected: dict[str, Any]
) -> None:
    rig.start.queued.append(FakeRun(rows=2, result_state=result_state, error=error))
    job, _ = rig.manager.create(query(), user(), "prod")
    failed = wait_state(rig, job["job_id"], "failed")
    check_schema("QueryJob", failed)
    assert failed["error"] == {"retryable": False, **expected}
    assert "result_url" not in failed and failed["rows_so_far"] == 2
    with pytest.raises(Conflict) as not_yet:
        rig.manager.result(job["job_id"], user())
    assert not_yet.value.details == {"state": "failed"}
    assert list(rig.objects.list("tmp/")) == []


def test_an_incomplete_run_succeeds(rig: Rig) -> None:
    run = FakeRun(rows=1, result_state="incomplete")
    rig.start.queued.append(run)
    job, _ = rig.manager.create(query(), user(), "prod")
    wait_state(rig, job["job_id"], "succeeded")
    assert b"".join(rig.manager.result(job["job_id"], user())) == run.result_bytes()


@pytest.mark.parametrize(
    "stranger",
    [
        user(tenant="t2"),
        user(project="p2"),
        user(environments=("dev",)),
    ],
)
def test_another_scope_sees_404(rig: Rig, stranger: Any) -> None:
    job, _ = rig.manager.create(query(), user(), "prod")
    wait_state(rig, job["job_id"], "succeeded")
    for call in (rig.manager.get, rig.manager.cancel, rig.manager.result):
        with pytest.raises(NotFound) as hidden:
            call(job["job_id"], stranger)
        assert job["job_id"] in hidden.value.message and hidden.value.code == "job_not_found"
    with pytest.raises(NotFound) as unknown:
        rig.manager.get("job_01J8ZK5C3D4E5F6G7H8J9K0M1N", user())
    assert unknown.value.message.replace("job_01J8ZK5C3D4E5F6G7H8J9K0M1N", job["job_id"]) == (
        hidden.value.message
    )
    assert state_of(rig, job["job_id"]) == "succeeded"


def test_expiry_removes_the_record_and_the_object(rig: Rig) -> None:
    job, _ = rig.manager.create(query(), user(), "prod")
    wait_state(rig, job["job_id"], "succeeded")
    key = result_key(job["job_id"])
    assert rig.objects.head(key).size > 0
    rig.clock.now += 24 * 3600 - 1
    assert rig.manager.purge_expired() == 0
    rig.clock.now += 1
    with pytest.raises(NotFound):
        rig.manager.get(job["job_id"], user())
    assert rig.store.get(job["job_id"]) is None
    with pytest.raises(ObjectNotFound):
        rig.objects.head(key)


def test_the_reaper_thread_expires_jobs(tmp_path: Path) -> None:
    with job_rig(tmp_path, reap_interval_s=0.01, ttl_s=60) as rig:
        job, _ = rig.manager.create(query(), user(), "prod", "key-1")
        wait_state(rig, job["job_id"], "succeeded")
        rig.clock.now += 60
        wait_for(lambda: rig.store.get(job["job_id"]) is None)
        with pytest.raises(ObjectNotFound):
            rig.objects.head(result_key(job["job_id"]))
        again, created = rig.manager.create(query(), user(), "prod", "key-1")
        assert created and again["job_id"] != job["job_id"]


def test_expiry_cancels_a_job_still_running(tmp_path: Path) -> None:
    with job_rig(tmp_path, ttl_s=60) as rig:
        run = FakeRun(hold_at=1)
        rig.start.queued.append(run)
        job, _ = rig.manager.create(query(), user(), "prod")
        run.holding.wait(10)
        rig.clock.now += 60
        assert rig.manager.purge_expired() == 1
        assert run.cancelled.is_set()
        rig.manager.close()
        assert rig.store.get(job["job_id"]) is None
        assert list(rig.objects.list("tmp/")) == []


def test_restart_fails_queued_and_running_jobs(tmp_path: Path) -> None:
    with job_rig(tmp_path, workers=1) as rig:
        running, _, first, second = held_and_queued(rig, hold_at=1)
        reopened = JobStore(rig.path, clock=rig.clock)  # what the next process does
        try:
            assert {r.job_id for r in reopened.recovered} == {first, second}
            for job_id in (first, second):
                record = reopened.get(job_id)
                assert record is not None and record.state == "failed"
                assert record.error is not None and record.error["code"] == "coordinator_restarted"
                assert (
                    record.error["retryable"] is True
                    and "POST /v1/query-jobs" in (record.error["remedy"])
                )
                check_schema("QueryJob", record.to_json(BASE))
            running.release()
            rig.manager.close()  # the old process's late workers cannot move a failed job
            assert rig.store.get(first).state == "failed"  # type: ignore[union-attr]
            assert list(rig.objects.list("tmp/")) == []
        finally:
            reopened.close()


def test_close_cancels_running_jobs(rig: Rig) -> None:
    run = FakeRun(hold_at=1)
    rig.start.queued.append(run)
    job, _ = rig.manager.create(query(), user(), "prod")
    run.holding.wait(10)
    rig.manager.close()
    assert state_of(rig, job["job_id"]) == "cancelled"
    assert run.outcome() is not None and run.outcome()["resultState"] == "cancelled"  # type: ignore[index]


def test_too_many_pending_jobs_is_429(tmp_path: Path) -> None:
    with job_rig(tmp_path, max_pending=1) as rig:
        run = FakeRun(hold_at=0)
        rig.start.queued.append(run)
        rig.manager.create(query(), user(), "prod")
        with pytest.raises(TooManyRequests) as busy:
            rig.manager.create(query("SELECT 2"), user(), "prod")
        assert busy.value.retryable and busy.value.code == "too_many_jobs"
        assert len(rig.start.calls) == 1


class GatedPuts:
    """A bucket whose ``put_if_absent`` waits for ``proceed`` (or fails with ``failure``)."""

    def __init__(self, inner: Any, failure: Exception | None = None) -> None:
        self.inner, self.failure = inner, failure
        self.putting, self.proceed = threading.Event(), threading.Event()

    def put_if_absent(self, key: str, data: bytes, sha256: str) -> Any:
        self.putting.set()
        self.proceed.wait(10)
        if self.failure is not None:
            raise self.failure
        return self.inner.put_if_absent(key, data, sha256)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_cancel_during_the_upload_wins_and_the_object_is_removed(tmp_path: Path) -> None:
    gated = GatedPuts(bucket(tmp_path))
    with job_rig(tmp_path, objects=gated) as rig:
        job, _ = rig.manager.create(query(), user(), "prod")
        gated.putting.wait(10)
        assert rig.manager.cancel(job["job_id"], user())["state"] == "cancelled"
        gated.proceed.set()
        rig.manager.close()
        assert state_of(rig, job["job_id"]) == "cancelled"
        assert list(rig.objects.list("tmp/")) == []


def test_a_failed_upload_fails_the_job_retryable(tmp_path: Path) -> None:
    gated = GatedPuts(bucket(tmp_path), ObjectStoreUnavailable("bucket down"))
    gated.proceed.set()
    with job_rig(tmp_path, objects=gated) as rig:
        job, _ = rig.manager.create(query(), user(), "prod")
        failed = wait_state(rig, job["job_id"], "failed")
        assert failed["error"]["code"] == "result_write_failed"
        assert failed["error"]["retryable"] is True and "bucket down" in failed["error"]["message"]


def test_concurrent_creates_with_one_key_make_one_job(rig: Rig) -> None:
    barrier = threading.Barrier(8)
    answers: list[str] = []

    def create() -> None:
        barrier.wait()
        job, _ = rig.manager.create(query(), user(), "prod", "key-1")
        answers.append(job["job_id"])

    threads = [threading.Thread(target=create) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 8 and len(set(answers)) == 1
    losers = [run for run in rig.start.runs if run.cancelled.is_set()]
    assert len(losers) == len(rig.start.runs) - 1
