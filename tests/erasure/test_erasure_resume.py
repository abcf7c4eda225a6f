"""An erasure stopped at any point resumes and finishes correctly: after each step (the process
dies right after the step is recorded), in the middle of the bucket step, and with a real
SIGKILL between the bucket step and the facts step. Transient failures are retried; terminal
ones fail the erasure with a typed error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from erasure_rig import FAST, assert_gone, carrier, erasure_rig, euid_body, open_manager
from projector_fixtures import SCOPE, workload_store

from baml_studio.control.identity import TokenIssuer
from baml_studio.erasure.selector import parse_selector
from baml_studio.erasure.store import STEPS
from baml_studio.projector.errors import ControlPlaneRefused, ControlPlaneUnavailable

__all__ = ["workload_store"]

HERE = Path(__file__).resolve().parent


class Crash(BaseException):
    """The process dies here (nothing after it runs, nothing is recorded)."""


def crash_after(step: str) -> Any:
    def hook(erasure_id: str, done: str) -> None:
        if done == step:
            raise Crash(done)

    return hook


@pytest.mark.parametrize("step", STEPS[:-2])  # after verify it has already succeeded
def test_a_crash_after_any_step_resumes_there_and_finishes(
    tmp_path: Path, chdb_dsn: str, workload_store: Path, step: str
) -> None:
    hook = crash_after(step)
    with erasure_rig(tmp_path, chdb_dsn, [workload_store], after_step=hook, start=False) as rig:
        packs, _other = carrier(rig, rig.streams)
        created, _ = rig.manager.create(
            SCOPE, parse_selector(euid_body(packs), max_items=10), "k-1"
        )
        with pytest.raises(Crash):
            rig.manager.run_pending()
        record = rig.manager.record(created["erasure_id"])
        assert record is not None and record.state == "running"
        assert record.step == STEPS[STEPS.index(step) + 1]  # recorded before the crash

        resumed = rig.reopen()  # a new process: the erasure resumes at its recorded step
        record = resumed.wait(created["erasure_id"], 120)
        assert record.state == "succeeded", record.error
        assert record.to_json()["streams_deleted"] == 1
        assert_gone(rig, [packs])


class CrashingStore:
    """The bucket, dying at the ``at``-th delete."""

    def __init__(self, inner: Any, at: int) -> None:
        self._inner, self._at, self.deletes = inner, at, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def delete(self, key: str, *, all_versions: bool = True) -> None:
        self.deletes += 1
        if self.deletes == self._at:
            raise Crash(key)
        self._inner.delete(key, all_versions=all_versions)


def test_a_crash_in_the_middle_of_the_bucket_step_resumes_and_finishes(
    tmp_path: Path, chdb_dsn: str, workload_store: Path
) -> None:
    with erasure_rig(tmp_path, chdb_dsn, [workload_store], start=False) as rig:
        packs, _other = carrier(rig, rig.streams)
        rig.manager.close()
        crashing = CrashingStore(rig.bucket, at=3)
        rig.manager = open_manager(rig, start=False)
        rig.manager._objects = crashing  # reason: inject the crash at the port
        created, _ = rig.manager.create(SCOPE, parse_selector(euid_body(packs), max_items=10), "k")
        with pytest.raises(Crash):
            rig.manager.run_pending()
        assert crashing.deletes == 3
        record = rig.manager.record(created["erasure_id"])
        assert record is not None and record.step == "delete_objects"
        resumed = rig.reopen()
        assert resumed.wait(created["erasure_id"], 120).state == "succeeded"
        assert_gone(rig, [packs])


def test_sigkill_between_the_bucket_and_the_facts_resumes_and_finishes(
    tmp_path: Path, chdb_dsn: str, workload_store: Path
) -> None:
    with erasure_rig(tmp_path, chdb_dsn, [workload_store], start=False) as rig:
        _packs, other = carrier(rig, rig.streams)
        created, _ = rig.manager.create(SCOPE, parse_selector(euid_body(other), max_items=10), "k")
        rig.manager.close()
        ingest = rig.ingest
        token = (
            TokenIssuer(ingest.control.keys, ingest.control.metastore)
            .issue_workload(SCOPE.tenant, "dep_proj", "cell-1")
            .token
        )
        child = subprocess.run(
            [sys.executable, str(HERE / "erasure_kill_worker.py"), str(tmp_path / "dataplane"),
             ingest.client._base, ingest.private.root_uri, str(tmp_path / "erasures"),
             "delete_objects"],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "BAML_WORKLOAD_TOKEN": token},
        )  # fmt: skip
        assert child.returncode == -9, child.stderr
        assert json.loads(child.stdout) == {
            "killing": created["erasure_id"],
            "after": "delete_objects",
        }
        assert (
            rig.keys(
                f"evidence/v1/{SCOPE.tenant}/{SCOPE.project}/{SCOPE.environment}/streams/{other.euid}/"
            )
            == set()
        )
        assert other.executions <= rig.fact_roots()  # killed before step 2

        resumed = rig.reopen()
        record = resumed.wait(created["erasure_id"], 120)
        assert record.state == "succeeded", record.error
        assert_gone(rig, [other])


def test_transient_failures_are_retried_and_a_refusal_fails_the_erasure(
    tmp_path: Path, chdb_dsn: str, workload_store: Path
) -> None:
    with erasure_rig(tmp_path, chdb_dsn, [workload_store], start=False) as rig:
        packs, other = carrier(rig, rig.streams)
        client = rig.ingest.client
        original = client.erase_roots
        failures = [ControlPlaneUnavailable("down"), ControlPlaneUnavailable("still down")]

        def flaky(*args: Any, **kwargs: Any) -> Any:
            if failures:
                raise failures.pop(0)
            return original(*args, **kwargs)

        client.erase_roots = flaky  # type: ignore[method-assign]
        try:
            rig.reopen(config=FAST)
            created, _ = rig.manager.create(
                SCOPE, parse_selector(euid_body(other), max_items=10), "k-1"
            )
            record = rig.manager.wait(created["erasure_id"], 120)
            assert record.state == "succeeded" and not failures
            assert record.last_error is not None and "still down" in record.last_error
            assert_gone(rig, [other])

            def refuse(*args: Any, **kwargs: Any) -> Any:
                raise ControlPlaneRefused("no", status=403, code="scope_forbidden")

            client.erase_roots = refuse  # type: ignore[method-assign]
            created, _ = rig.manager.create(
                SCOPE, parse_selector(euid_body(packs), max_items=10), "k-2"
            )
            record = rig.manager.wait(created["erasure_id"], 120)
            assert record.state == "failed" and record.step == "erase_facts"
            error = record.to_json()["error"]
            assert (
                error["code"] == "erasure_step_failed" and "ControlPlaneRefused" in error["message"]
            )
            assert error["retryable"] is False

            client.erase_roots = original  # type: ignore[method-assign]
            again, created_again = rig.manager.create(
                SCOPE, parse_selector(euid_body(packs), max_items=10), "k-3"
            )  # the stream's objects are gone, but the earlier erasure makes it known
            assert created_again
            record = rig.manager.wait(again["erasure_id"], 120)
            assert record.state == "succeeded", record.error
            assert_gone(rig, [packs, other])
        finally:
            client.erase_roots = original  # type: ignore[method-assign]
