"""The SQS-triggered Lambda entry point: fake events built from real messages of the e2e rig
(directory bucket + SQLite queue), the event source mapping simulated (invoke with up to 10
records, delete the records the response does not list). Retried records stay in the queue,
quarantined ones reach the dead-letter queue with their marker, and the projection equals the
local catalog."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from malformed_evidence import assert_quarantined, malformed_metas, malformed_packs, ship_behind
from projector_control_rig import closed_port_url
from projector_e2e_rig import assert_same_relations, ingest_path
from projector_fixtures import SCOPE, CountingStore, MemoryStore, workload_store
from projector_service_rig import (
    assert_one_fact_set,
    control_endpoint,
    dataplane_dir,
    receive_all,
    with_private,
)

from baml_studio.gateway.keys import evidence_prefix, pack_key, segment_key
from baml_studio.gateway.service import load_dataplane_config
from baml_studio.objectstore.errors import ObjectStoreUnavailable
from baml_studio.objectstore.notifications import s3_event
from baml_studio.projector.control_client import ControlClient
from baml_studio.projector.lambda_handler import (
    InvocationQueue,
    LambdaConfigError,
    LambdaEntryPoint,
    LambdaEventInvalid,
    LambdaRecordInvalid,
    _message,
    config_from_env,
    lambda_worker,
    open_from_env,
    process_event,
)
from baml_studio.projector.service import Projector, ProjectorConfig, open_projector
from baml_studio.projector.worker import Outcome, ProjectorWorker, WorkerConfig
from baml_studio.queue.errors import InvalidQueueArgument
from baml_studio.queue.port import Message, Queue, check_send
from baml_studio.servergc import THRESHOLDS
from baml_studio.tokenfile import write_token_file

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
    assert (config.silence_limit_s, config.version_retention_s) == (3600.0, 7 * 86_400.0)
    timed = config_from_env({**s3, "BAML_SILENCE_LIMIT": "30m", "BAML_VERSION_RETENTION": "2d"})
    assert (timed.silence_limit_s, timed.version_retention_s) == (1800.0, 2 * 86_400.0)
    for name in ("BAML_SILENCE_LIMIT", "BAML_VERSION_RETENTION"):
        for bad in ("soon", "0", "0h", "99999999999999w"):
            with pytest.raises(LambdaConfigError, match=name):
                config_from_env({**s3, name: bad})

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


S3_ENV = {
    "BAML_CONTROL_PLANE_URL": "https://control.example",
    "BAML_WORKLOAD_TOKEN": "secret-t",
    "BAML_SQS_QUEUE": "baml-projection",
}


@pytest.mark.parametrize("bucket", ["X", "a b", "ab", "a..b", "-evidence", "Evidence", "é" * 5])
def test_a_bad_bucket_name_is_a_config_error_naming_the_variable_and_value(bucket: str) -> None:
    with pytest.raises(LambdaConfigError) as caught:
        config_from_env({**S3_ENV, "BAML_S3_BUCKET": bucket})
    assert "BAML_S3_BUCKET" in str(caught.value) and repr(bucket) in str(caught.value)


def test_a_workload_token_file_is_read_again_once_rotated(tmp_path: Path) -> None:
    path = tmp_path / "workload.token"
    write_token_file(path, "first-token")
    env = {**S3_ENV, "BAML_S3_BUCKET": "evidence-acme", "BAML_WORKLOAD_TOKEN_FILE": str(path)}
    config = config_from_env(env)  # the file wins over BAML_WORKLOAD_TOKEN
    token = config.workload_token
    assert callable(token) and token() == "first-token"
    write_token_file(path, "second-token")
    assert token() == "second-token"
    del env["BAML_WORKLOAD_TOKEN"]
    assert callable(config_from_env(env).workload_token)
    for bad in (str(tmp_path / "missing.token"), str(tmp_path)):
        with pytest.raises(LambdaConfigError, match="BAML_WORKLOAD_TOKEN_FILE"):
            config_from_env({**env, "BAML_WORKLOAD_TOKEN_FILE": bad})


@pytest.mark.parametrize(
    "queue", ["a b", "queue.fifo", "q" * 77, "é" * 5, "queue/x", "q:1", "\u0660queue"]
)
def test_a_bad_queue_name_is_a_config_error_naming_the_variable_and_value(queue: str) -> None:
    with pytest.raises(LambdaConfigError) as caught:
        config_from_env({**S3_ENV, "BAML_S3_BUCKET": "evidence-acme", "BAML_SQS_QUEUE": queue})
    assert "BAML_SQS_QUEUE" in str(caught.value) and repr(queue)[:60] in str(caught.value)


@pytest.mark.parametrize("queue", ["q", "baml-projection_2", "Q" * 76])
def test_the_longest_and_shortest_queue_names_are_accepted(queue: str) -> None:
    config = config_from_env({**S3_ENV, "BAML_S3_BUCKET": "evidence-acme", "BAML_SQS_QUEUE": queue})
    assert config.dataplane.sqs is not None and config.dataplane.sqs.name == queue


def test_open_from_env_refuses_a_bad_bucket_name_before_opening_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("BAML_DATAPLANE_DIR", raising=False)
    for name, value in {**S3_ENV, "BAML_S3_BUCKET": "a b"}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(LambdaConfigError, match="BAML_S3_BUCKET: bucket name 'a b' is invalid"):
        open_from_env()


def test_open_from_env_refuses_a_short_presign_key_in_the_dataplane_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tmp_path / "keys" / "presign.key"
    key.parent.mkdir()
    key.write_bytes(b"short")
    monkeypatch.setenv("BAML_CONTROL_PLANE_URL", "https://control.example")
    monkeypatch.setenv("BAML_WORKLOAD_TOKEN", "secret-t")
    monkeypatch.setenv("BAML_DATAPLANE_DIR", str(tmp_path))
    with pytest.raises(LambdaConfigError, match=f"BAML_DATAPLANE_DIR: {key} holds 5 bytes"):
        open_from_env()
    assert key.read_bytes() == b"short"


@settings(max_examples=300, deadline=None)
@given(bucket=st.text(min_size=1, max_size=70) | st.from_regex(r"[a-z0-9.-]{1,70}", fullmatch=True))
def test_fuzz_any_bucket_name_configures_or_is_a_config_error(bucket: str) -> None:
    try:
        config = config_from_env({**S3_ENV, "BAML_S3_BUCKET": bucket})
    except LambdaConfigError as exc:
        assert "BAML_S3_BUCKET" in str(exc)
        return
    assert config.dataplane.s3 is not None and config.dataplane.s3.bucket == bucket.strip()


# --- fuzzing the event and its records ----------------------------------------------------------
#
# The worker runs over an in-memory bucket and source queue (no control plane, no Lance): a
# healthy record names a pack that is not in the bucket (deleted: nothing to ingest), a flaky
# stream's packs fail to read (transient: retried), and the other bodies are quarantined.

BUCKET = "evidence-fuzz"
BACKOFF = (5, 15, 30)
HEALTHY = "cd" * 16
FLAKY = "ff" * 16
NOW = datetime(2026, 1, 1, tzinfo=UTC)
MISSING = object()
"""A mutation that removes the field."""

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=10,
)


def notification(key: str, bucket: str = BUCKET) -> str:
    return json.dumps(s3_event(bucket, key, 10, "0" * 32, None, None, NOW))


def pack_notification(euid: str, n: int) -> str:
    return notification(pack_key(SCOPE, euid, f"01J{n:023d}"))


class MemoryQueue:
    """The source queue (or its dead-letter queue) as an invocation uses it, in memory: sends
    checked as both real adapters check them, visibility changes recorded."""

    def __init__(self, dead_letter: MemoryQueue | None = None) -> None:
        self.bodies: list[str] = []
        self.visibility: list[int] = []
        self._dead_letter = dead_letter

    def send(self, body: str, *, delay_s: int = 0) -> str:
        check_send(body, delay_s)
        self.bodies.append(body)
        return f"sent-{len(self.bodies)}"

    def receive(
        self, max_messages: int = 10, wait_s: float = 0, visibility_timeout_s: int | None = None
    ) -> list[Message]:
        return []

    def delete(self, receipt: str) -> None:
        raise AssertionError("Lambda deletes the records the response does not list")

    def change_visibility(self, receipt: str, timeout_s: int) -> None:
        self.visibility.append(timeout_s)

    def send_to_dead_letter(self, message: Message, reason: str) -> None:
        self.dead_letter_queue().send(message.body)

    def dead_letter_queue(self) -> MemoryQueue:
        if self._dead_letter is None:
            raise AssertionError("a dead-letter queue has no dead-letter queue")
        return self._dead_letter

    def approximate_count(self) -> int:
        return len(self.bodies)


class RecordingWorker(ProjectorWorker):
    """The Lambda worker (over :class:`InvocationQueue`), remembering what each message did."""

    def __init__(self, control: ControlClient, source: MemoryQueue) -> None:
        def flaky(key: str) -> Exception | None:
            return ObjectStoreUnavailable(f"{key}: unavailable (test)") if FLAKY in key else None

        def no_lance(scope: Any) -> Any:
            raise AssertionError("no fuzzed record reaches the private store")

        super().__init__(
            store=CountingStore(MemoryStore(BUCKET), fail=flaky),
            queue=InvocationQueue(source),
            control=control,
            private_store=no_lance,
            config=WorkerConfig(retry_backoff_s=BACKOFF),
        )
        self.outcomes: dict[str, Outcome] = {}
        self.errors: dict[str, Exception] = {}

    def handle(self, message: Message) -> Outcome:
        try:
            outcome = super().handle(message)
        except Exception as exc:
            self.errors[message.id] = exc
            raise
        self.outcomes[message.id] = outcome
        return outcome


@pytest.fixture(scope="module")
def control() -> Iterator[ControlClient]:
    """A control client nothing answers (no fuzzed record reaches the control plane)."""
    client = ControlClient(closed_port_url(), "token")
    try:
        yield client
    finally:
        client.close()


def invocation(control: ControlClient) -> tuple[RecordingWorker, MemoryQueue, MemoryQueue]:
    """A fresh worker, its source queue and dead-letter queue."""
    dead = MemoryQueue()
    source = MemoryQueue(dead)
    return RecordingWorker(control, source), source, dead


def healthy_record(n: int) -> dict[str, Any]:
    body = pack_notification(HEALTHY, n)
    return record(Message(f"ok-{n}", f"receipt-ok-{n}", body, 1, NOW.timestamp()))


BODIES = st.one_of(
    st.text(max_size=40),
    JSON.map(json.dumps),
    st.just(notification("elsewhere/x.bamlpack.zst")),  # not an evidence key
    st.just(notification(pack_key(SCOPE, HEALTHY, "0" * 26), bucket="another-bucket")),
    st.integers(0, 99).map(lambda n: pack_notification(FLAKY, n)),  # retried
    st.integers(100, 199).map(lambda n: pack_notification(HEALTHY, n)),  # deleted
)
COUNTS = st.one_of(
    st.from_regex(r"[-+ ]?[0-9]{1,25}", fullmatch=True),
    st.integers(),
    st.floats(),
    st.text(max_size=6),
)
MUTATIONS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                ("receiptHandle",),
                ("body",),
                ("attributes",),
                ("attributes", "ApproximateReceiveCount"),
                ("attributes", "SentTimestamp"),
            ]
        ),
        st.just(MISSING) | JSON | COUNTS,
    ),
    max_size=3,
)


@st.composite
def bad_record(draw: st.DrawFn, n: int = 0) -> dict[str, Any]:
    """A record of a batch whose body, fields or attributes may be anything."""
    count = draw(st.integers(1, 12))
    sent = Message(f"bad-{n}", f"receipt-bad-{n}", draw(BODIES), count, NOW.timestamp())
    mutated = record(sent)
    for path, value in draw(MUTATIONS):
        parent = mutated if len(path) == 1 else mutated.get(path[0])
        if not isinstance(parent, dict):
            continue  # an attribute's mutation after the attributes were replaced
        if value is MISSING:
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = value
    return mutated


@st.composite
def batches(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Up to ten records: a few healthy ones among a few bad ones, in any order."""
    healthy = [healthy_record(n) for n in range(draw(st.integers(1, 4)))]
    bad = [draw(bad_record(n)) for n in range(draw(st.integers(1, 6)))]
    return draw(st.permutations(healthy + bad))


