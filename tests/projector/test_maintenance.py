"""Scheduled maintenance (``projector.maintenance`` and the Lambda ``maintenance_handler``): the
sweep and the compaction of every discovered scope in one invocation, the schedule's input
choosing tasks and scopes (fuzzed), a failing scope reported and the invocation failed after
the others ran."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from killed_profiler import abandoned_ids, killed_store
from projector_control_rig import closed_port_url
from projector_e2e_rig import ingest_path
from projector_fixtures import SCOPE
from projector_service_rig import control_endpoint, projector_config

from baml_studio.gateway.config import Scope
from baml_studio.projector.lambda_handler import (
    LambdaEventInvalid,
    MaintenanceEntryPoint,
    parse_maintenance_event,
)
from baml_studio.projector.maintenance import (
    OUT_OF_TIME,
    TASKS,
    MaintenanceIncomplete,
    run_maintenance,
)
from baml_studio.projector.service import Projector, open_projector
from baml_studio.projector.worker import WorkerConfig

__all__ = ["killed_store"]


class Context:
    """The part of the Lambda context the maintenance handler reads."""

    def __init__(self, remaining_ms: int) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


LABEL = f"{SCOPE.tenant}/{SCOPE.project}/{SCOPE.environment}"
SCHEDULED = {  # what an EventBridge rule on a schedule delivers
    "version": "0",
    "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
    "detail-type": "Scheduled Event",
    "source": "aws.events",
    "account": "123456789012",
    "time": "2026-12-05T08:00:00Z",
    "region": "us-east-1",
    "resources": ["arn:aws:events:us-east-1:123456789012:rule/baml-maintenance"],
    "detail": {},
}


def test_a_scheduled_event_sweeps_and_compacts_every_scope(
    tmp_path: Path, chdb_dsn: str, fact_database: str, killed_store: Path
) -> None:
    with (
        ingest_path(tmp_path, chdb_dsn, fact_database, killed_store) as ingest,
        control_endpoint(ingest) as (url, token),
    ):
        stuck = abandoned_ids(ingest.store_root)
        assert len(stuck) == 1
        config = projector_config(
            tmp_path, url, token, silence_limit_s=0.0, worker=WorkerConfig(retry_backoff_s=(0,))
        )
        opens: list[Projector] = []

        def open_once() -> Projector:
            opens.append(open_projector(config))
            opens[-1].worker().drain()  # the ended roots projected, the packs ingested
            return opens[-1]

        handler = MaintenanceEntryPoint(open_once)
        try:
            time.sleep(0.01)  # the stream's newest record is now older than the 0 s limit
            first = handler(SCHEDULED, None)
            (swept,) = first["sweep"]
            assert swept["scope"] == LABEL and swept["swept"] == stuck and swept["batches"] > 0
            (compacted,) = first["compact"]["scopes"]
            assert compacted["error"] is None and not compacted["skipped"]
            assert {d["name"] for d in compacted["datasets"]} >= {"projected_v1", "threads_v1"}
            assert first["failed"] == []
            store = opens[0].private_store(SCOPE)
            assert store.projected(stuck) == set(stuck)

            again = handler({"tasks": ["sweep"], "scopes": [LABEL]}, None)
            assert again["sweep"][0]["swept"] == [] and again["sweep"][0]["already_projected"] == 1
            assert again["compact"] is None

            only = handler({"tasks": ["compact"]}, None)
            assert only["sweep"] == [] and only["compact"]["failed"] == 0
            assert len(opens) == 1  # opened once, kept for the later invocations
        finally:
            handler.close()


def test_a_failing_scope_fails_the_invocation_after_the_others_ran(
    tmp_path: Path, chdb_dsn: str, fact_database: str, killed_store: Path
) -> None:
    with ingest_path(tmp_path, chdb_dsn, fact_database, killed_store):
        config = projector_config(tmp_path, closed_port_url(), "token", silence_limit_s=0.0)
        projector = open_projector(config)
        try:
            projector.worker().drain()  # the packs ingested; the meta objects wait for a retry
            time.sleep(0.01)
            other = Scope("tn_other", "prj_other", "env_other")  # nothing there: nothing to do
            report = run_maintenance(projector, TASKS, [SCOPE, other])
            failed = {(task, scope) for task, scope, _ in report.failures}
            assert failed == {("sweep", LABEL)}  # the control plane is down
            assert [r.scope for r in report.sweeps] == [other]
            assert report.compaction is not None  # ran after the failed sweep
            compacted = {s.scope: s for s in report.compaction.scopes}
            assert compacted[other].skipped and compacted[SCOPE].datasets  # the ingested packs
            assert compacted[SCOPE].error is None
            with pytest.raises(ValueError, match="unknown maintenance tasks"):
                run_maintenance(projector, ["vacuum"])

            def after_one() -> Callable[[], bool]:
                """A time limit reached once the first scope has started."""
                asked: list[int] = []

                def stop() -> bool:
                    asked.append(1)
                    return len(asked) > 1

                return stop

            rotated = run_maintenance(
                projector, ["sweep"], [SCOPE, other], rotate=1, stop=after_one()
            )
            assert [(s, e == OUT_OF_TIME) for _, s, e in rotated.failures] == [
                (LABEL, False),  # rotated by one: SCOPE first (its sweep failed)
                ("tn_other/prj_other/env_other", True),
            ]
            cut = run_maintenance(projector, TASKS, [SCOPE, other], stop=after_one())
            assert [r.scope for r in cut.sweeps] == [other]  # the first in sorted order ran
            assert cut.failures == [
                ("sweep", LABEL, OUT_OF_TIME),
                ("compact", "tn_other/prj_other/env_other", OUT_OF_TIME),
                ("compact", LABEL, OUT_OF_TIME),
            ]
            assert cut.compaction is not None and cut.compaction.scopes == ()
        finally:
            projector.close()

        handler = MaintenanceEntryPoint(lambda: open_projector(config))
        try:
            with pytest.raises(MaintenanceIncomplete, match=f"sweep {LABEL}") as raised:
                handler(SCHEDULED, None)
            assert raised.value.transient
            with pytest.raises(MaintenanceIncomplete, match="time ran out"):
                handler({"scopes": [LABEL]}, Context(remaining_ms=1_000))  # under the reserve
        finally:
            handler.close()


# --- the event ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (SCHEDULED, (TASKS, None)),
        ({}, (TASKS, None)),
        ({"tasks": ["compact", "sweep"]}, (TASKS, None)),
        ({"tasks": ["compact"], "scopes": [LABEL, LABEL]}, (("compact",), (SCOPE,))),
        ({"scopes": []}, (TASKS, ())),
    ],
)
def test_maintenance_events(event: dict[str, Any], expected: Any) -> None:
    assert parse_maintenance_event(event) == expected


@pytest.mark.parametrize(
    "event",
    [
        None, [], "sweep", {"Records": []},
        {"tasks": []}, {"tasks": "sweep"}, {"tasks": ["vacuum"]}, {"tasks": [1]},
        {"scopes": LABEL}, {"scopes": [1]}, {"scopes": ["a/b"]}, {"scopes": ["a/b/c/d"]},
    ],
)  # fmt: skip
def test_other_events_are_refused(event: Any) -> None:
    with pytest.raises(LambdaEventInvalid):
        parse_maintenance_event(event)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(
    JSON,
    st.dictionaries(
        st.sampled_from(["tasks", "scopes", "source", "Records"]),
        JSON | st.lists(st.sampled_from([*TASKS, LABEL, "a/b", ""]), max_size=3),
    ),
)
def test_fuzz_a_maintenance_event_parses_or_is_refused(raw: Any, shaped: dict[str, Any]) -> None:
    for event in (raw, shaped):
        try:
            tasks, scopes = parse_maintenance_event(event)
        except LambdaEventInvalid:
            continue
        assert tasks and set(tasks) <= set(TASKS)
        assert scopes is None or all(isinstance(s, Scope) for s in scopes)
