"""``open_projector`` over S3 and SQS (ministack): the bucket and queue ``dataplane.json``
names, and one pass of the worker over the real notifications of two objects put there: a
value pack ingested into Lance on the same bucket, a malformed pack behind a valid zstd frame
quarantined (its notification in the dead-letter queue, its marker in the bucket)."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import pytest
from malformed_evidence import malformed_packs, marker_key
from projector_control_rig import closed_port_url
from projector_fixtures import SCOPE

from baml_studio.format.cas import CODEC_VALUE, encode_cas_object
from baml_studio.format.ids import value_cid_wire
from baml_studio.gateway.keys import pack_key
from baml_studio.gateway.service import DataplaneConfig, setup_s3_notifications
from baml_studio.objectstore.config import S3Config
from baml_studio.objectstore.notifications import parse_s3_event
from baml_studio.objectstore.s3 import S3ObjectStore
from baml_studio.projector.service import ProjectorConfig, open_projector
from baml_studio.publisher.pack import decode_pack, encode_pack
from baml_studio.queue.config import SqsQueueConfig
from baml_studio.queue.port import Message, Queue
from baml_studio.queue.sqs import SqsQueue
from ministack_fixture import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY, client


def s3_dataplane(tmp_path: Path, endpoint: str, *, sqs: bool = True) -> DataplaneConfig:
    """A data plane on a fresh versioned bucket of ministack whose notifications go to a fresh
    queue (with its dead-letter queue); without ``sqs``, the bucket alone."""
    name = f"proj-{uuid.uuid4().hex[:20]}"
    s3 = S3Config(
        bucket=name,
        region=REGION,
        endpoint_url=endpoint,
        access_key_id=ACCESS_KEY_ID,
        secret_access_key=SECRET_ACCESS_KEY,
        max_attempts=2,
    )
    S3ObjectStore(s3, client=client("s3", endpoint)).ensure_bucket(versioning=True)
    queue = SqsQueueConfig(name=name, region=REGION, endpoint_url=endpoint) if sqs else None
    if queue is not None:
        status = setup_s3_notifications(
            client("s3", endpoint), client("sqs", endpoint), name, queue
        )
        assert status.ok, status
    return DataplaneConfig(
        data_dir=tmp_path / "dp", public_base_url="http://127.0.0.1:1", s3=s3, sqs=queue
    )


def put(store: S3ObjectStore, key: str, body: bytes) -> None:
    store.put_if_absent(key, body, hashlib.sha256(body).hexdigest())


def receive_keys(queue: Queue, want: int) -> list[tuple[Message, list[str]]]:
    """Messages (and the keys each notifies) until ``want`` keys arrived, long polls bounded."""
    out: list[tuple[Message, list[str]]] = []
    for _ in range(5):
        if sum(len(keys) for _, keys in out) >= want:
            break
        out += [(m, [e.key for e in parse_s3_event(m.body)]) for m in queue.receive(wait_s=2)]
    return out


@pytest.fixture
def dataplane(tmp_path: Path, ministack_endpoint: str) -> DataplaneConfig:
    return s3_dataplane(tmp_path, ministack_endpoint)


def test_open_projector_on_s3_and_sqs_ingests_a_pack_and_quarantines_a_malformed_one(
    dataplane: DataplaneConfig,
) -> None:
    assert dataplane.s3 is not None and dataplane.sqs is not None
    config = ProjectorConfig(dataplane, closed_port_url(), "token")  # no call reaches it
    raws = [encode_cas_object(CODEC_VALUE, f"s3 projector value {n}".encode()) for n in range(3)]
    good_body = encode_pack(raws)
    cids = {value_cid_wire(entry.cid) for entry in decode_pack(good_body).entries}
    good = pack_key(SCOPE, "ab" * 16, "01J" + "0" * 23)
    bad = malformed_packs(euid="ba" * 16)[0]

    with open_projector(config) as projector:
        store, queue = projector.store, projector.queue
        assert isinstance(store, S3ObjectStore) and store.bucket == dataplane.s3.bucket
        assert isinstance(queue, SqsQueue) and queue.url.endswith(f"/{dataplane.sqs.name}")
        assert config.root() == f"s3://{dataplane.s3.bucket}/derived/v1"

        put(store, bad.key, bad.body)
        put(store, good, good_body)  # the bucket notifies the queue of each
        worker = projector.worker()
        stats = worker.stats
        for _ in range(5):  # each receive long-polls: the notifications may come one by one
            if stats.packs + stats.quarantined >= 2:
                break
            worker.run_once(wait_s=2)

        assert (stats.packs, stats.values, stats.quarantined) == (1, len(raws), 1)
        assert stats.deleted == stats.messages - 1  # with the pack, S3's s3:TestEvent messages
        assert projector.private_store(SCOPE).missing_values(cids) == set()  # Lance, on S3

        dead = receive_keys(queue.dead_letter_queue(), 1)
        assert [keys for _, keys in dead] == [[bad.key]]
        marker = json.loads(store.get(marker_key(bad.key)))
        assert marker["key"] == bad.key and bad.reason in marker["reason"]
        assert store.get(bad.key) == bad.body  # the bytes are kept
        assert list(store.list(marker_key(good))) == []  # the healthy pack has no marker
        assert queue.approximate_count() == 0  # every message gone from the source queue


def test_open_projector_on_s3_without_an_sqs_queue_is_refused(
    tmp_path: Path, ministack_endpoint: str
) -> None:
    config = ProjectorConfig(
        s3_dataplane(tmp_path, ministack_endpoint, sqs=False), closed_port_url(), "token"
    )
    with pytest.raises(ValueError, match="names s3 but no sqs queue"):
        open_projector(config)
