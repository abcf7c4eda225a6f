"""The SQS-triggered Lambda entry point: fake events built from real messages of the e2e rig
(directory bucket + SQLite queue), the event source mapping simulated (invoke with up to 10
records, delete the records the response does not list). Retried records stay in the queue,
quarantined ones reach the dead-letter queue with their marker, and the projection equals the
local catalog."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import zstandard
from malformed_evidence import assert_quarantined, malformed_metas, malformed_packs, ship_behind
from projector_control_rig import closed_port_url
from projector_e2e_rig import assert_same_relations, ingest_path
from projector_fixtures import SCOPE, CountingStore, workload_store
from projector_service_rig import (
    assert_one_fact_set,
    control_endpoint,
    dataplane_dir,
    receive_all,
    with_private,
)

from baml_studio.gateway.keys import evidence_prefix, pack_key, segment_key
from baml_studio.gateway.service import load_dataplane_config
from baml_studio.objectstore.notifications import s3_event
from baml_studio.projector.lambda_handler import (
    LambdaConfigError,
    LambdaEntryPoint,
    LambdaEventInvalid,
    config_from_env,
    lambda_worker,
    open_from_env,
    process_event,
)
from baml_studio.projector.service import Projector, ProjectorConfig, open_projector
from baml_studio.projector.worker import WorkerConfig
from baml_studio.queue.port import Message, Queue

__all__ = ["workload_store"]


class Context:
    """The part of the Lambda context object the handler reads."""

    def __init__(self, remaining_ms: int = 900_000) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def record(message: Message) -> dict[str, Any]:
    return {
        "messageId": message.id,
        "receiptHandle": message.receipt,
        "body": message.body,
        "attributes": {
            "ApproximateReceiveCount": str(message.receive_count),
            "SentTimestamp": str(int(message.sent_at * 1000)),
            "SenderId": "AIDAEXAMPLE",
            "ApproximateFirstReceiveTimestamp": str(int(message.sent_at * 1000)),
        },
        "messageAttributes": {},
        "md5OfBody": hashlib.md5(message.body.encode(), usedforsecurity=False).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:projection",
        "awsRegion": "us-east-1",
    }


def sqs_event(messages: list[Message]) -> dict[str, Any]:
    return {"Records": [record(m) for m in messages]}


def invoke(queue: Queue, handler: Any, messages: list[Message]) -> set[str]:
    """One invocation as the event source mapping makes it; the ids reported as failed."""
    response = handler(sqs_event(messages), Context())
    failed = {item["itemIdentifier"] for item in response["batchItemFailures"]}
    for message in messages:
        if message.id not in failed:
            queue.delete(message.receipt)  # Lambda deletes what the function processed
    return failed


def chunks(items: list[Message], size: int = 10) -> Iterator[list[Message]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def lambda_env(tmp_path: Path, url: str, token: str) -> dict[str, str]:
    return {
        "BAML_CONTROL_PLANE_URL": url,
        "BAML_WORKLOAD_TOKEN": token,
        "BAML_DATAPLANE_DIR": str(dataplane_dir(tmp_path)),
        "BAML_DERIVED_ROOT": str(tmp_path / "lambda-derived"),
    }


# --- over the ingest path ----------------------------------------------------------------------


def test_lambda_batches_project_the_ingest_path_and_report_pending_records(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    with (
        ingest_path(tmp_path, chdb_dsn, fact_database, workload_store) as ingest,
        control_endpoint(ingest) as (url, token),
    ):
        queue = ingest.dataplane.queue
        assert queue is not None
        config = dataclasses.replace(
            config_from_env(lambda_env(tmp_path, url, token)),
            worker=WorkerConfig(retry_backoff_s=(0,)),
        )
        opens: list[Projector] = []

        def open_once() -> Projector:
            opens.append(open_projector(config))
            return opens[-1]

        handler = LambdaEntryPoint(open_once)
        try:
            messages = receive_all(queue)
            metas = [m for m in messages if ".bamlmeta.zst" in m.body]
            packs = [m for m in messages if ".bamlpack.zst" in m.body]
            assert metas and packs and len(metas) + len(packs) == len(messages)
            failed: set[str] = set()
            for batch in chunks(metas):  # before any pack: values pending
                failed |= invoke(queue, handler, batch)
            assert failed and failed <= {m.id for m in metas}
            assert queue.approximate_count() == len(failed) + len(packs)  # nothing lost
            for batch in chunks(packs):
                assert invoke(queue, handler, batch) == set()
            for _ in range(20):  # the retried records, visible again after the backoff (0 s)
                batch = queue.receive(max_messages=10)
                if not batch:
                    break
                assert {m.receive_count for m in batch} == {2}
                assert invoke(queue, handler, batch) == set()
            assert len(opens) == 1  # opened on the first invocation, kept for the others
            assert_one_fact_set(with_private(ingest, config), fact_database)
        finally:
            handler.close()


def test_terminal_records_are_quarantined_and_broken_ones_retried(
    tmp_path: Path,
    chdb_dsn: str,
    fact_database: str,
    workload_store: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with (
        ingest_path(tmp_path, chdb_dsn, fact_database, workload_store, ship=False) as ingest,
        control_endpoint(ingest) as (url, token),
    ):
        queue = ingest.dataplane.queue
        assert queue is not None
        for name, value in lambda_env(tmp_path, url, token).items():
            monkeypatch.setenv(name, value)
        handler = LambdaEntryPoint(open_from_env)  # the module's entry point, fresh
        try:
            store = ingest.dataplane.store
            key = segment_key(SCOPE, "ab" * 16, "meta", 1)
            body = zstandard.ZstdCompressor().compress(b"BAMLMETA" + b"\x00" * 64)
            store.put_if_absent(key, body, hashlib.sha256(body).hexdigest())  # notifies
            queue.send("not an S3 event")
            messages = receive_all(queue)
            assert len(messages) == 2
            event = sqs_event(messages)
            event["Records"].append({"messageId": "m-broken", "body": "{}"})  # no receipt
            response = handler(event, Context())
            assert response == {"batchItemFailures": [{"itemIdentifier": "m-broken"}]}
            for message in messages:
                queue.delete(message.receipt)  # processed: Lambda deletes them
            dead = receive_all(queue.dead_letter_queue())
            assert sorted(m.body for m in dead) == sorted(m.body for m in messages)
            prefix = evidence_prefix(SCOPE)
            marker = f"{prefix}quarantine/{key[len(prefix) :]}.quarantine"
            assert json.loads(store.get(marker))["key"] == key
            assert store.head(key).size == len(body)  # the bytes are kept

            with pytest.raises(LambdaEventInvalid, match="not an SQS batch"):
                handler({"detail-type": "Scheduled Event"}, Context())
        finally:
            handler.close()


def test_malformed_objects_behind_valid_outer_checks_are_quarantined_and_the_rest_projected(
    tmp_path: Path, chdb_dsn: str, fact_database: str, workload_store: Path
) -> None:
    """Packs malformed inside a valid zstd frame and meta objects malformed behind a valid
    checksum, queued ahead of the shipped workload: the handler reports none of them as
    failed (Lambda deletes them from the source queue), each reaches the dead-letter queue
    with its marker and its bytes kept, and the workload behind them is projected."""
    bad = malformed_packs() + malformed_metas()
    with (
        ingest_path(tmp_path, chdb_dsn, fact_database, workload_store, ship=False) as ingest,
        control_endpoint(ingest) as (url, token),
    ):
        queue = ingest.dataplane.queue
        assert queue is not None
        ship_behind(ingest, bad)
        config = dataclasses.replace(
            config_from_env(lambda_env(tmp_path, url, token)),
            worker=WorkerConfig(retry_backoff_s=(0,)),
        )
        handler = LambdaEntryPoint(lambda: open_projector(config))
        try:
            messages = receive_all(queue)
            packs = [m for m in messages if ".bamlpack.zst" in m.body]
            metas = [m for m in messages if m not in packs]
            for batch in [*chunks(packs), *chunks(metas)]:  # values first: nothing is pending
                assert invoke(queue, handler, batch) == set()
            assert queue.approximate_count() == 0
            store = ingest.dataplane.store
            assert_quarantined(store, receive_all(queue.dead_letter_queue()), bad)
            projected = with_private(ingest, config)
            assert_same_relations(projected.projected_tables(), ingest.local_tables())
        finally:
            handler.close()


# --- without the control plane ------------------------------------------------------------------


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Projector]:
    dataplane = load_dataplane_config(tmp_path / "dp", host="127.0.0.1", port=8787)
    config = ProjectorConfig(dataplane, closed_port_url(), "token")
    with open_projector(config) as projector:
        yield projector


def pack_message(projector: Projector, n: int) -> tuple[str, Message]:
    """A received notification of a pack that is not in the bucket, and its key."""
    key = pack_key(SCOPE, "cd" * 16, f"01J{n:023d}")
    body = s3_event(projector.store.bucket, key, 10, "0" * 32, None, None, datetime.now(UTC))
    projector.queue.send(json.dumps(body))
    return key, projector.queue.receive(max_messages=1)[0]


def test_a_bug_fails_only_its_record_and_time_running_out_defers_the_rest(
    local: Projector,
) -> None:
    (bad, first), (_, second) = pack_message(local, 1), pack_message(local, 2)

    def fail(key: str) -> Exception | None:
        return RuntimeError("a bug (test)") if key == bad else None

    store = CountingStore(local.store, fail=fail)
    broken = Projector(local.config, store, local.queue, local.control)
    worker = lambda_worker(broken)
    response = process_event(worker, sqs_event([first, second]))
    assert response == {"batchItemFailures": [{"itemIdentifier": first.id}]}
    assert worker.stats.deleted == 1  # the second pack is gone: nothing to ingest

    budget = iter([60_000, 1_000])
    response = process_event(
        worker, sqs_event([second, first]), remaining_ms=lambda: next(budget), reserve_ms=10_000
    )
    assert response == {"batchItemFailures": [{"itemIdentifier": first.id}]}  # not started
    assert worker.stats.messages == 3


@pytest.mark.parametrize("event", [None, [], {"Records": "x"}, {"Records": [{"body": "{}"}]}])
def test_an_event_that_is_not_an_sqs_batch_is_refused(local: Projector, event: Any) -> None:
    with pytest.raises(LambdaEventInvalid):
        process_event(lambda_worker(local), event)


def test_config_from_env_reads_the_documented_variables(tmp_path: Path) -> None:
    base = {"BAML_CONTROL_PLANE_URL": "https://control.example", "BAML_WORKLOAD_TOKEN": "secret-t"}
    s3 = {
        **base,
        "BAML_S3_BUCKET": "evidence-acme",
        "BAML_SQS_QUEUE": "baml-projection",
        "BAML_S3_ENDPOINT_URL": "http://127.0.0.1:4566",
        "AWS_REGION": "eu-west-1",
    }
    config = config_from_env(s3)
    assert config.dataplane.s3 is not None and config.dataplane.sqs is not None
    assert config.dataplane.s3.bucket == "evidence-acme"
    assert config.dataplane.s3.endpoint_url == "http://127.0.0.1:4566"
    sqs = config.dataplane.sqs
    assert (sqs.name, sqs.region) == ("baml-projection", "eu-west-1")
    assert config.dataplane.sqs.endpoint_url is None
    assert config.root() == "s3://evidence-acme/derived/v1"
    assert config.control_plane_url == "https://control.example"
    assert "secret-t" not in repr(config)
    derived = config_from_env({**s3, "BAML_DERIVED_ROOT": "s3://other/derived/v1"})
    assert derived.root() == "s3://other/derived/v1"
    assert config.lance_key_cache_keys == 1_000_000
    assert config_from_env({**s3, "BAML_LANCE_KEY_CACHE_KEYS": "0"}).lance_key_cache_keys == 0
    for bad in ("-1", "1e6", "²"):
        with pytest.raises(LambdaConfigError, match="BAML_LANCE_KEY_CACHE_KEYS"):
            config_from_env({**s3, "BAML_LANCE_KEY_CACHE_KEYS": bad})

    (tmp_path / "dataplane.json").write_text(json.dumps({"bucket": "evidence-dir"}))
    local = config_from_env({**base, "BAML_DATAPLANE_DIR": str(tmp_path), "BAML_S3_BUCKET": "x"})
    assert local.dataplane.s3 is None and local.dataplane.bucket == "evidence-dir"
    assert local.root() == str(tmp_path / "derived" / "v1")

    for missing, env in [
        ("BAML_CONTROL_PLANE_URL", {"BAML_WORKLOAD_TOKEN": "t"}),
        ("BAML_WORKLOAD_TOKEN", {"BAML_CONTROL_PLANE_URL": "http://c"}),
        ("BAML_S3_BUCKET", base),
        ("BAML_SQS_QUEUE", {**base, "BAML_S3_BUCKET": "evidence-acme"}),
    ]:
        with pytest.raises(LambdaConfigError, match=missing):
            config_from_env(env)
    (tmp_path / "dataplane.json").write_text(json.dumps({"bukcet": "typo"}))
    with pytest.raises(LambdaConfigError, match="bukcet"):
        config_from_env({**base, "BAML_DATAPLANE_DIR": str(tmp_path)})