def failed_ids(response: dict[str, Any], records: list[Any]) -> set[str]:
    """The ids the response lists, checked to be ids of the batch, each once when the batch's
    ids are unique (as SQS's are)."""
    failed = [item["itemIdentifier"] for item in response["batchItemFailures"]]
    ids = [r["messageId"] for r in records]
    assert set(failed) <= set(ids)
    if len(set(ids)) == len(ids):
        assert len(failed) == len(set(failed))
    return set(failed)


def assert_accounted(
    worker: RecordingWorker, dead: MemoryQueue, failed: set[str], raw: dict[str, Any]
) -> None:
    """One record either listed for redelivery or processed with nothing lost: refused by the
    decoder (never handled, listed), retried (listed), quarantined (its body, as sent, in the
    dead-letter queue; not listed) or deleted (not listed). The handler itself raises only
    when the dead-letter queue refuses the body (listed)."""
    message_id = raw["messageId"]
    try:
        message = _message(raw)
    except LambdaRecordInvalid:
        assert message_id in failed and message_id not in worker.outcomes
        return
    assert (message.receipt, message.body) == (raw["receiptHandle"], raw["body"])
    error = worker.errors.get(message_id)
    if error is not None:
        assert isinstance(error, InvalidQueueArgument), repr(error)
        assert message_id in failed
        return
    outcome = worker.outcomes[message_id]
    assert (message_id in failed) == (outcome == "retry"), outcome
    if outcome == "quarantined":
        assert message.body in dead.bodies


