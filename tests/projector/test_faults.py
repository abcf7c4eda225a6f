"""Fault acceptance tests (system contract, "Failure handling"), each through the whole ingest
path of the e2e rig and ending with one fact set equal to the local catalog:

* the control plane (and so ClickHouse) unavailable: messages are retried, not lost and not
  dead-lettered; once it is back, a drain completes;
* the workload token expired (401 for every request): the same, until the token file holds a
  rotated token;
* ClickHouse failing behind a live control plane (it answers 503 ``fact_store_unavailable``
  for projection batches): the same backlog, and a catch-up once ClickHouse is back;
* a projector process SIGKILLed after an execution's public batches are visible and before its
  Lance commit: the message comes back and a rerun repeats the same batch ids and row ids;
* two projectors draining one queue at once, every notification twice: one fact set.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from clickhouse_connect.driver.exceptions import OperationalError
from projector_control_rig import closed_port_url, public_batch
from projector_e2e_rig import ingest_path
from projector_fixtures import SCOPE, workload_store
from projector_service_rig import (
    assert_one_fact_set,
    control_endpoint,
    dataplane_dir,
    fact_counts,
    receive_all,
    rig_worker,
)

from baml_studio.control.facts import FactStore
from baml_studio.control.facts.ddl import eq_sql
from baml_studio.control.identity import TokenIssuer
from baml_studio.control.models import ErrorResponse
from baml_studio.gateway.service import load_dataplane_config
from baml_studio.httpclient import new_request_id
from baml_studio.projector.control_client import ControlClient, SentRequest, batch_request
from baml_studio.projector.lance_store import PROJECTED, PrivateStore
from baml_studio.projector.worker import ProjectorWorker, WorkerConfig
from baml_studio.queue.config import QueueSettings
from baml_studio.queue.errors import ReceiptInvalid
from baml_studio.queue.sqlite import SqliteQueue
from baml_studio.tokenfile import TokenFile, write_token_file

__all__ = ["workload_store"]

KILL_SCRIPT = Path(__file__).with_name("projector_kill_worker.py")
META = ".bamlmeta.zst"
OUTAGE_ROUNDS = 3


def test_control_plane_outage_retries_messages_then_a_drain_completes(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    with ingest_path(tmp_path, chdb_dsn, fact_database, workload_store) as ingest:
        queue = ingest.dataplane.queue
        assert queue is not None
        down = ControlClient(
            closed_port_url(), "token", retries=1, backoff_s=0.001, backoff_max_s=0.002
        )
        worker = rig_worker(ingest, down)
        for _ in range(OUTAGE_ROUNDS):
            for message in receive_all(queue):
                outcome = worker.handle(message)
                assert outcome != "quarantined", message.body
        down.close()
        assert worker.stats.retried > 0 and worker.stats.executions == 0
        assert worker.stats.quarantined == 0
        assert queue.dead_letter_queue().approximate_count() == 0
        held = receive_all(queue)  # what the outage left: meta objects with executions
        assert held and all(META in m.body for m in held)
        assert {m.receive_count for m in held} == {OUTAGE_ROUNDS + 1}
        assert QueueSettings().max_receive_count > OUTAGE_ROUNDS + 1
        assert all(v["stored"] == 0 for v in fact_counts(ingest, fact_database).values())
        for message in held:  # their visibility timeout, passed
            queue.change_visibility(message.receipt, 0)

        with control_endpoint(ingest) as (url, token), ControlClient(url, token) as up:
            back = rig_worker(ingest, up)
            back.drain()
        assert back.stats.executions > 0 and back.stats.quarantined == 0
        assert_one_fact_set(ingest, fact_database)


def test_an_expired_workload_token_retries_messages_then_a_rotated_one_drains(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    """A workload token lives at most an hour: once it has expired, every request is refused
    (401). The messages are the projector's to retry, not evidence to quarantine: nothing is
    dead-lettered or marked, and once the token file holds a new token the same worker drains
    the queue into one fact set."""
    with (
        ingest_path(tmp_path, chdb_dsn, fact_database, workload_store) as ingest,
        control_endpoint(ingest) as (url, token),
    ):
        queue = ingest.dataplane.queue
        assert queue is not None
        an_hour_ago = TokenIssuer(
            ingest.control.keys, ingest.control.metastore, clock=lambda: time.time() - 3700
        )
        expired = an_hour_ago.issue_workload(SCOPE.tenant, "dep_proj", "cell-1", ttl_s=3600)
        token_file = tmp_path / "workload.token"
        write_token_file(token_file, expired.token)
        with ControlClient(url, TokenFile(token_file)) as client:
            worker = rig_worker(ingest, client)
            for _ in range(OUTAGE_ROUNDS):
                for message in receive_all(queue):
                    outcome = worker.handle(message)
                    assert outcome != "quarantined", message.body
            assert worker.stats.retried > 0 and worker.stats.executions == 0
            assert worker.stats.quarantined == 0
            assert queue.dead_letter_queue().approximate_count() == 0
            assert not [o.key for o in ingest.dataplane.store.list() if "/quarantine/" in o.key]
            assert all(v["stored"] == 0 for v in fact_counts(ingest, fact_database).values())

            write_token_file(token_file, token)  # the rotation
            worker.drain()
        assert worker.stats.executions > 0 and worker.stats.quarantined == 0
        assert queue.approximate_count() == 0
        assert_one_fact_set(ingest, fact_database)


def test_a_control_plane_url_with_a_wrong_path_retries_messages_then_the_right_one_drains(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    """``--control-plane http://host/wrong``: every request is a 404 from the control plane's
    unknown-route handler. That is configuration, not evidence: the messages are retried,
    nothing is dead-lettered or marked (they were all quarantined), and a worker with the
    right URL drains the queue into one fact set."""
    with (
        ingest_path(tmp_path, chdb_dsn, fact_database, workload_store) as ingest,
        control_endpoint(ingest) as (url, token),
    ):
        queue = ingest.dataplane.queue
        assert queue is not None
        with ControlClient(url + "/wrong", token) as client:
            worker = rig_worker(ingest, client)
            outcomes = {m.body: worker.handle(m) for m in receive_all(queue)}
            metas = {body: o for body, o in outcomes.items() if ".bamlmeta.zst" in body}
            # meta objects that end executions are retried; packs (and a meta object that
            # ends none) need no control plane
            assert "retry" in metas.values() and "quarantined" not in outcomes.values(), metas
            assert worker.stats.quarantined == 0 and worker.stats.executions == 0
        assert queue.dead_letter_queue().approximate_count() == 0
        assert not [o.key for o in ingest.dataplane.store.list() if "/quarantine/" in o.key]
        with ControlClient(url, token) as client:
            worker = rig_worker(ingest, client)
            worker.drain()
        assert worker.stats.executions > 0 and worker.stats.quarantined == 0
        assert queue.approximate_count() == 0
        assert_one_fact_set(ingest, fact_database)


class ClickHouseSwitch:
    """The ClickHouse behind one fact store, taken down and brought back: while down, its
    connections are gone (the pooled clients closed) and every new one is refused as
    ``clickhouse_connect`` refuses one; the control plane itself keeps answering."""

    def __init__(self, facts: FactStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self._facts = facts
        self._connector = facts._pool._connector  # the one both of the store's pools share
        self.down = False
        self.refused = 0
        monkeypatch.setattr(facts._pool, "_connector", self)
        monkeypatch.setattr(facts._queries, "_connector", self)

    def open(self) -> Any:
        if self.down:
            self.refused += 1
            raise OperationalError("Error connecting to ClickHouse: [Errno 111] Connection refused")
        return self._connector.open()

    def fail(self) -> None:
        self.down = True
        self._facts._pool.close()
        self._facts._queries.close()

    def recover(self) -> None:
        self.down = False


def test_clickhouse_failing_behind_a_live_control_plane_backlogs_then_catches_up(
    tmp_path: Path,
    chdb_dsn: str,
    fact_database: str,
    workload_store: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The control plane is up (tokens, snapshots) but its fact store fails: the projection
    batch route answers 503 ``fact_store_unavailable``, the worker keeps every meta message
    (retried, not dead-lettered, nothing committed to Lance), and once ClickHouse is back the
    same worker catches up to one fact set equal to the local catalog."""
    sent: list[SentRequest] = []
    with (
        ingest_path(tmp_path, chdb_dsn, fact_database, workload_store) as ingest,
        control_endpoint(ingest) as (url, token),
        ControlClient(  # one quick retry, not Retry-After's second
            url, token, retries=1, backoff_s=0.001, retry_after_max_s=0, on_request=sent.append
        ) as client,
    ):
        queue = ingest.dataplane.queue
        assert queue is not None
        worker = rig_worker(ingest, client)
        clickhouse = ClickHouseSwitch(ingest.control.facts, monkeypatch)
        clickhouse.fail()

        generation = client.active_generation(SCOPE)  # the control plane answers
        probe = batch_request(SCOPE, generation, public_batch("threads_v1", "exec_probe"))
        answer = httpx.put(
            url + probe.path,
            headers={
                **probe.headers,
                "Authorization": f"Bearer {token}",
                "X-Baml-Request-Id": new_request_id(),
            },
            content=probe.body,
        )
        assert answer.status_code == 503 and answer.headers.get("retry-after"), answer.text
        error = ErrorResponse.model_validate(answer.json()).error
        assert (error.code, error.retryable) == ("fact_store_unavailable", True)

        with caplog.at_level(logging.WARNING, logger="baml_studio.projector.control_client"):
            for _ in range(OUTAGE_ROUNDS):
                for message in receive_all(queue):
                    outcome = worker.handle(message)
                    assert outcome != "quarantined", message.body
        refusals = [m for r in caplog.records if "put_batch refused" in (m := r.getMessage())]
        assert refusals and all("status=503 code=fact_store_unavailable" in m for m in refusals)
        assert any(r.method == "PUT" for r in sent) and clickhouse.refused > 0
        assert worker.stats.retried > 0 and worker.stats.executions == 0
        assert worker.stats.quarantined == 0 and worker.stats.packs > 0
        assert queue.dead_letter_queue().approximate_count() == 0
        assert ingest.private.open_dataset(PROJECTED) is None  # nothing committed
        held = receive_all(queue)  # the backlog: every meta object with executions
        assert held and all(META in m.body for m in held)
        assert {m.receive_count for m in held} == {OUTAGE_ROUNDS + 1}
        assert QueueSettings().max_receive_count > OUTAGE_ROUNDS + 1
        for message in held:  # their visibility timeout, passed
            queue.change_visibility(message.receipt, 0)

        clickhouse.recover()
        assert all(v["stored"] == 0 for v in fact_counts(ingest, fact_database).values())
        worker.drain()
        assert worker.stats.executions > 0 and worker.stats.quarantined == 0
        assert_one_fact_set(ingest, fact_database)