@settings(max_examples=300, deadline=None)
@given(batches())
def test_fuzz_bad_records_get_typed_outcomes_and_the_healthy_ones_are_processed(
    control: ControlClient, records: list[dict[str, Any]]
) -> None:
    worker, source, dead = invocation(control)
    failed = failed_ids(process_event(worker, {"Records": records}), records)
    for raw in records:
        if raw["messageId"].startswith("ok-"):
            assert raw["messageId"] not in failed
            assert worker.outcomes[raw["messageId"]] == "deleted"
        else:
            assert_accounted(worker, dead, failed, raw)
    assert len(dead.bodies) == sum(o == "quarantined" for o in worker.outcomes.values())
    retried = [_message(r) for r in records if worker.outcomes.get(r["messageId"]) == "retry"]
    expected = sorted(BACKOFF[min(m.receive_count, len(BACKOFF)) - 1] for m in retried)
    assert sorted(source.visibility) == expected  # the backoff follows the receive count


RECORD_FIELDS = st.sampled_from(["messageId", "receiptHandle", "body", "attributes"])
RECORDS = st.dictionaries(RECORD_FIELDS | st.text(max_size=8), JSON | COUNTS, max_size=5)
EVENTS = st.one_of(
    JSON,
    st.fixed_dictionaries({"Records": JSON}),
    st.fixed_dictionaries({"Records": st.lists(RECORDS | JSON, max_size=4)}),
    st.fixed_dictionaries(
        {"Records": st.lists(st.builds(dict, RECORDS, messageId=st.text(max_size=8)), max_size=4)}
    ),
)


def is_sqs_batch(event: Any) -> bool:
    records = event.get("Records") if isinstance(event, dict) else None
    return isinstance(records, list) and all(
        isinstance(r, dict) and isinstance(r.get("messageId"), str) for r in records
    )


@settings(max_examples=200, deadline=None)
@given(EVENTS)
def test_fuzz_any_event_is_refused_with_a_typed_error_or_processed(
    control: ControlClient, event: Any
) -> None:
    worker, _, dead = invocation(control)
    try:
        response = process_event(worker, event)
    except LambdaEventInvalid as exc:
        assert not is_sqs_batch(event) and not exc.transient
        assert worker.stats.messages == 0  # refused before any record was handled
        return
    assert is_sqs_batch(event)
    records = event["Records"]
    failed = failed_ids(response, records)
    if len({r["messageId"] for r in records}) == len(records):  # SQS ids are unique
        for raw in records:
            assert_accounted(worker, dead, failed, raw)


@settings(max_examples=500, deadline=None)
@given(bad_record() | RECORDS)
def test_fuzz_a_record_decodes_or_is_refused_with_a_typed_error(raw: dict[str, Any]) -> None:
    try:
        message = _message(raw)
    except LambdaRecordInvalid as exc:
        assert not exc.transient
        return
    assert message.id == raw["messageId"]
    assert (message.receipt, message.body) == (raw["receiptHandle"], raw["body"])
    assert isinstance(message.receive_count, int) and message.receive_count >= 1
    assert isinstance(message.sent_at, float) and message.sent_at >= 0