def test_sigkill_between_public_batches_and_lance_commit_leaves_one_fact_set(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    with (
        ingest_path(tmp_path, chdb_dsn, fact_database, workload_store) as ingest,
        control_endpoint(ingest) as (url, token),
    ):
        queue = ingest.dataplane.queue
        assert queue is not None
        derived = str(tmp_path / "derived")  # the rig's private store
        env = {**os.environ, "BAML_WORKLOAD_TOKEN": token, "PROJECTOR_KILL_AT": "2"}
        run = subprocess.run(
            [sys.executable, str(KILL_SCRIPT), str(dataplane_dir(tmp_path)), url, derived],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert run.returncode == -signal.SIGKILL, (run.returncode, run.stderr[-3000:])
        lines = [json.loads(line) for line in run.stdout.splitlines()]
        killed = lines[-1]["killing"]
        written_before = lines[-1]["written_before"]

        # the crash window: the execution's facts are visible, its Lance commit is not
        visible = fact_counts(ingest, fact_database, eq_sql("_root_id", killed))
        assert visible["threads_v1"]["stored"] > 0
        assert ingest.private.projected([killed]) == set()
        markers = ingest.private.projected_at(ingest.private.version()["projected_v1"])
        assert written_before > 0 and len(markers) == written_before

        held = 0
        for line in lines:  # the visibility timeout of the dead process's leases, passed
            for receipt in line.get("leased", []):
                with contextlib.suppress(ReceiptInvalid):  # deleted before the kill
                    queue.change_visibility(receipt, 0)
                    held += 1
        assert held >= 1  # the killed execution's message came back

        ingest.worker.drain()
        assert ingest.worker.stats.quarantined == 0
        assert ingest.private.projected([killed]) == {killed}
        assert_one_fact_set(ingest, fact_database)


def test_two_projectors_on_one_queue_with_every_notification_twice_give_one_fact_set(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    with (
        ingest_path(tmp_path, chdb_dsn, fact_database, workload_store) as ingest,
        control_endpoint(ingest) as (url, token),
    ):
        queue = ingest.dataplane.queue
        assert queue is not None
        originals = receive_all(queue)
        for message in originals:  # each notification twice, one after the other
            queue.delete(message.receipt)
            queue.send(message.body)
            queue.send(message.body)

        queue_config = load_dataplane_config(
            dataplane_dir(tmp_path), host="127.0.0.1", port=8787
        ).queue_config
        barrier = threading.Barrier(2)
        workers: list[ProjectorWorker] = []
        failures: list[BaseException] = []

        def projector() -> None:
            # a second process in all but name: its own queue connection, client and store
            own_queue = SqliteQueue.open(queue_config)
            with own_queue, ControlClient(url, token) as control:
                store = PrivateStore(str(tmp_path / "derived"))
                worker = ProjectorWorker(
                    store=ingest.dataplane.store,
                    queue=own_queue,
                    control=control,
                    private_store=lambda scope: store,
                    config=WorkerConfig(retry_backoff_s=(0,)),
                )
                workers.append(worker)
                barrier.wait(30)
                try:
                    while batch := own_queue.receive(max_messages=1):
                        worker.handle(batch[0])
                except BaseException as exc:
                    failures.append(exc)
                    raise

        threads = [threading.Thread(target=projector) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(240)
        assert not failures and not any(t.is_alive() for t in threads)
        assert all(w.stats.executions > 0 for w in workers)  # both projected, concurrently
        assert sum(w.stats.deleted for w in workers) == 2 * len(originals)
        assert_one_fact_set(ingest, fact_database)