GOOD = {"messageId": "m-1", "receiptHandle": "r-1", "body": "{}"}


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"receiptHandle": "r-1", "body": "{}"}, "messageId"),
        ({"messageId": "m-1", "body": "{}"}, "receiptHandle"),
        ({**GOOD, "receiptHandle": 7}, "receiptHandle"),
        ({"messageId": "m-1", "receiptHandle": "r-1"}, "body"),
        ({**GOOD, "body": {"Records": []}}, "body"),  # JSON, not the text SQS delivers
        ({**GOOD, "body": None}, "body"),
        ({**GOOD, "attributes": ["ApproximateReceiveCount"]}, "attributes"),
        ({**GOOD, "attributes": {"ApproximateReceiveCount": "0"}}, "ApproximateReceiveCount"),
        ({**GOOD, "attributes": {"ApproximateReceiveCount": "-3"}}, "ApproximateReceiveCount"),
        ({**GOOD, "attributes": {"ApproximateReceiveCount": "1.5"}}, "ApproximateReceiveCount"),
        ({**GOOD, "attributes": {"ApproximateReceiveCount": None}}, "ApproximateReceiveCount"),
        ({**GOOD, "attributes": {"ApproximateReceiveCount": True}}, "ApproximateReceiveCount"),
        ({**GOOD, "attributes": {"SentTimestamp": "9" * 400}}, "SentTimestamp"),
        ({**GOOD, "attributes": {"SentTimestamp": float("inf")}}, "SentTimestamp"),
    ],
)
def test_a_malformed_record_is_refused_naming_the_field(raw: dict[str, Any], named: str) -> None:
    with pytest.raises(LambdaRecordInvalid, match=named):
        _message(raw)


def test_a_record_decodes_as_the_lambda_runtime_delivers_it() -> None:
    attributes = {"ApproximateReceiveCount": "3", "SentTimestamp": "1767225600123"}
    message = _message({**GOOD, "attributes": attributes})
    assert message == Message("m-1", "r-1", "{}", 3, 1767225600.123)
    assert _message(GOOD) == Message("m-1", "r-1", "{}", 1, 0.0)  # attributes are optional
    numbers = {"ApproximateReceiveCount": 2, "SentTimestamp": 1000}
    assert _message({**GOOD, "attributes": numbers}).receive_count == 2


def test_a_malformed_record_is_listed_and_never_handled(control: ControlClient) -> None:
    worker, _, dead = invocation(control)
    broken = {**healthy_record(1), "messageId": "m-broken", "body": {"Records": []}}
    response = process_event(worker, {"Records": [broken, healthy_record(2)]})
    assert response == {"batchItemFailures": [{"itemIdentifier": "m-broken"}]}
    assert worker.outcomes == {"ok-2": "deleted"} and not dead.bodies


def test_the_entry_point_tunes_its_process_collector_once_opened(tmp_path: Path) -> None:
    """In a process of its own (the function's execution environment), so this one keeps its
    collector: the first invocation opens the projector, then sets the servers' settings."""
    load_dataplane_config(dataplane_dir(tmp_path), host="127.0.0.1", port=8787)
    env = {**os.environ, **lambda_env(tmp_path, closed_port_url(), "token")}
    code = (
        "import gc, json; from baml_studio.projector import lambda_handler as h; "
        "before = gc.get_threshold(); "
        "answer = h.handler({'Records': []}, None); "
        "print(json.dumps([answer, list(before), gc.get_freeze_count() > 0, "
        "list(gc.get_threshold())]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    answer, before, frozen, after = json.loads(out.stdout.splitlines()[-1])
    assert answer == {"batchItemFailures": []}
    assert tuple(before) != THRESHOLDS
    assert frozen and tuple(after) == THRESHOLDS
